"""What the reconciler does with an API error: fail the job, or try again later.

A refusal is permanent when sending the same write again can only be refused again:
400 (a malformed object, an admission webhook's denial), 403 (RBAC, or a webhook or
policy that forbids it), 422 (validation), and 404 on a create (the kind or the
namespace is not there). The job fails with the server's own message. Anything else
(429, 5xx, timeouts, connection errors, a 409 or a 404 the cache has not caught up
with) is transient: the job is tried again after an exponential backoff of its own
(`Backoff`: doubling from `base`, at most `cap`, with jitter), so a server that keeps
failing is not sent a request per job more often than that.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from voda.backends.kubernetes.api import ApiError

PERMANENT = frozenset({400, 403, 422})
MAX_MESSAGE = 1024


class Refused(Exception):
    """A write the API server refused for good; the job cannot go on."""

    def __init__(self, what: str, error: ApiError, obj: dict[str, Any] | None = None) -> None:
        self.error = error
        self.obj = obj  # the object refused (an Event names it)
        detail = error.message or error.reason or "refused"
        super().__init__(f"{what} refused by the API server ({error.status}): {detail}")


def permanent(error: ApiError, creating: bool = False) -> bool:
    return error.status in PERMANENT or (creating and error.status == 404)


@dataclass
class Backoff:
    """Per-key exponential backoff: `failed` says when the key may be tried again."""

    base: float = 0.5
    cap: float = 60.0
    jitter: Callable[[], float] = random.random
    failures: dict[str, int] = field(default_factory=dict)
    not_before: dict[str, float] = field(default_factory=dict)

    def failed(self, key: str, now: float) -> float:
        """Note a failure; returns the delay before the next try (half to all of the
        doubled delay, so jobs that failed together do not retry together)."""
        count = self.failures[key] = self.failures.get(key, 0) + 1
        delay = min(self.cap, self.base * 2.0 ** min(count - 1, 30))
        delay *= 0.5 + self.jitter() / 2
        self.not_before[key] = now + delay
        return delay

    def succeeded(self, key: str) -> None:
        self.failures.pop(key, None)
        self.not_before.pop(key, None)

    def due(self, key: str, now: float) -> bool:
        return self.not_before.get(key, now) <= now

    def next_due(self, keys: set[str], now: float) -> float | None:
        """Seconds until the first of `keys` that waits is due (None: none waits)."""
        waits = [self.not_before[k] - now for k in keys if k in self.not_before]
        return max(0.0, min(waits)) if waits else None


def job_event(obj: dict[str, Any], reason: str, message: str, now: float,
              kind: str = "Warning") -> dict[str, Any]:
    """An Event (`kind`: Warning or Normal) on a job object (`kubectl describe` shows it)."""
    meta = obj["metadata"]
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    involved = {"apiVersion": obj.get("apiVersion", ""), "kind": obj.get("kind", ""),
                "name": meta["name"], "namespace": meta.get("namespace", "")}
    if meta.get("uid"):
        involved["uid"] = meta["uid"]
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta['name'][:200]}.",
                     "namespace": meta.get("namespace", "")},
        "involvedObject": involved,
        "reason": reason,
        "message": message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "...",
        "type": kind,
        "source": {"component": "voda"},
        "reportingComponent": "voda",
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
