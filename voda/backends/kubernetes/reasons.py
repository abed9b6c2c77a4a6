"""Why a job holds fewer GPUs than its max, shown on its MPIJob or PyTorchJob object.

When the code of a job's reason changes (voda.core.allocation.reasons; the engine calls
`note_reason` only then, never on every decision), the reconciler, off the decision
path, writes two things on the object of the job's run:

- an Event: reason = the code, message = the sentence; type Normal, Warning for the
  codes that need someone to act (DoesNotFit, PlanRefused). `kubectl describe` and
  `kubectl get events` list it;
- the condition `VodaAtMax` in `status.conditions`, through the status subresource:
  status False with the code and sentence while the job is below its max, True (reason
  AtMax) once it holds its max again. Both CRDs type a condition's `type` as a free
  string (mpi-operator's list is a map keyed by type), so the server keeps it, and both
  operators keep conditions of types they do not own when they set their own. The
  merge patch carries the object's resourceVersion: it replaces the conditions list
  only as it was read, never over an operator's newer write (a 409 reads the
  object afresh and is tried again against it).

Other jobs a sentence mentions are said by the names people gave them (the service sets
the backend's `said`; the engine's sentences key jobs by uid). A preempted job's object
is being deleted: it gets the Event, not the condition. A job
with no object (queued, never started) gets neither. Nothing written is retried beyond
a conflict; a failure is logged and counted (`stats['reason_failures']`) and never
reaches the job's reconciliation or the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from voda.backends.kubernetes.refusals import MAX_MESSAGE

CONDITION = "VodaAtMax"
AT_MAX = "AtMax"
WARNING_CODES = frozenset({"DoesNotFit", "PlanRefused"})

Obj = dict[str, Any]


@dataclass
class PendingReason:
    """The latest change of a job's reason not yet written on its object."""

    code: str | None  # None: it holds its max again
    message: str
    evented: bool = False  # its Event is posted; the condition may wait for a retry

    @property
    def event_reason(self) -> str:
        return self.code or AT_MAX

    @property
    def event_type(self) -> str:
        return "Warning" if self.code in WARNING_CODES else "Normal"


def _short(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "..."


def condition_patch(obj: Obj, reason: PendingReason, now: float) -> Obj:
    """A merge patch of the status subresource that sets the condition and keeps the
    others, valid only against the version read (its resourceVersion)."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [c for c in (obj.get("status") or {}).get("conditions") or []
                  if c.get("type") != CONDITION]
    conditions.append({"type": CONDITION, "status": "True" if reason.code is None else "False",
                       "reason": reason.event_reason, "message": _short(reason.message),
                       "lastTransitionTime": stamp, "lastUpdateTime": stamp})
    patch: Obj = {"status": {"conditions": conditions}}
    if obj["metadata"].get("resourceVersion"):
        patch["metadata"] = {"resourceVersion": obj["metadata"]["resourceVersion"]}
    return patch
