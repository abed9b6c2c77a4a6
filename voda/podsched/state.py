"""What the pod scheduler knows of the cluster, kept from the watches of Nodes and Pods.

Per node the resources that pods hold (bound pods of every scheduler, until
they end; pods of ours whose Binding was posted but not yet seen back count as
soon as it is posted, kube-scheduler's "assumed" pods). Per workload (gang)
our pods, pending and bound. No I/O and no clock: the controller feeds it
objects and times. Thread-safe: the informers write, the scheduling loop reads
snapshots.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from voda.podsched.decide import topology_order
from voda.podsched.model import PODS, NodeState, Pod, Snapshot
from voda.podsched.read import ObjectError, read_node, read_pod

Obj = Mapping[str, Any]
Topology = Callable[[Obj], tuple[str | None, str | None]]  # a Node object -> (leaf, spine)


@dataclass(frozen=True, slots=True)
class PodRecord:
    pod: Pod
    ours: bool  # schedulerName is ours
    deleting: bool  # has a deletionTimestamp
    error: str = ""  # why the pod cannot be read (ours only)
    gated: bool = False  # has scheduling gates: no scheduler may bind it yet
    # Its PodScheduled condition as (status, reason, message), None: it has none.
    scheduled: tuple[str, str, str] | None = None

    @property
    def holds(self) -> bool:
        """Whether it holds its node's resources: bound and not ended."""
        return bool(self.pod.node) and not self.pod.is_terminal


@dataclass(frozen=True, slots=True)
class PodChange:
    """What a pod event meant to the scheduler."""

    record: PodRecord | None  # the pod now (None: deleted)
    before: PodRecord | None
    lost: bool  # one of our bound pods died or went away before it ended


class ClusterState:
    """`topology` names a node's leaf and spine (the cluster view's reading of the
    topology labels, so both schedulers see the same domains)."""

    def __init__(self, scheduler_name: str, topology: Topology | None = None) -> None:
        self.scheduler_name = scheduler_name
        self.topology = topology
        self.lock = threading.RLock()
        self.nodes: dict[str, NodeState] = {}
        self.pods: dict[str, PodRecord] = {}  # by namespace/name
        self._requested: dict[str, dict[str, int]] = {}
        # node -> pod key -> pod, for pods that hold it: all, and those with host ports or
        # required anti-affinity (what the filters check against)
        self._on: dict[str, dict[str, Pod]] = {}
        self._special: dict[str, dict[str, Pod]] = {}
        # pod key -> (node, pod): Binding posted, not seen back yet
        self._assumed: dict[str, tuple[str, Pod]] = {}
        self._ordered: tuple[NodeState, ...] | None = None

    # ----- nodes ----------------------------------------------------------------------------
    def _node(self, obj: Obj) -> NodeState:
        node = read_node(obj)
        if self.topology is not None:
            leaf, spine = self.topology(obj)
            node = replace(node, leaf=leaf, spine=spine)
        return node

    def set_nodes(self, objects: Iterable[Obj]) -> None:
        with self.lock:
            self.nodes = {}
            for obj in objects:
                node = self._node(obj)
                self.nodes[node.name] = node
            self._ordered = None

    def node_event(self, kind: str, obj: Obj) -> tuple[NodeState | None, NodeState | None]:
        """Apply a watch event; returns (before, after)."""
        node = self._node(obj)
        with self.lock:
            before = self.nodes.get(node.name)
            if kind == "DELETED":
                self.nodes.pop(node.name, None)
                after = None
            else:
                self.nodes[node.name] = node
                after = node
            if before == after:  # a status write the scheduler does not read
                return before, after
            if before is None or after is None or (before.leaf, before.spine) != (
                    after.leaf, after.spine):
                self._ordered = None
            elif self._ordered is not None:
                self._ordered = tuple(after if n.name == after.name else n
                                      for n in self._ordered)
            return before, after

    # ----- pods -------------------------------------------------------------------------------
    def set_pods(self, objects: Iterable[Obj]) -> None:
        with self.lock:
            self.pods = {}
            self._requested = {}
            self._on, self._special = {}, {}
            for obj in objects:
                record = self._record(obj)
                if record is not None:
                    self._put(record)
            for key, (node, pod) in list(self._assumed.items()):
                record = self.pods.get(key)
                if record is None or record.pod.node or record.deleting:
                    del self._assumed[key]
                else:
                    self._add(pod, node, +1)

    def pod_event(self, kind: str, obj: Obj) -> PodChange:
        record = None if kind == "DELETED" else self._record(obj)
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        with self.lock:
            before = self.pods.get(key)
            if before is not None:
                self._drop(before)
            if record is not None:
                self._put(record)
            if record is None or record.pod.node or record.deleting or record.pod.is_terminal:
                self._unassume(key)
            lost = (before is not None and before.ours and before.holds and (
                record is None or (record.pod.phase == "Failed")
                or (record.deleting and not before.deleting)))
            return PodChange(record, before, lost)

    def _record(self, obj: Obj) -> PodRecord | None:
        spec = obj.get("spec") or {}
        ours = spec.get("schedulerName") == self.scheduler_name
        deleting = bool((obj.get("metadata") or {}).get("deletionTimestamp"))
        gated = bool(spec.get("schedulingGates"))
        scheduled = _scheduled_condition(obj) if ours else None
        try:
            return PodRecord(read_pod(obj), ours, deleting, gated=gated, scheduled=scheduled)
        except (ObjectError, TypeError, ValueError, AttributeError) as exc:
            if not ours:
                return None  # not ours and unreadable: the API server would not hold such
            meta = obj.get("metadata") or {}
            pod = Pod(namespace=str(meta.get("namespace") or "default"),
                      name=str(meta.get("name", "")), uid=str(meta.get("uid", "")),
                      node=str(spec.get("nodeName") or ""))
            return PodRecord(pod, ours, deleting, error=str(exc), gated=gated,
                             scheduled=scheduled)

    def _put(self, record: PodRecord) -> None:
        self.pods[record.pod.key] = record
        if record.holds:
            self._add(record.pod, record.pod.node, +1)

    def _drop(self, record: PodRecord) -> None:
        self.pods.pop(record.pod.key, None)
        if record.holds:
            self._add(record.pod, record.pod.node, -1)

    def _unassume(self, key: str) -> None:
        found = self._assumed.pop(key, None)
        if found is not None:
            self._add(found[1], found[0], -1)

    def _add(self, pod: Pod, node: str, sign: int) -> None:
        taken = self._requested.setdefault(node, {})
        for resource, amount in pod.requests.items():
            taken[resource] = taken.get(resource, 0) + sign * amount
        taken[PODS] = taken.get(PODS, 0) + sign
        tables = [self._on, self._special] if pod.host_ports or pod.anti_affinity else [
            self._on]
        for table in tables:
            if sign > 0:
                table.setdefault(node, {})[pod.key] = pod
            else:
                held = table.get(node, {})
                # Only this very object: a pod seen bound replaces its assumed self first.
                if held.get(pod.key) is pod:
                    del held[pod.key]
                if not held:
                    table.pop(node, None)

    # ----- bindings posted ---------------------------------------------------------------------
    def assume(self, pod: Pod, node: str) -> None:
        """Count a pod on a node from the moment its Binding is posted."""
        with self.lock:
            record = self.pods.get(pod.key)
            if record is None or record.pod.node or pod.key in self._assumed:
                return
            self._assumed[pod.key] = (node, record.pod)
            self._add(record.pod, node, +1)

    def forget(self, pod: Pod) -> None:
        """A posted Binding failed: the pod holds nothing."""
        with self.lock:
            self._unassume(pod.key)

    def assumed_node(self, key: str) -> str | None:
        with self.lock:
            found = self._assumed.get(key)
            return None if found is None else found[0]

    # ----- reading ----------------------------------------------------------------------------
    def snapshot(self, override: Mapping[str, Mapping[str, int]] | None = None,
                 sensitive: Mapping[str, int] | None = None, everyone: bool = False
                 ) -> Snapshot:
        """Nodes in topology order and what is taken on each; `override` replaces the
        amounts of some resources on some nodes (the GPUs the cluster view counts);
        `everyone`: every pod on each node among the neighbours, not only those with host
        ports or anti-affinity."""
        with self.lock:
            if self._ordered is None:
                self._ordered = topology_order(self.nodes.values())
            requested: dict[str, Mapping[str, int]] = dict(self._requested)
            for node, amounts in (override or {}).items():
                requested[node] = {**requested.get(node, {}), **amounts}
            # Snapshot copies each node's amounts: done under the lock, they are consistent.
            table = self._on if everyone else self._special
            neighbours = {node: tuple(pods.values()) for node, pods in table.items()}
            return Snapshot(self._ordered, requested, sensitive or {}, neighbours, everyone)

    def pending(self) -> list[PodRecord]:
        """Our pods that wait for a node (not bound, not assumed, not ending, not gated)."""
        with self.lock:
            return [r for r in self.pods.values()
                    if r.ours and not r.pod.node and not r.deleting and not r.pod.is_terminal
                    and not r.gated and r.pod.key not in self._assumed]

    def alive(self, pod: Pod) -> bool:
        """Whether this very pod (same uid) is still there and has not ended."""
        with self.lock:
            record = self.pods.get(pod.key)
            return record is not None and record.pod.uid == pod.uid and (
                not record.pod.is_terminal)

    def ours(self) -> list[PodRecord]:
        with self.lock:
            return [r for r in self.pods.values() if r.ours]

    def on_node(self, node: str) -> list[PodRecord]:
        """The pods bound to `node` that hold it (not ended), from the per-node index: each
        node event asks, and scanning every pod (100,000 in a large cluster) for each of
        5,000 nodes took minutes of the GIL after a list."""
        with self.lock:
            found = (self.pods.get(key) for key in self._on.get(node, ()))
            return [r for r in found if r is not None and r.pod.node == node and r.holds]


def _scheduled_condition(obj: Obj) -> tuple[str, str, str] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled":
            return (str(condition.get("status", "")), str(condition.get("reason", "")),
                    str(condition.get("message", "")))
    return None
