"""Kubernetes Events on pods: why a pod went where it went, or why it still waits.

`event_body` builds a core/v1 Event the way kube-scheduler's are read by
`kubectl describe pod`. `EventLimiter` lets the same message about the same
pod through once per `repeat` seconds, so a Pending gang retried on every
cluster change does not flood the API server.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from voda.podsched.model import Pod

SCHEDULED = "Scheduled"
FAILED_SCHEDULING = "FailedScheduling"
WAITING_FOR_GANG = "WaitingForGang"
NODE_NOT_READY = "NodeNotReady"
PREEMPTED = "Preempted"
PREEMPTING = "Preempting"
NOT_EVALUATED = "ConstraintsNotEvaluated"
NORMAL, WARNING = "Normal", "Warning"
MAX_MESSAGE = 1024


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(pod: Pod, reason: str, message: str, kind: str, now: float, component: str,
               instance: str) -> dict[str, Any]:
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{pod.name[:200]}.", "namespace": pod.namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                           "namespace": pod.namespace, **({"uid": pod.uid} if pod.uid else {})},
        "reason": reason,
        "message": message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "...",
        "type": kind,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventLimiter:
    def __init__(self, repeat: float = 60.0) -> None:
        self.repeat = repeat
        self._last: dict[str, tuple[str, float]] = {}

    def allow(self, pod: Pod, reason: str, message: str, now: float) -> bool:
        key = pod.uid or pod.key
        said = (reason, message)
        last = self._last.get(key)
        if last is not None and last[0] == f"{said}" and now - last[1] < self.repeat:
            return False
        self._last[key] = (f"{said}", now)
        return True

    def keep_only(self, pods: Iterable[Pod]) -> None:
        """Forget pods that are gone."""
        alive = {p.uid or p.key for p in pods}
        self._last = {k: v for k, v in self._last.items() if k in alive}
