"""Lost pods and NotReady nodes: what to replace, and how long replacing took.

A bound pod of ours is lost when it fails, is deleted before it ended, or its
node goes NotReady (counted from the moment the node was seen NotReady, once
per pod). The workload's next pod that binds is its replacement: the time from
the loss to that binding is the recovery time. Losses nobody replaces (a
Deployment scaled down) are forgotten after `window` seconds. The nodes the
lost pods were on keep telling where the workload was, so the replacement
lands near them (voda.podsched.decide's recovery rule).

Pods on a node NotReady for `grace` seconds are deleted, the way Kubernetes'
taint manager evicts them (only pods that a controller will recreate), so
their Job, ReplicaSet or StatefulSet makes replacements.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from voda.podsched.model import Pod


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

    def overdue(self, now: float, grace: float) -> list[str]:
        """Nodes NotReady for at least `grace` seconds."""
        return sorted(n for n, since in self._not_ready.items() if now - since >= grace)

    def forget_nodes(self, alive: Iterable[str]) -> None:
        keep = set(alive)
        self._not_ready = {n: t for n, t in self._not_ready.items() if n in keep}
