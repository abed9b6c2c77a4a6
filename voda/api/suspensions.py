"""Jobs held suspended outside Voda (Kueue on Kubernetes), as the service shows them:
the reason in the job's detail, and an event in its history when the hold starts and
when it ends (the job admitted, or no longer running)."""

from __future__ import annotations

from typing import Protocol

from voda.engine.backend import Backend, SupportsSuspension

SUSPENDED, ADMITTED = "Suspended", "Admitted"


class _Service(Protocol):
    backend: Backend
    suspended: dict[str, str]

    def history(self, job: str, now: float, field_name: str, old: str | None, new: str,
                message: str | None = None) -> None: ...


def note_suspensions(service: _Service, now: float) -> None:
    """Take the backend's suspended jobs in (under the service's lock)."""
    if not isinstance(service.backend, SupportsSuspension):
        return
    current = service.backend.suspended()
    for name, why in sorted(current.items()):
        if service.suspended.get(name) is None:
            service.history(name, now, "event", None, SUSPENDED, why)
    for name in sorted(set(service.suspended) - set(current)):
        service.history(name, now, "event", None, ADMITTED,
                        "no longer suspended outside Voda")
    service.suspended = dict(current)
