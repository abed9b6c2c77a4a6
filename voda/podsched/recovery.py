"""Lost pods and NotReady nodes: what to replace, and how long replacing took.

A bound pod of ours is lost when it fails, is deleted before it ended, or its
node goes NotReady (counted from the moment the node was seen NotReady, once
per pod). The workload's next pod that binds is its replacement: the time from
the loss to that binding is the recovery time. Losses nobody replaces (a
Deployment scaled down) are forgotten after `window` seconds. The nodes the
lost pods were on keep telling where the workload was, so the replacement
lands near them (voda.podsched.decide's recovery rule).

A pod on a NotReady node stays bound for as long as it tolerates the node's
NoExecute taint (`node.kubernetes.io/not-ready` when Ready is False,
`node.kubernetes.io/unreachable` when it is Unknown), as Kubernetes' taint
manager keeps it: the smallest tolerationSeconds of its matching tolerations, for
good when they give none, and `default` seconds when it has none (the 300 s the
DefaultTolerationSeconds admission plugin would have given it). Only then is it
deleted (gracefully: on a partitioned node it stays Terminating, so a
StatefulSet never runs a second copy), and only when a controller recreates it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from voda.podsched.model import Pod, Toleration

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300.0


def toleration_seconds(pod: Pod, taint_key: str, default: float) -> float | None:
    """How long the pod stays on a node with this NoExecute taint; None: for good."""
    matching = [t for t in pod.tolerations if _tolerates(t, taint_key)]
    if not matching:
        return default
    seconds = [t.seconds for t in matching if t.seconds is not None]
    return max(0.0, min(seconds)) if seconds else None


def _tolerates(toleration: Toleration, key: str) -> bool:
    """Whether the toleration matches the NoExecute taint `key` (the taints have no value)."""
    if toleration.effect not in ("", "NoExecute"):
        return False
    if toleration.operator == "Exists":
        return not toleration.key or toleration.key == key
    return toleration.key == key and not toleration.value


@dataclass(frozen=True, slots=True)
class Loss:
    pod_key: str
    workload: str
    node: str
    since: float
    ident: str  # the pod's uid (its key when it has none)


class RecoveryTracker:
    def __init__(self, window: float = 600.0) -> None:
        self.window = window
        self._losses: dict[str, Loss] = {}  # by pod key
        self._counted: dict[str, float] = {}  # pod uid (or key) -> when its loss was counted
        self._not_ready: dict[str, float] = {}  # node -> since

    # ----- losses --------------------------------------------------------------------------
    def lost(self, pod: Pod, workload: str, now: float) -> None:
        """Count a pod's loss once, whatever else happens to it later."""
        ident = pod.uid or pod.key
        if ident in self._counted or not pod.node:
            return
        self._counted[ident] = now
        self._losses[pod.key] = Loss(pod.key, workload, pod.node, now, ident)

    def recovering(self, workload: str) -> bool:
        return any(loss.workload == workload for loss in self._losses.values())

    def lost_nodes(self, workload: str) -> dict[str, int]:
        """Where the workload's lost pods were (node -> pods)."""
        out: dict[str, int] = {}
        for loss in self._losses.values():
            if loss.workload == workload:
                out[loss.node] = out.get(loss.node, 0) + 1
        return out

    def replaced(self, workload: str, now: float) -> float | None:
        """A pod of the workload was bound: the recovery time of its oldest loss, if any."""
        oldest = min((loss for loss in self._losses.values() if loss.workload == workload),
                     key=lambda loss: (loss.since, loss.pod_key), default=None)
        if oldest is None:
            return None
        del self._losses[oldest.pod_key]
        return max(0.0, now - oldest.since)

    def back(self, pod_keys: Iterable[str]) -> None:
        """These pods were counted lost but are still there (their node came back)."""
        for key in pod_keys:
            loss = self._losses.pop(key, None)
            if loss is not None:
                self._counted.pop(loss.ident, None)

    def expire(self, now: float) -> None:
        self._losses = {k: v for k, v in self._losses.items() if now - v.since < self.window}
        self._counted = {k: t for k, t in self._counted.items() if now - t < 2 * self.window}

    # ----- nodes ---------------------------------------------------------------------------
    def node_not_ready(self, node: str, now: float) -> None:
        self._not_ready.setdefault(node, now)

    def node_ready(self, node: str) -> None:
        self._not_ready.pop(node, None)

    def not_ready_since(self, node: str) -> float | None:
        return self._not_ready.get(node)

    def not_ready_nodes(self) -> list[tuple[str, float]]:
        """The nodes seen NotReady, with when."""
        return sorted(self._not_ready.items())

    def forget_nodes(self, alive: Iterable[str]) -> None:
        keep = set(alive)
        self._not_ready = {n: t for n, t in self._not_ready.items() if n in keep}
