"""The pod scheduler's GPU claims in the cluster view it shares with the elastic backend.

Before the Bindings of a decision are posted, the GPUs of all its pods are claimed
in the view (owner `pod/<namespace>/<name>`), or none: a claim fails when the GPUs
went to someone else (the elastic backend claims for the workers it pins) since
the snapshot was taken. A claim is released once the view counts the bound pod
itself, or the pod is gone; until then the pod counts twice, which is
conservative. See docs/design/007-secondary-scheduler.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from voda.backends.kubernetes.cluster_view import ClusterView
from voda.podsched.model import Pod


def claim_owner(pod: Pod) -> str:
    return f"pod/{pod.namespace}/{pod.name}"


class Claims:
    def __init__(self, view: ClusterView, alive: Callable[[Pod], bool]) -> None:
        """`alive(pod)`: whether the pod is still there and not ended."""
        self.view = view
        self.alive = alive
        self._lock = threading.Lock()
        self._open: dict[str, Pod] = {}  # claim owner -> pod

    def claim_all(self, placed: Iterable[tuple[Pod, str]]) -> str | None:
        """Claim each (pod, node)'s GPUs, or none; the node refused, or None."""
        done: list[Pod] = []
        for pod, node in placed:
            if pod.gpus <= 0:
                continue
            if not self.view.claim(claim_owner(pod), node, pod.gpus):
                for claimed in done:
                    self.release(claimed)
                return node
            with self._lock:
                self._open[claim_owner(pod)] = pod
            done.append(pod)
        return None

    def release(self, pod: Pod) -> None:
        with self._lock:
            held = self._open.pop(claim_owner(pod), None)
        if held is not None:
            self.view.release(claim_owner(pod))

    def release_counted(self) -> None:
        """Release the claims of pods the view now counts as bound, or that are gone (a
        listener of the view: it runs after each of its changes)."""
        with self._lock:
            if not self._open:
                return
            pending = list(self._open.items())
        for owner, pod in pending:
            with self.view.lock:
                counted = (pod.namespace, pod.name) in self.view.pods
            if counted or not self.alive(pod):
                with self._lock:
                    still = self._open.pop(owner, None)
                if still is not None:
                    self.view.release(owner)

    def open(self) -> list[str]:
        with self._lock:
            return sorted(self._open)
