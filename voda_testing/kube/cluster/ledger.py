"""An audit of GPU use, independent of the simulated scheduler: on every write to the
store (under its lock, so at every moment) it sums the GPUs of the pods that hold
each node's resources and notes any node over its allocatable GPUs."""

from __future__ import annotations

from voda_testing.kube.cluster.nodes import holds_resources, node_gpus, pod_gpus
from voda_testing.kube.store import Change, Store


class GpuLedger:
    def __init__(self, store: Store) -> None:
        self.allocatable: dict[str, int] = {}
        self.held: dict[tuple[str, str], tuple[str, int]] = {}  # pod -> (node, GPUs)
        self.used: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.violations: list[str] = []
        with store.lock:
            for node in store.list("nodes")[0]:
                self.allocatable[node["metadata"]["name"]] = node_gpus(node)
            for pod in store.list("pods")[0]:
                self._pod(pod, False)
            _, self.close = store.subscribe(None, self._on_change)

    def _on_change(self, change: Change) -> None:
        key = change.resource.key
        if key == "nodes":
            name = change.object["metadata"]["name"]
            if change.type == "DELETED":
                self.allocatable.pop(name, None)
            else:
                self.allocatable[name] = node_gpus(change.object)
                self._check(name, change.rv, "allocatable changed")
        elif key == "pods":
            self._pod(change.object, change.type == "DELETED", change.rv)

    def _pod(self, pod: dict, deleted: bool, rv: int = 0) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        before = self.held.pop(key, None)
        if before is not None:
            self.used[before[0]] -= before[1]
        if not deleted and holds_resources(pod):
            node, gpus = pod["spec"]["nodeName"], pod_gpus(pod)
            self.held[key] = (node, gpus)
            self.used[node] = self.used.get(node, 0) + gpus
            self.peak[node] = max(self.peak.get(node, 0), self.used[node])
            self._check(node, rv, f"after a change to {meta['namespace']}/{meta['name']}")

    def _check(self, node: str, rv: int, cause: str = "") -> None:
        used, allocatable = self.used.get(node, 0), self.allocatable.get(node)
        if allocatable is not None and used > allocatable:
            holders = ", ".join(f"{ns}/{name}: {gpus}" for (ns, name), (at, gpus)
                                in sorted(self.held.items()) if at == node)
            self.violations.append(f"rv {rv}: {cause}: node {node} holds {used} GPUs of "
                                   f"{allocatable} ({holders})")
