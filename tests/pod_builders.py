"""Builders for the pod scheduler's values, in the style of tests/builders.py.

    make_pod("w-0").gpus(2).owned_by("Job", "train").obj()
    make_nodes().spines(1).leaves(2).nodes(4, gpus=8).obj()
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from voda.podsched.model import (
    CPU,
    GPU,
    MEMORY,
    PODS,
    Gang,
    Hints,
    NodeState,
    Owner,
    Pod,
    Snapshot,
    Taint,
    Toleration,
)


class PodBuilder:
    def __init__(self, name: str, namespace: str = "default") -> None:
        self._pod = Pod(namespace=namespace, name=name, uid=f"uid-{namespace}-{name}",
                        created=f"2026-01-01T00:00:{len(name) % 60:02d}Z")

    def _set(self, **changes: Any) -> PodBuilder:
        self._pod = replace(self._pod, **changes)
        return self

    def gpus(self, count: int) -> PodBuilder:
        return self._set(requests={**self._pod.requests, GPU: count})

    def requests(self, **amounts: int) -> PodBuilder:
        return self._set(requests={**self._pod.requests, **amounts})

    def selector(self, **labels: str) -> PodBuilder:
        return self._set(node_selector=labels)

    def tolerates(self, key: str, value: str = "", effect: str = "",
                  operator: str = "Equal") -> PodBuilder:
        return self._set(tolerations=(*self._pod.tolerations,
                                      Toleration(key, operator, value, effect)))

    def owned_by(self, kind: str, name: str) -> PodBuilder:
        return self._set(owner=Owner(kind, name, f"uid-{kind}-{name}"))

    def created(self, stamp: str) -> PodBuilder:
        return self._set(created=stamp)

    def on(self, node: str, phase: str = "Running") -> PodBuilder:
        return self._set(node=node, phase=phase)

    def with_(self, **changes: Any) -> PodBuilder:
        return self._set(**changes)

    def obj(self) -> Pod:
        return self._pod


def make_pod(name: str, namespace: str = "default") -> PodBuilder:
    return PodBuilder(name, namespace)


class NodesBuilder:
    """spines x leaves per spine x nodes per leaf, named s<i>, s<i>-l<j>, s<i>-l<j>-n<k>."""

    def __init__(self) -> None:
        self._spines = 1
        self._leaves = 1
        self._nodes = 4
        self._gpus = 8
        self._changes: dict[str, dict[str, Any]] = {}

    def spines(self, count: int) -> NodesBuilder:
        self._spines = count
        return self

    def leaves(self, per_spine: int) -> NodesBuilder:
        self._leaves = per_spine
        return self

    def nodes(self, per_leaf: int, gpus: int = 8) -> NodesBuilder:
        self._nodes, self._gpus = per_leaf, gpus
        return self

    def change(self, node: str, **changes: Any) -> NodesBuilder:
        self._changes.setdefault(node, {}).update(changes)
        return self

    def tainted(self, node: str, key: str, value: str = "", effect: str = "NoSchedule"
                ) -> NodesBuilder:
        return self.change(node, taints=(Taint(key, value, effect),))

    def obj(self) -> tuple[NodeState, ...]:
        nodes = []
        for s in range(self._spines):
            for leaf in range(self._leaves):
                for k in range(self._nodes):
                    spine, leaf_name = f"s{s}", f"s{s}-l{leaf}"
                    name = f"{leaf_name}-n{k}"
                    node = NodeState(
                        name=name,
                        allocatable={GPU: self._gpus, CPU: 64_000, MEMORY: 512 << 30, PODS: 110},
                        labels={"kubernetes.io/hostname": name, "voda.io/leaf": leaf_name,
                                "voda.io/spine": spine},
                        leaf=leaf_name,
                        spine=spine,
                    )
                    if name in self._changes:
                        node = replace(node, **self._changes[name])
                    nodes.append(node)
        return tuple(nodes)


def make_nodes() -> NodesBuilder:
    return NodesBuilder()


def snapshot_of(nodes: tuple[NodeState, ...], bound: list[Pod] | None = None,
                sensitive: dict[str, int] | None = None) -> Snapshot:
    """A snapshot whose requested resources are those of the bound pods."""
    requested: dict[str, dict[str, int]] = {}
    for pod in bound or []:
        taken = requested.setdefault(pod.node, {})
        for resource, amount in pod.requests.items():
            taken[resource] = taken.get(resource, 0) + amount
        taken[PODS] = taken.get(PODS, 0) + 1
    return Snapshot(nodes, requested, sensitive or {})


def gang_of(pods: list[Pod], key: str = "default/Job/train", members: dict[str, int] | None = None,
            member_gpus: int = 0, **hints: Any) -> Gang:
    return Gang(key=key, pending=tuple(pods), hints=Hints(**hints), members=members or {},
                member_gpus=member_gpus)
