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
    state = _Working(snapshot)
    decisions: list[Decision] = []
    for gang in sorted(gangs, key=_gang_order):
        for decision in decide_gang(gang, state.snapshot(), config):
            decisions.append(decision)
            for binding in decision.bindings:
                state.bind(binding, gang.hints.latency_sensitive)
    return decisions


def _gang_order(gang: Gang) -> tuple:
    oldest = min((p.created for p in gang.pending), default="")
    priority = max((p.priority for p in gang.pending), default=0)
    return (not gang.recovering, -priority, oldest, gang.key)


class _Working:
    """The snapshot with the cycle's bindings added."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.nodes = snapshot.nodes
        self.requested = {n: dict(r) for n, r in snapshot.requested.items()}
        self.sensitive = dict(snapshot.sensitive)
        self._current: Snapshot | None = snapshot

    def bind(self, binding: Binding, sensitive: bool) -> None:
        taken = self.requested.setdefault(binding.node, {})
        for resource, amount in binding.pod.requests.items():
            taken[resource] = taken.get(resource, 0) + amount
        taken[filters.PODS] = taken.get(filters.PODS, 0) + 1
        if sensitive:
            self.sensitive[binding.node] = self.sensitive.get(binding.node, 0) + 1
        self._current = None

    def snapshot(self) -> Snapshot:
        if self._current is None:
            self._current = Snapshot(self.nodes, self.requested, self.sensitive)
        return self._current


@dataclass(frozen=True, slots=True)
class _Candidates:
    """The nodes that pass the filters, as a packing view in units of one pod."""

    nodes: tuple[NodeState, ...]
    capacity: Mapping[str, int]  # pods of the gang's shape an empty node holds
    room: Mapping[str, int]  # pods of the gang's shape it still holds
    reasons: Counter[str]  # why the other nodes were left out

    @property
    def total_room(self) -> int:
        return sum(self.room.values())


def decide_gang(gang: Gang, snapshot: Snapshot, config: SchedulerConfig) -> list[Decision]:
    """Bind the gang's pending pods, or say why not (step 2 of the module doc)."""
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
    need = filters.shape(gang.pending)
    candidates = _candidates(gang.pending, snapshot, need)
    settings = config.placement_settings(need.get(GPU, 0))
    job = Job(
        name=gang.key,
        placement_strategy=hints.strategy.value,
        preferred_domain=hints.preferred_domain,
        network_bandwidth=hints.network_bandwidth,
        latency_sensitive=hints.latency_sensitive,
    )
    pods = sorted(gang.pending, key=lambda p: (natural_key(p.name), p.namespace))
    packed, why = _pack(job, len(pods), gang, candidates, snapshot, settings, need)
    if packed is not None:
        return [_bound(gang, pods, packed)]
    if hints.gpu_count is not None or len(pods) == 1:
        return [Decision(gang, Outcome.UNSCHEDULABLE, reason=why)]
    # Not a gang: bind what fits, one pod at a time.
    decisions: list[Decision] = []
    members = dict(gang.members)
    room = dict(candidates.room)
    for pos, pod in enumerate(pods):
        single = replace(gang, pending=(pod,), members=members)
        view = replace(candidates, room=room)
        packed, why = _pack(job, 1, single, view, snapshot, settings, need)
        if packed is None:
            rest = replace(gang, pending=tuple(pods[pos:]), members=members)
            decisions.append(Decision(rest, Outcome.UNSCHEDULABLE, reason=why))
            break
        decisions.append(_bound(single, [pod], packed))
        for node, count in packed.counts.items():
            members[node] = members.get(node, 0) + count
            room[node] -= count
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


def _candidates(pods: Sequence[Pod], snapshot: Snapshot, need: Mapping[str, int]) -> _Candidates:
    """Nodes that pass every pod's filters, with their room in pods of shape `need`."""
    signatures = {}
    for pod in pods:
        key = (tuple(sorted(pod.node_selector.items())), pod.affinity, pod.tolerations)
        signatures.setdefault(key, pod)
    reasons: Counter[str] = Counter()
    nodes, capacity, room = [], {}, {}
    for node in snapshot.nodes:
        problem = None
        for pod in signatures.values():
            problem = filters.static_problem(pod, node)
            if problem is not None:
                break
        if problem is not None:
            reasons[problem] += 1
            continue
        cap = filters.capacity(node, need)
        free = filters.room(node, snapshot, need) if cap else 0
        if free <= 0:
            reasons.update(filters.short_resources(node, snapshot, need) or ["no room"])
        if cap > 0:
            nodes.append(node)
            capacity[node.name] = cap
            room[node.name] = max(0, free)
    return _Candidates(tuple(nodes), capacity, room, reasons)


def _pack(
    job: Job,
    k: int,
    gang: Gang,
    candidates: _Candidates,
    snapshot: Snapshot,
    settings: PlacementSettings,
    need: Mapping[str, int],
) -> tuple[Packed | None, str]:
    """Place k pods of the gang on the candidates: the packing, or None and why not."""
    total = len(snapshot.nodes)
    shape_text = _shape_text(need)
    if candidates.total_room < k:
        held = candidates.total_room
        available = sum(1 for r in candidates.room.values() if r > 0)
        filtered = filters.summary(total, candidates.reasons, available)
        if held == 0:
            return None, f"{k} pod(s) of {shape_text}: {filtered}"
        return None, (f"{k} pod(s) of {shape_text}: the nodes that pass the filters have room "
                      f"for {held}. {filtered}")
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
            packed = _packer(nodes, candidates, snapshot, settings).place(job, k, own)
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
    packer = _packer(candidates.nodes, candidates, snapshot, settings)
    scopes: list[list[str] | None] = []
    # Grow, or recover, where the workload already is (nodes it lost count: a pod on
    # a dead node is replaced near it): its leaves, then its spines.
    held = [n for n in snapshot.nodes if gang.members.get(n.name)]
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


def _packer(nodes: Sequence[NodeState], candidates: _Candidates, snapshot: Snapshot,
            settings: PlacementSettings) -> RequestPacker:
    view = [Node(n.name, candidates.capacity[n.name], leaf=n.leaf, spine=n.spine) for n in nodes]
    used = {n.name: candidates.capacity[n.name] - candidates.room[n.name] for n in nodes}
    sensitive = {n.name: snapshot.sensitive.get(n.name, 0) for n in nodes}
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

