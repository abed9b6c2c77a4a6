"""Where the pending pods go: one scheduling cycle, pure.

`schedule(gangs, snapshot, config)` works on a private copy of what the
snapshot says is taken and returns one or more Decisions per gang:

1. Order the gangs: recovering ones first, then higher pod priority, then the
   oldest pod, then the name, so a cycle is deterministic.
2. For each gang:
   a. bad annotations -> INVALID; a gang (`gpu-count`) whose pods do not add up
      to its GPUs yet -> WAITING; neither holds anything;
   b. filter the nodes (voda.podsched.filters) and count the pods of the gang's
      shape each can still take;
   c. pack the pods with the placement manager's packer (voda.core.placement.request):
      a workload that already holds nodes grows in their leaves, else their
      spine, else anywhere (the recovery rule); a required topology level keeps
      the whole gang in one domain of that level; a preferred one does when a
      domain has room;
   d. a gang binds all its pods or none; other workloads bind what fits, one
      pod at a time when all do not;
   e. what is bound is taken from the working copy before the next gang.

See docs/design/007-secondary-scheduler.md.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from voda.core.model import Job, Node
from voda.core.placement.manager import PlacementSettings
from voda.core.placement.request import CLUSTER, LEVELS, Packed, RequestPacker
from voda.podsched import filters
from voda.podsched.config import SchedulerConfig
from voda.podsched.model import (
    GPU,
    Binding,
    Decision,
    Gang,
    NodeState,
    Outcome,
    Pod,
    Snapshot,
)

_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple:
    """'leaf-10' after 'leaf-9': digits compare as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(text))


def topology_order(nodes: Iterable[NodeState]) -> tuple[NodeState, ...]:
    """Nodes by spine, leaf and name in natural order: adjacent leaves are neighbours."""
    return tuple(sorted(nodes, key=lambda n: (natural_key(n.spine or ""),
                                              natural_key(n.leaf or ""), natural_key(n.name))))


def schedule(gangs: Sequence[Gang], snapshot: Snapshot, config: SchedulerConfig
             ) -> list[Decision]:
    """Decisions for the gangs, in the order they were taken (see the module doc)."""
    return _schedule(gangs, _Working(snapshot), config)


def _schedule(gangs: Sequence[Gang], work: _Working, config: SchedulerConfig
              ) -> list[Decision]:
    decisions: list[Decision] = []
    for gang in sorted(gangs, key=_gang_order):
        for decision in _decide(gang, work, config):
            decisions.append(decision)
            for binding in decision.bindings:
                work.bind(binding, gang.hints.latency_sensitive)
    return decisions


class Planner:
    """`schedule` from cycle to cycle without filtering and indexing the cluster anew.

    It keeps the cycle's views (the nodes that pass a group of pods' filters, their
    room, the packer's index) and brings them up to date with the next snapshot:
    only the nodes whose requested resources changed are looked at again. A
    snapshot with other nodes (any node added, removed or changed: the snapshot's
    node tuple is another object) or another configuration starts afresh. The
    decisions are the ones `schedule` takes on the same snapshot.
    """

    def __init__(self) -> None:
        self._work: _Working | None = None
        self._config: SchedulerConfig | None = None

    def schedule(self, gangs: Sequence[Gang], snapshot: Snapshot, config: SchedulerConfig
                 ) -> list[Decision]:
        work = self._work
        if work is None or config != self._config or snapshot.nodes is not work.nodes or (
                snapshot.everyone != work.everyone):
            work = _Working(snapshot)
            self._work, self._config = work, config
        else:
            work.update(snapshot)
        return _schedule(gangs, work, config)


def decide_gang(gang: Gang, snapshot: Snapshot, config: SchedulerConfig) -> list[Decision]:
    """Bind one gang's pending pods, or say why not (step 2 of the module doc)."""
    return _decide(gang, _Working(snapshot), config)


def _gang_order(gang: Gang) -> tuple:
    oldest = min((p.created for p in gang.pending), default="")
    priority = max((p.priority for p in gang.pending), default=0)
    nominated = any(p.nominated for p in gang.pending)  # it preempted: its room is made
    return (not nominated, not gang.recovering, -priority, oldest, gang.key)


@dataclass(slots=True)
class _View:
    """The nodes that pass a group of pods' filters, as a packing view in pods of one shape.

    Kept for the whole cycle and brought up to date on each binding, so gangs of
    the same shape do not filter and index the cluster again.
    """

    nodes: tuple[NodeState, ...]
    need: Mapping[str, int]
    capacity: dict[str, int]  # pods of the shape an empty node holds
    room: dict[str, int]  # pods of the shape it still holds
    reasons: Counter[str]  # why the other nodes were left out
    settings: PlacementSettings
    sensitive: Mapping[str, int]
    members: tuple[Pod, ...] = ()  # one pod per filter signature
    one_per_node: bool = False  # host ports or self anti-affinity: one such pod per node
    _packer: RequestPacker | None = None
    exact: bool = True  # the reasons are those of the current room (no refresh since)

    @property
    def total_room(self) -> int:
        return sum(self.room.values())

    def packer(self) -> RequestPacker:
        if self._packer is None:
            self._packer = _packer(self.nodes, self, self.settings)
        return self._packer

    def refresh(self, node: str, room: int) -> None:
        if node in self.room and self.room[node] != room:
            self.room[node] = room
            self.exact = False
            if self._packer is not None:
                self._packer.set_free(node, room)


class _Working:
    """The snapshot with the cycle's bindings added, and the views built on it."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.nodes = snapshot.nodes
        self.by_name = {n.name: n for n in snapshot.nodes}
        self.requested = {n: dict(r) for n, r in snapshot.requested.items()}
        self.sensitive = dict(snapshot.sensitive)
        self.everyone = snapshot.everyone
        self.neighbours = {n: list(p) for n, p in snapshot.neighbours.items()}
        # Pods' labels matter to filtering once some pod has anti-affinity.
        self.labelled = any(p.anti_affinity for ps in self.neighbours.values() for p in ps)
        self._views: dict[tuple, _View] = {}

    def free(self, node: NodeState, resource: str) -> int:
        return node.allocatable.get(resource, 0) - self.requested.get(node.name, {}).get(
            resource, 0)

    def bind(self, binding: Binding, sensitive: bool) -> None:
        node = binding.node
        pod = binding.pod
        taken = self.requested.setdefault(node, {})
        for resource, amount in pod.requests.items():
            taken[resource] = taken.get(resource, 0) + amount
        taken[filters.PODS] = taken.get(filters.PODS, 0) + 1
        if self.everyone or pod.host_ports or pod.anti_affinity:
            self.neighbours.setdefault(node, []).append(pod)
            self.labelled = self.labelled or bool(pod.anti_affinity)
        self._refresh(node)
        if sensitive:
            self._sensitive(node, self.sensitive.get(node, 0) + 1)

    def update(self, snapshot: Snapshot) -> None:
        """Take the requested resources and latency-sensitive pods of a later snapshot of the
        same nodes, refreshing the views where they changed."""
        empty: Mapping[str, int] = {}
        for node in set(self.requested) | set(snapshot.requested):
            new = snapshot.requested.get(node, empty)
            if self.requested.get(node, empty) != new:
                self.requested[node] = dict(new)
                self._refresh(node)
        for node in set(self.neighbours) | set(snapshot.neighbours):
            pods = list(snapshot.neighbours.get(node, ()))
            if self.neighbours.get(node, []) != pods:  # a pod replaced by one of equal size
                self.neighbours[node] = pods
                self._refresh(node)
        self.labelled = any(p.anti_affinity for ps in self.neighbours.values() for p in ps)
        for node in set(self.sensitive) | set(snapshot.sensitive):
            count = snapshot.sensitive.get(node, 0)
            if self.sensitive.get(node, 0) != count:
                self._sensitive(node, count)

    def _refresh(self, node: str) -> None:
        state = self.by_name.get(node)
        if state is None:
            return
        for view in self._views.values():
            view.exact = False  # which resources a node lacks may change with its room
            if node in view.room:
                view.refresh(node, self.room(state, view.need, view))

    def room(self, node: NodeState, need: Mapping[str, int], view: _View) -> int:
        """Pods of the view's shape the node holds now: by resources, and none when they
        clash with its pods (host ports, anti-affinity), one when they clash with each
        other."""
        free = filters.room(node, self, need)
        if free and filters.neighbour_problem(view.members, self.neighbours.get(node.name, ())):
            return 0
        return min(free, 1) if view.one_per_node else free

    def _sensitive(self, node: str, count: int) -> None:
        delta = count - self.sensitive.get(node, 0)
        self.sensitive[node] = count
        for view in self._views.values():
            if view._packer is not None:
                view._packer.add_sensitive(node, delta)

    def view(self, pods: Sequence[Pod], need: Mapping[str, int], config: SchedulerConfig,
             fresh: bool = False) -> _View:
        """The view for these pods' filters and shape (`fresh`: not from the cache)."""
        signatures: dict[tuple, Pod] = {}
        for pod in pods:
            signatures.setdefault(_signature(pod, self.labelled), pod)
        ordered = sorted(signatures)
        key = (tuple(ordered), tuple(sorted(need.items())))
        if not fresh and key in self._views:
            return self._views[key]
        # In the key's order, not the gang's: a node's reason is the first filter it fails,
        # so a view cached for one gang must give another gang of these signatures its own.
        view = self._build([signatures[s] for s in ordered], need, config)
        self._views[key] = view
        return view

    def _build(self, pods: Sequence[Pod], need: Mapping[str, int], config: SchedulerConfig
               ) -> _View:
        reasons: Counter[str] = Counter()
        nodes, capacity, room = [], {}, {}
        single = filters.one_per_node(pods)
        for node in self.nodes:
            problem = None
            for pod in pods:
                problem = filters.static_problem(pod, node)
                if problem is not None:
                    break
            if problem is not None:
                reasons[problem] += 1
                continue
            cap = filters.capacity(node, need)
            free = filters.room(node, self, need) if cap else 0
            clash = filters.neighbour_problem(pods, self.neighbours.get(node.name, ()))
            if clash is not None and cap > 0:
                reasons[clash] += 1
                free = 0
            elif free <= 0:
                reasons.update(filters.short_resources(node, self, need) or ["no room"])
            if cap > 0:
                nodes.append(node)
                capacity[node.name] = min(cap, 1) if single else cap
                room[node.name] = max(0, min(free, 1) if single else free)
        return _View(tuple(nodes), need, capacity, room, reasons,
                     config.placement_settings(need.get(GPU, 0)), self.sensitive,
                     tuple(pods), single)


def _signature(pod: Pod, labelled: bool) -> tuple:
    """What the filters read of a pod: pods with equal signatures pass the same nodes
    (`labelled`: some pod's anti-affinity may select pods by their labels)."""
    return (tuple(sorted(pod.node_selector.items())), pod.affinity, pod.tolerations,
            pod.volume_topology, pod.host_ports, pod.anti_affinity,
            (pod.namespace, tuple(sorted(pod.labels.items()))) if labelled or (
                pod.anti_affinity) else None)


def _decide(gang: Gang, work: _Working, config: SchedulerConfig) -> list[Decision]:
    if not gang.pending:
        return []
    if gang.hint_errors:
        return [Decision(gang, Outcome.INVALID,
                         reason="invalid annotations: " + "; ".join(gang.hint_errors))]
    hints = gang.hints
    pending_gpus = sum(p.gpus for p in gang.pending)
    if hints.gpu_count is not None and gang.member_gpus + pending_gpus < hints.gpu_count:
        return [Decision(gang, Outcome.WAITING, reason=(
            f"gang of {hints.gpu_count} GPUs: its pods request {gang.member_gpus + pending_gpus} "
            f"so far ({gang.member_gpus} bound, {pending_gpus} in {len(gang.pending)} pending "
            "pods); waiting for the rest, holding nothing"))]
    unsupported = sorted({u for p in gang.pending for u in p.unsupported})
    if unsupported:
        return [Decision(gang, Outcome.INVALID, reason=(
            f"{'; '.join(unsupported)}: not evaluated by this scheduler; "
            f"{filters.USE_DEFAULT}"))]
    blocked = sorted({p.volume_error for p in gang.pending if p.volume_error})
    if blocked:
        return [Decision(gang, Outcome.UNSCHEDULABLE, reason=(
            f"0/{len(work.nodes)} nodes are available: {'; '.join(blocked)}."))]
    need = filters.shape(gang.pending)
    view = work.view(gang.pending, need, config)
    job = Job(
        name=gang.key,
        placement_strategy=hints.strategy.value,
        preferred_domain=hints.preferred_domain,
        network_bandwidth=hints.network_bandwidth,
        latency_sensitive=hints.latency_sensitive,
    )
    pods = sorted(gang.pending, key=lambda p: (natural_key(p.name), p.namespace))
    packed, why = _pack(job, len(pods), gang, view, work)
    if packed is not None:
        return [_bound(gang, pods, packed)]
    if hints.gpu_count is not None or len(pods) == 1:
        if not view.exact:  # the reasons of a view refreshed since it was built: count again
            _, why = _pack(job, len(pods), gang,
                           work.view(gang.pending, need, config, fresh=True), work)
        return [Decision(gang, Outcome.UNSCHEDULABLE, reason=why)]
    # Not a gang: bind what fits, one pod at a time (on a private view).
    decisions: list[Decision] = []
    members = dict(gang.members)
    own = work.view(gang.pending, need, config, fresh=True)
    for pos, pod in enumerate(pods):
        single = replace(gang, pending=(pod,), members=members)
        packed, why = _pack(job, 1, single, own, work)
        if packed is None:
            rest = replace(gang, pending=tuple(pods[pos:]), members=members)
            decisions.append(Decision(rest, Outcome.UNSCHEDULABLE, reason=why))
            break
        decisions.append(_bound(single, [pod], packed))
        for node, count in packed.counts.items():
            members[node] = members.get(node, 0) + count
            own.refresh(node, own.room[node] - count)
    return decisions


def _bound(gang: Gang, pods: Sequence[Pod], packed: Packed) -> Decision:
    bindings = []
    queue = list(pods)
    for node, count in packed.counts.items():
        for _ in range(count):
            bindings.append(Binding(queue.pop(0), node))
    where = {"node": "node", "leaf": "leaf", "spine": "spine"}.get(packed.level, "")
    if packed.level == CLUSTER:
        domain_text = f"across spines ({', '.join(packed.leaves)})"
    elif packed.level == "spine":
        domain_text = f"spine {packed.domain} ({', '.join(packed.leaves)})"
    else:
        domain_text = f"{where} {packed.domain}"
    nodes = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in packed.counts.items())
    reason = (f"{len(bindings)} pod(s) of {gang.key} placed in {domain_text}, score "
              f"{packed.score:.3f}: {nodes}")
    return Decision(gang, Outcome.BOUND, bindings=tuple(bindings), reason=reason,
                    level=packed.level, domain=packed.domain, score=packed.score)


def _pack(job: Job, k: int, gang: Gang, candidates: _View, work: _Working
          ) -> tuple[Packed | None, str]:
    """Place k pods of the gang on the candidates: the packing, or None and why not."""
    total = len(work.nodes)
    shape_text = _shape_text(candidates.need)
    settings = candidates.settings
    if candidates.total_room < k:
        held = candidates.total_room
        if held == 0:
            return None, (f"{filters.summary(total, candidates.reasons)} "
                          f"({k} pod(s) of {shape_text})")
        available = sum(1 for r in candidates.room.values() if r > 0)
        others = f"; {filters.counted(candidates.reasons)}" if candidates.reasons else ""
        return None, (f"0/{total} nodes are available: {k} pod(s) of {shape_text}, room for "
                      f"{held} on the {available} node(s) that pass the filters{others}.")
    own = {n: c for n, c in gang.members.items() if n in candidates.room}
    hints = gang.hints
    level_key = hints.required_topology or hints.preferred_topology
    if level_key is not None:
        groups = _groups(candidates.nodes, level_key)
        if own:  # the workload's domain at that level, when it has one
            mine = [g for g in groups if any(n.name in own for n in g[1])]
            groups = mine or groups
        best: tuple[tuple, Packed] | None = None
        most = (0, 0, "")
        for order, (value, nodes) in enumerate(groups):
            room = sum(candidates.room[n.name] for n in nodes)
            most = max(most, (room, -order, value))
            if room < k:
                continue
            packed = _packer(nodes, candidates, settings).place(job, k, own)
            if packed is not None:
                key = (LEVELS.index(packed.level), -packed.score, order)
                if best is None or key < best[0]:
                    best = (key, packed)
        if best is not None:
            return best[1], ""
        if hints.required_topology is not None:
            if not groups:
                return None, (f"{k} pod(s) of {shape_text} require one {level_key} domain: no "
                              f"node that passes the filters has the label {level_key}")
            return None, (f"{k} pod(s) of {shape_text} require one {level_key} domain: none has "
                          f"room for {k}, the most is {most[0]} in {level_key}={most[2]}")
    packer = candidates.packer()
    scopes: list[list[str] | None] = []
    # Grow, or recover, where the workload already is (nodes it lost count: a pod on
    # a dead node is replaced near it): its leaves, then its spines.
    held = [work.by_name[n] for n in gang.members if gang.members[n] and n in work.by_name]
    if held:
        scopes.append(sorted({n.leaf or f"leaf-{n.name}" for n in held}))
        scopes.append(sorted({n.spine or "spine" for n in held}))
    scopes.append(None)
    for scope in scopes:
        packed = packer.place(job, k, own, within=scope)
        if packed is not None:
            return packed, ""
    return None, (f"{k} pod(s) of {shape_text}: no placement found among "
                  f"{len(candidates.nodes)} nodes with room")


def _packer(nodes: Sequence[NodeState], candidates: _View, settings: PlacementSettings
            ) -> RequestPacker:
    view = [Node(n.name, candidates.capacity[n.name], leaf=n.leaf, spine=n.spine) for n in nodes]
    used = {n.name: candidates.capacity[n.name] - candidates.room[n.name] for n in nodes}
    sensitive = {n.name: candidates.sensitive.get(n.name, 0) for n in nodes}
    return RequestPacker(view, used, settings, sensitive)


def _groups(nodes: Sequence[NodeState], label: str) -> list[tuple[str, list[NodeState]]]:
    """Nodes by their value of a topology label (nodes without it are in no group)."""
    groups: dict[str, list[NodeState]] = {}
    for node in nodes:
        value = node.labels.get(label)
        if value is not None:
            groups.setdefault(value, []).append(node)
    return sorted(groups.items(), key=lambda kv: natural_key(kv[0]))


def _shape_text(need: Mapping[str, int]) -> str:
    gpus = need.get(GPU, 0)
    return f"{gpus} GPU(s)" if gpus else "no GPU"

