"""The topology-aware placer: pack each job on few nodes and leaves, move few workers.

Per GPU type, one call:

1. keep: every job keeps its workers on the nodes that still exist (a job that
   shrinks drops its smallest shards first);
2. add: jobs short of workers (new, grown, or that lost a node) are placed,
   largest first. A job that already runs grows on its own nodes, then near
   them; if that spans more nodes or leaves than the job needs, the whole job
   is placed afresh when that is tighter;
3. defragment, only when step 2 left a consolidated job wider than it needs:
   a. when at least `rebuild_changed_share` of the jobs changed, the ideal
      layout of the jobs that start or keep their size is packed from scratch
      around the resized ones and matched onto the current nodes with
      voda.core.placement.matching (linear sum assignment, most workers kept in
      place); it is taken when it is tighter, reachable (below) and moves at
      most `defragment_max_moved_jobs` jobs that ran before;
   b. otherwise each such job that fits on one node gets one, by moving at most
      `defragment_max_moved_jobs` unchanged one-node jobs elsewhere.

The result must also be reachable: a plan applies halts, scale-ins and
migrations before starts and scale-outs, one at a time, and no node may go
over capacity on the way (`sequence_problems`). GPUs that a resized job leaves
stay reserved for the rest of the call, and when a result is still not
reachable the call is redone with less freedom (MODES), down to "running jobs
only grow in place", which always is.

Packing a request of k GPUs (consolidated): one node when one has room (best
fit: the fullest node that fits), else one leaf (fewest nodes: largest free
nodes first, the rest on the best-fitting node), else leaves of one spine
(largest first, then the best-fitting leaf), else several spines. Among
candidates with the same span, the weighted score decides: resource
availability, topology alignment, domain utilization, historical performance.
See docs/design/003-placement.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from voda.core.model import Allocation, Cluster, Job, JobPlacement, Node, Placement
from voda.core.placement.first_fit import first_fit, shrink
from voda.core.placement.layout import half_node, spread_pays, worth_moving
from voda.core.placement.matching import apply_mapping, match_layouts
from voda.core.placement.topology import FreeIndex, Topology
from voda.core.plan import sequence_problems

CONSOLIDATED, DISTRIBUTED, BALANCED = "consolidated", "distributed", "balanced"
STRATEGIES = (CONSOLIDATED, DISTRIBUTED, BALANCED)

NodeCounts = dict[int, int]  # node id in a FreeIndex -> workers


def strategy_of(job: Job) -> str:
    """The job's placement strategy; an unknown name counts as consolidated."""
    return job.placement_strategy if job.placement_strategy in STRATEGIES else CONSOLIDATED


@dataclass(frozen=True)
class PlacementSettings:
    """Weights of the candidate score and the limits of the topology-aware placer.

    `network_bandwidth` of a job and `leaf_uplink_bandwidth` share one unit
    (Gbit/s by convention). `max_nodes_per_leaf` / `max_gpus_per_leaf` bound
    what one job takes of one leaf (None: no bound); a job that cannot be placed
    within them is placed without them. `domain_performance` maps a leaf or
    spine name to a score in [0, 1] learned from past runs (absent: 0.5).
    """

    resource_weight: float = 0.4
    topology_weight: float = 0.3
    utilization_weight: float = 0.2
    history_weight: float = 0.1
    max_nodes_per_leaf: int | None = None
    max_gpus_per_leaf: int | None = None
    leaf_uplink_bandwidth: float = 100.0
    domain_performance: Mapping[str, float] = field(default_factory=dict)
    # Best-fit candidates scored per request: bounds the work on large clusters.
    candidates: int = 16
    # Step 3: whether it runs, how many unchanged jobs it may move, and the share of
    # changed jobs from which it rebuilds the whole layout.
    defragment: bool = True
    defragment_max_moved_jobs: int = 2
    rebuild_changed_share: float = 0.5
    # A consolidated job too large for one node is spread over nodes at most half
    # full of it, so fewer of its workers share each node's network link: always
    # (spread_multi_node), or when the job's category ran faster so (learn_layout).
    spread_multi_node: bool = False
    learn_layout: bool = True
    # A running job moves to the other layout only when it is known to be faster
    # by more than this share of the epoch time (a move restarts the job).
    relayout_margin: float = 0.3
    # A new placement is spread only when that is known to be faster by this share.
    spread_margin: float = 0.25

    def __post_init__(self) -> None:
        problems = settings_problems(self)
        if problems:
            raise ValueError("placement settings: " + "; ".join(problems))
        object.__setattr__(
            self, "domain_performance", MappingProxyType(dict(self.domain_performance))
        )

    def history(self, leaf: str, spine: str) -> float:
        perf = self.domain_performance
        return perf.get(leaf, perf.get(spine, 0.5))


def settings_problems(s: PlacementSettings) -> list[str]:
    """Reasons the settings are invalid, as 'field: reason' strings."""
    problems = []
    for name in ("resource_weight", "topology_weight", "utilization_weight", "history_weight"):
        value = getattr(s, name)
        if not (isinstance(value, int | float) and value >= 0):
            problems.append(f"{name}: must be a non-negative number, got {value!r}")
    for name in ("max_nodes_per_leaf", "max_gpus_per_leaf"):
        value = getattr(s, name)
        if value is not None and not (isinstance(value, int) and value >= 1):
            problems.append(f"{name}: must be None or an integer >= 1, got {value!r}")
    if not s.leaf_uplink_bandwidth > 0:
        problems.append(f"leaf_uplink_bandwidth: must be positive, got {s.leaf_uplink_bandwidth}")
    if not (isinstance(s.candidates, int) and s.candidates >= 1):
        problems.append(f"candidates: must be an integer >= 1, got {s.candidates!r}")
    for name in ("defragment", "spread_multi_node", "learn_layout"):
        if not isinstance(getattr(s, name), bool):
            problems.append(f"{name}: must be true or false, got {getattr(s, name)!r}")
    for name in ("relayout_margin", "spread_margin"):
        value = getattr(s, name)
        if not (isinstance(value, int | float) and 0 <= value < 1):
            problems.append(f"{name}: must lie in [0, 1), got {value!r}")
    if not 0 <= s.rebuild_changed_share <= 1:
        problems.append(
            f"rebuild_changed_share: must lie in [0, 1], got {s.rebuild_changed_share}"
        )
    if not (isinstance(s.defragment_max_moved_jobs, int) and s.defragment_max_moved_jobs >= 0):
        problems.append(
            "defragment_max_moved_jobs: must be an integer >= 0, "
            f"got {s.defragment_max_moved_jobs!r}"
        )
    for domain, score in s.domain_performance.items():
        if not 0 <= score <= 1:
            problems.append(f"domain_performance[{domain!r}]: must lie in [0, 1], got {score}")
    return problems


@dataclass(slots=True)
class _Ask:
    """One request: k GPUs for a job, with the constraints that apply to it."""

    job: Job
    k: int
    spread: bool  # distributed: spread across nodes and leaves
    node_cap: int  # most workers per node (balanced: half a node)
    sensitive: bool  # latency-sensitive: avoid nodes of other latency-sensitive jobs
    own: NodeCounts  # the job's workers already placed
    near_leaves: frozenset[int] = frozenset()
    near_spines: frozenset[int] = frozenset()
    allowed: list[int] | None = None  # leaf ids (preferred domain with room)
    single_leaf: bool = False  # bandwidth above a leaf uplink
    max_nodes_per_leaf: int | None = None
    max_gpus_per_leaf: int | None = None

    def relaxed(self, keep_sensitive: bool = False) -> _Ask:
        """The same request with the optional constraints dropped (or all but one)."""
        return _Ask(self.job, self.k, keep_sensitive, 1 << 30, keep_sensitive, self.own,
                    self.near_leaves, self.near_spines)


class _Packer:
    """Packing requests on one FreeIndex (one GPU type) under the settings."""

    def __init__(
        self, ix: FreeIndex, settings: PlacementSettings, jobs: Mapping[str, Job] | None = None
    ) -> None:
        self.ix = ix
        self.s = settings
        self.jobs: Mapping[str, Job] = jobs or {}
        caps = sorted(ix.cap, reverse=True)
        self._node_prefix = _prefix(caps)
        self._leaf_prefix = _prefix(sorted(ix.leaf_cap, reverse=True))
        # Free nodes of a leaf, largest first, for requests without per-node limits.
        self._rooms: dict[int, tuple[int, list[tuple[int, int]]]] = {}
        self._reserved: list[tuple[Job, NodeCounts]] = []
        self.released = False  # whether reservations had to be given back
        self._spread_pays: dict[tuple[str, int], bool] = {}
        self._half: tuple[list[int], list[int]] | None = None
        self.defragmented = False  # whether step 3b moved a job
        self._history = [
            settings.history(name, ix.spine_names[ix.leaf_spine[leaf]])
            for leaf, name in enumerate(ix.leaf_names)
        ]

    # ----- the span a job needs and the span it has -----------------------------
    def halves(self, job: Job, total: int) -> bool:
        """Whether a job of `total` workers gets at most half a node on each node.

        Balanced jobs always do; a consolidated job wider than one node does when
        `spread_multi_node` says so, or when its category's epoch times show that
        spreading runs faster (voda.core.placement.layout).
        """
        strategy = strategy_of(job)
        if strategy == BALANCED:
            return True
        if strategy != CONSOLIDATED or job.latency_sensitive or total <= self.ix.max_cap:
            return False
        if self.s.spread_multi_node:
            return True
        if not self.s.learn_layout or not job.layout_throughput:
            return False
        key = (job.name, total)
        known = self._spread_pays.get(key)
        if known is None:
            known = spread_pays(job.layout_throughput, total, self.ix.max_cap,
                                self.s.spread_margin)
            self._spread_pays[key] = known
        return known

    def slow_layout(self, job: Job, counts: NodeCounts) -> bool:
        """Whether a running job's layout is known to be slower than the other by a margin."""
        if (not self.s.learn_layout or self.s.spread_multi_node
                or strategy_of(job) != CONSOLIDATED or job.latency_sensitive):
            return False
        return worth_moving(job.layout_throughput, sum(counts.values()), len(counts),
                            self.ix.max_cap, self.s.relayout_margin)

    def penalty(self, job: Job, counts: NodeCounts) -> int:
        """Nodes and leaves used beyond what the job needs on an empty cluster.

        For a job spread at half a node per node, what it needs is counted with
        halved nodes, and every node holding more than half a node adds one.
        """
        if strategy_of(job) != CONSOLIDATED or job.latency_sensitive or not counts:
            return 0
        k = sum(counts.values())
        leaves = {self.ix.leaf[i] for i in counts}
        if self.halves(job, k):
            node_prefix, leaf_prefix = self._half_prefixes()
            half = half_node(self.ix.max_cap)
            crowded = sum(1 for c in counts.values() if c > half)
            return crowded + max(0, len(counts) - _needed(node_prefix, k)) + max(
                0, len(leaves) - _needed(leaf_prefix, k)
            )
        return (len(counts) - _needed(self._node_prefix, k)) + (
            len(leaves) - _needed(self._leaf_prefix, k)
        )

    def _half_prefixes(self) -> tuple[list[int], list[int]]:
        """Prefix sums of node and leaf capacities with every node capped at half a node."""
        if self._half is None:
            ix, half = self.ix, half_node(self.ix.max_cap)
            leaf_caps = [sum(min(ix.cap[i], half) for i in nodes) for nodes in ix.leaf_nodes]
            self._half = (_prefix(sorted((min(c, half) for c in ix.cap), reverse=True)),
                          _prefix(sorted(leaf_caps, reverse=True)))
        return self._half

    # ----- a request ------------------------------------------------------------
    def ask(self, job: Job, k: int, own: NodeCounts) -> _Ask:
        ix, s = self.ix, self.s
        strategy = strategy_of(job)
        spread = strategy == DISTRIBUTED or job.latency_sensitive
        node_cap = ix.max_cap
        if self.halves(job, k + sum(own.values())):
            node_cap = half_node(ix.max_cap)
        near_leaves = {ix.leaf[i] for i in own}
        allowed = None
        if job.preferred_domain:
            leaves = ix.domain_leaves(job.preferred_domain)
            if sum(ix.leaf_free[leaf] for leaf in leaves) >= k:
                allowed = leaves
            near_leaves.update(leaves)
        bandwidth = job.network_bandwidth
        return _Ask(
            job=job,
            k=k,
            spread=spread,
            node_cap=node_cap,
            sensitive=job.latency_sensitive,
            own=own,
            near_leaves=frozenset(near_leaves),
            near_spines=frozenset(ix.leaf_spine[leaf] for leaf in near_leaves),
            allowed=allowed,
            single_leaf=bandwidth is not None and bandwidth > s.leaf_uplink_bandwidth,
            max_nodes_per_leaf=s.max_nodes_per_leaf,
            max_gpus_per_leaf=s.max_gpus_per_leaf,
        )

    def reserve(self, job: Job, counts: NodeCounts) -> None:
        """Keep GPUs taken for the rest of the call (see _add), unless room runs out."""
        self.take(job, counts)
        self._reserved.append((job, counts))

    def unreserve(self, job: Job, counts: NodeCounts) -> None:
        """Give back a reservation, if `place` has not given it back already."""
        for pos, (other, reserved) in enumerate(self._reserved):
            if other is job and reserved is counts:
                self.release(job, counts)
                del self._reserved[pos]
                return

    def place(self, ask: _Ask) -> NodeCounts:
        """Where the request goes (nothing is taken): constraints first, then relaxed."""
        if self.ix.total_free < ask.k:
            for job, counts in self._reserved:
                self.release(job, counts)
            self._reserved.clear()
            self.released = True
        attempts = [ask]
        if ask.allowed is not None:
            attempts.append(_without_domain(ask))
        if ask.sensitive:
            attempts.append(ask.relaxed(keep_sensitive=True))
        attempts.append(ask.relaxed())
        for attempt in attempts:
            strategy = self._spread if attempt.spread else self._consolidate
            counts = strategy(attempt)
            if counts is not None:
                return counts
        return self._anywhere(ask.k)

    def take(self, job: Job, counts: NodeCounts) -> None:
        for i, c in counts.items():
            self.ix.take(i, c, job.latency_sensitive)

    def release(self, job: Job, counts: NodeCounts) -> None:
        for i, c in counts.items():
            self.ix.release(i, c, job.latency_sensitive)

    # ----- rooms and scores -------------------------------------------------------
    def room(self, ask: _Ask, i: int) -> int:
        ix = self.ix
        if ask.sensitive and ix.sensitive[i] - ask.own.get(i, 0) > 0:
            return 0
        return min(ix.free[i], ask.node_cap)

    def _score(self, ask: _Ask, leaf: int, fit: float) -> float:
        """The weighted score of a candidate in `leaf`; `fit` in [0, 1], 1 is a tight fit."""
        ix, s = self.ix, self.s
        spine = ix.leaf_spine[leaf]
        if leaf in ask.near_leaves:
            alignment = 1.0
        elif spine in ask.near_spines:
            alignment = 0.5
        else:
            alignment = 0.0
        utilization = 1.0 - ix.leaf_free[leaf] / ix.leaf_cap[leaf]
        if ask.spread:
            fit, utilization = 1.0 - fit, 1.0 - utilization
        history = self._history[leaf]
        return (
            s.resource_weight * fit
            + s.topology_weight * alignment
            + s.utilization_weight * utilization
            + s.history_weight * history
        )

    def _leaf_rooms(self, ask: _Ask, leaf: int) -> list[tuple[int, int]]:
        """(room, node) of the leaf's nodes with room, largest first, within the limits."""
        ix = self.ix
        if not ask.sensitive and ask.node_cap >= ix.max_cap:
            cached = self._rooms.get(leaf)
            if cached is None or cached[0] != ix.leaf_version[leaf]:
                rooms = sorted(
                    ((ix.free[i], i) for i in ix.leaf_nodes[leaf] if ix.free[i] > 0),
                    key=lambda x: (-x[0], x[1]),
                )
                cached = (ix.leaf_version[leaf], rooms)
                self._rooms[leaf] = cached
            rooms = cached[1]
        else:
            rooms = sorted(
                ((r, i) for i in ix.leaf_nodes[leaf] if (r := self.room(ask, i)) > 0),
                key=lambda x: (-x[0], x[1]),
            )
        if ask.max_nodes_per_leaf is not None:
            rooms = rooms[: ask.max_nodes_per_leaf]
        return rooms

    def _leaf_room(self, ask: _Ask, leaf: int) -> int:
        plain = not ask.sensitive and ask.node_cap >= self.ix.max_cap
        if plain and ask.max_nodes_per_leaf is None:
            total = self.ix.leaf_free[leaf]
        else:
            total = sum(r for r, _ in self._leaf_rooms(ask, leaf))
        if ask.max_gpus_per_leaf is not None:
            total = min(total, ask.max_gpus_per_leaf)
        return total

    def _leaves(self, ask: _Ask) -> list[int]:
        """Candidate leaves: the preferred domain, else the near leaves then the others."""
        if ask.allowed is not None:
            return ask.allowed
        near = sorted(ask.near_leaves)
        near_set = set(near)
        return near + [leaf for leaf in range(len(self.ix.leaf_names)) if leaf not in near_set]

    # ----- consolidated and balanced ------------------------------------------------
    def _consolidate(self, ask: _Ask) -> NodeCounts | None:
        k = ask.k
        if k <= ask.node_cap:
            node = self._best_node(ask)
            if node is not None:
                return {node: k}
        leaf = self._best_leaf(ask)
        if leaf is not None:
            return self._fill_leaf(ask, leaf, k)
        if ask.single_leaf:
            return None
        return self._multi_leaf(ask)

    def _best_node(self, ask: _Ask) -> int | None:
        """The best-scoring node with room for the whole request, or None."""
        ix, k = self.ix, ask.k
        pool: Iterable[int]
        if ask.allowed is not None:
            pool = (i for leaf in ask.allowed for i in ix.leaf_nodes[leaf])
        else:
            near = (i for leaf in sorted(ask.near_leaves) for i in ix.leaf_nodes[leaf])
            pool = itertools.chain(self._best_fits(ask), near)
        best: tuple[float, int] | None = None
        seen: set[tuple[int, int]] = set()
        for i in pool:
            free = ix.free[i]
            if free < k or (ask.sensitive and self.room(ask, i) < k):
                continue
            leaf = ix.leaf[i]
            if (leaf, free) in seen:  # the same score as a node seen before, with a lower id
                continue
            seen.add((leaf, free))
            key = (self._score(ask, leaf, 1.0 - (free - k) / ix.max_cap), -i)
            if best is None or key > best:
                best = key
        return None if best is None else -best[1]

    def _best_fits(self, ask: _Ask) -> Iterable[int]:
        """Nodes with room, tightest first, `candidates` of them at most."""
        ix, k, left = self.ix, ask.k, self.s.candidates
        for free in range(k, ix.max_cap + 1):
            for i in ix.buckets[free]:
                if ask.sensitive and self.room(ask, i) < k:
                    continue
                yield i
                left -= 1
                if left == 0:
                    return

    def _best_leaf(self, ask: _Ask) -> int | None:
        ix, k = self.ix, ask.k
        fewest = _needed(self._node_prefix, k) if ask.node_cap >= ix.max_cap else math.ceil(
            k / max(1, min(ask.node_cap, ix.max_cap))
        )
        best: tuple[int, float, int] | None = None
        at_fewest = 0
        for leaf in self._leaves(ask):
            if ix.leaf_free[leaf] < k or self._leaf_room(ask, leaf) < k:
                continue
            parts = _split(self._leaf_rooms(ask, leaf), k)
            if parts is None:
                continue
            fit = 1.0 - (ix.leaf_free[leaf] - k) / ix.leaf_cap[leaf]
            key = (-len(parts), self._score(ask, leaf, fit), -leaf)
            if best is None or key > best:
                best = key
            if len(parts) <= fewest:
                at_fewest += 1
                if at_fewest >= self.s.candidates:
                    break
        return None if best is None else -best[2]

    def _fill_leaf(self, ask: _Ask, leaf: int, amount: int) -> NodeCounts:
        parts = _split(self._leaf_rooms(ask, leaf), amount)
        if parts is None:  # cannot happen: callers check the leaf's room
            raise ValueError(f"leaf {self.ix.leaf_names[leaf]!r}: no room for {amount} GPUs")
        return dict(parts)

    def _multi_leaf(self, ask: _Ask) -> NodeCounts | None:
        """Leaves of one spine (fewest leaves, best score), else across spines."""
        ix, k = self.ix, ask.k
        allowed = None if ask.allowed is None else set(ask.allowed)
        rooms_by_spine: list[list[tuple[int, int]]] = []
        for leaves in ix.spine_leaves:
            rooms = [
                (r, leaf)
                for leaf in leaves
                if (allowed is None or leaf in allowed) and (r := self._leaf_room(ask, leaf)) > 0
            ]
            rooms.sort(key=lambda x: (-x[0], x[1]))
            rooms_by_spine.append(rooms)
        best: tuple[int, float, int] | None = None
        best_parts: list[tuple[int, int]] = []
        for spine, rooms in enumerate(rooms_by_spine):
            if ix.spine_free[spine] < k:
                continue
            parts = _split(rooms, k)
            if parts is None:
                continue
            fit = 1.0 - (ix.spine_free[spine] - k) / ix.spine_cap[spine]
            key = (-len(parts), self._score(ask, parts[0][0], fit), -spine)
            if best is None or key > best:
                best, best_parts = key, parts
        if best is None:
            spine_rooms = sorted(
                ((sum(r for r, _ in rooms), s) for s, rooms in enumerate(rooms_by_spine)),
                key=lambda x: (-x[0], x[1]),
            )
            spine_parts = _split([x for x in spine_rooms if x[0] > 0], k)
            if spine_parts is None:
                return None
            for spine, amount in spine_parts:
                parts = _split(rooms_by_spine[spine], amount)
                if parts is None:
                    return None
                best_parts.extend(parts)
        counts: NodeCounts = {}
        for leaf, amount in best_parts:
            counts.update(self._fill_leaf(ask, leaf, amount))
        return counts

    # ----- distributed and latency-sensitive ------------------------------------------
    def _spread(self, ask: _Ask) -> NodeCounts | None:
        """One worker per node in turn, across the emptiest leaves."""
        ix, k = self.ix, ask.k
        leaves = self._leaves(ask)
        if ask.single_leaf:
            fitting = [leaf for leaf in leaves if self._leaf_room(ask, leaf) >= k]
            if not fitting:
                return None
            leaves = [max(fitting, key=lambda leaf: (ix.leaf_free[leaf], -leaf))]
        ordered = sorted(
            (leaf for leaf in leaves if ix.leaf_free[leaf] > 0),
            key=lambda leaf: (-self._score(ask, leaf, 0.0), -ix.leaf_free[leaf], leaf),
        )
        columns: list[list[int]] = []
        total = 0
        for leaf in ordered:
            rooms = self._leaf_rooms(ask, leaf)
            # the job's own nodes come last, so it spreads onto new ones
            nodes = [i for _, i in sorted(rooms, key=lambda x: (x[1] in ask.own, -x[0], x[1]))]
            if not nodes:
                continue
            columns.append(nodes)
            total += min(sum(r for r, _ in rooms), ask.max_gpus_per_leaf or k)
            if len(columns) >= k and total >= k:
                break
        if total < k:
            return None
        sequence = [col[p] for p in range(max(map(len, columns))) for col in columns
                    if p < len(col)]
        left = {i: self.room(ask, i) for i in sequence}
        per_leaf: dict[int, int] = {}
        counts: NodeCounts = {}
        placed = 0
        while placed < k:
            progress = False
            for i in sequence:
                leaf = ix.leaf[i]
                limit = ask.max_gpus_per_leaf
                if left[i] == 0 or (limit is not None and per_leaf.get(leaf, 0) >= limit):
                    continue
                counts[i] = counts.get(i, 0) + 1
                left[i] -= 1
                per_leaf[leaf] = per_leaf.get(leaf, 0) + 1
                placed += 1
                progress = True
                if placed == k:
                    break
            if not progress:
                return None
        return counts

    def _anywhere(self, k: int) -> NodeCounts:
        """The last resort: the freest nodes, whatever the topology."""
        ix = self.ix
        counts: NodeCounts = {}
        for i in sorted(range(len(ix.free)), key=lambda i: (-ix.free[i], i)):
            if k == 0:
                break
            take = min(ix.free[i], k)
            if take:
                counts[i] = take
                k -= take
        if k:
            raise ValueError(f"placement: {k} GPUs could not be placed, the nodes are full")
        return counts


def _prefix(values: Sequence[int]) -> list[int]:
    out, total = [], 0
    for v in values:
        total += v
        out.append(total)
    return out


def _needed(prefix: Sequence[int], k: int) -> int:
    """How many of the largest domains hold k GPUs (prefix sums of capacities, descending)."""
    lo, hi = 0, len(prefix)
    while lo < hi:
        mid = (lo + hi) // 2
        if prefix[mid] >= k:
            hi = mid
        else:
            lo = mid + 1
    return lo + 1


def _split(rooms: Sequence[tuple[int, int]], k: int) -> list[tuple[int, int]] | None:
    """Fewest domains for k: the largest rooms, then the best fit for the rest.

    `rooms` are (room, id), largest first; returns [(id, amount)] or None.
    """
    chosen: list[tuple[int, int]] = []
    left = k
    for pos, (room, ident) in enumerate(rooms):
        if room >= left:
            best = pos
            for j in range(pos + 1, len(rooms)):
                if rooms[j][0] < left:
                    break
                if rooms[j][0] < rooms[best][0]:
                    best = j
            chosen.append((rooms[best][1], left))
            return chosen
        chosen.append((ident, room))
        left -= room
    return None


def _without_domain(ask: _Ask) -> _Ask:
    return _Ask(ask.job, ask.k, ask.spread, ask.node_cap, ask.sensitive, ask.own,
                ask.near_leaves, ask.near_spines, None, ask.single_leaf,
                ask.max_nodes_per_leaf, ask.max_gpus_per_leaf)


class TopologyPlacer:
    """The topology-aware Placer (see the module doc)."""

    def __init__(self, settings: PlacementSettings | None = None) -> None:
        self.settings = settings or PlacementSettings()

    def __call__(
        self,
        allocation: Allocation,
        jobs: Mapping[str, Job],
        cluster: Cluster,
        previous: Placement,
    ) -> Placement:
        topology = Topology.of(cluster)
        order = {n.name: i for i, n in enumerate(cluster.nodes)}
        by_type: dict[str, list[Job]] = {}
        for name in sorted(allocation):
            if allocation[name] > 0:
                job = jobs.get(name) or Job(name=name)
                by_type.setdefault(job.gpu_type, []).append(job)
        result: dict[str, JobPlacement] = {}
        for gpu_type in sorted(by_type):
            nodes = [n for n in cluster.nodes if n.gpu_type == gpu_type]
            typed = sorted(by_type[gpu_type], key=lambda j: j.sort_key)
            need = sum(allocation[j.name] for j in typed)
            have = sum(n.gpus for n in nodes)
            if need > have:
                raise ValueError(
                    f"allocation: jobs of GPU type {gpu_type!r} get {need} GPUs, "
                    f"the cluster has {have}"
                )
            result.update(self._place_type(typed, allocation, jobs, nodes, topology, order,
                                           previous))
        return dict(sorted(result.items()))

    def _place_type(
        self,
        typed: Sequence[Job],
        allocation: Allocation,
        jobs: Mapping[str, Job],
        nodes: Sequence[Node],
        topology: Topology,
        order: Mapping[str, int],
        previous: Placement,
    ) -> dict[str, JobPlacement]:
        """One GPU type: steps 1-3, redone with less freedom until applicable (MODES)."""
        gpu_type = nodes[0].gpu_type
        capacity = {n.name: n.gpus for n in nodes}
        before = {
            name: shards for name, shards in previous.items()
            if jobs.get(name, Job(name)).gpu_type == gpu_type
        }

        def as_placement(placed: Mapping[str, Mapping[str, int]]) -> dict[str, JobPlacement]:
            return {
                name: tuple(sorted(counts.items(), key=lambda kv: order[kv[0]]))
                for name, counts in placed.items()
            }

        def reachable(placed: Mapping[str, Mapping[str, int]]) -> bool:
            return not sequence_problems(before, as_placement(placed), capacity)

        mode = FULL
        while True:
            placed, packer = _run_steps(typed, allocation, nodes, topology, previous,
                                        self.settings, mode, reachable)
            if mode == IN_PLACE or reachable(placed):
                return as_placement(placed)
            # Less freedom: without step 3b if it acted (and nothing else was forced).
            defragmented = packer.defragmented and not packer.released
            mode = NO_DEFRAGMENT if mode == FULL and defragmented else IN_PLACE


# How much of steps 2-3 a call may use, in this order, until the actions that lead
# from the previous placement to the new one can be applied one by one (see
# sequence_problems): everything; no defragmentation; running jobs only grow in
# place. The last one is always applicable when the previous placement is valid:
# its actions only free GPUs before they only take free ones. (A rebuild, 3a, is
# checked where it is made and dropped when it is not applicable.)
FULL, NO_DEFRAGMENT, IN_PLACE = "full", "no-defragment", "in-place"
MODES = (FULL, NO_DEFRAGMENT, IN_PLACE)


def _run_steps(
    jobs: Sequence[Job],
    allocation: Allocation,
    nodes: Sequence[Node],
    topology: Topology,
    previous: Placement,
    settings: PlacementSettings,
    mode: str,
    reachable: Callable[[Mapping[str, Mapping[str, int]]], bool],
) -> tuple[dict[str, dict[str, int]], _Packer]:
    """Steps 1-3 of the module doc for the jobs and nodes of one GPU type.

    Returns {job: {node: workers}} and the packer, whose flags tell what it did.
    """
    packer = _Packer(FreeIndex(nodes, topology), settings, {j.name: j for j in jobs})
    ix = packer.ix
    current: dict[str, NodeCounts] = {}
    # 1. keep
    for job in jobs:
        mine: dict[str, int] = {}
        for node, count in previous.get(job.name, ()):
            if node in ix.index and count > 0:
                mine[node] = mine.get(node, 0) + count
        counts: NodeCounts = {}
        for node, count in sorted(shrink(mine, allocation[job.name]).items()):
            i = ix.index[node]
            take = min(count, ix.free[i])
            if take:
                counts[i] = take
        packer.take(job, counts)
        current[job.name] = counts
    # 2. add
    short = [j for j in jobs if sum(current[j.name].values()) < allocation[j.name]]
    short.sort(key=lambda j: (-(allocation[j.name] - sum(current[j.name].values())), j.sort_key))
    started = {j.name for j in short if not current[j.name]}
    # Jobs whose count stays: moving them is a migration, applied before any start.
    steady = {
        j.name for j in jobs
        if sum(c for n, c in previous.get(j.name, ()) if n in ix.index) == allocation[j.name]
    }
    for job in short:
        current[job.name] = _add(packer, job, allocation[job.name], current[job.name],
                                 afresh=mode != IN_PLACE)
    changed = {j.name for j in short}
    if changed and settings.defragment and mode == FULL:
        _relayout(packer, jobs, current, steady - changed)
    # 3. defragment: many changes -> rebuild and match; else make room on one node
    if changed and settings.defragment and mode == FULL:
        penalty = sum(packer.penalty(j, current[j.name]) for j in short)
        rebuilt = None
        if penalty > 0 and len(changed) >= settings.rebuild_changed_share * len(jobs):
            rebuilt = _rebuild(packer, jobs, allocation, current, previous,
                               started | (steady - changed), started, topology)
            if rebuilt is not None and not reachable(_named(rebuilt, ix)):
                rebuilt = None
        if rebuilt is not None:
            current = rebuilt
        elif penalty > 0:
            residents = _residents(current, len(ix.nodes))
            for job in sorted(short, key=lambda j: (-allocation[j.name], j.sort_key)):
                k = allocation[job.name]
                if k <= ix.max_cap and packer.penalty(job, current[job.name]) > 0:
                    movable = started | (steady - changed)
                    _make_room(packer, job, current, residents, movable, started, settings)
    return _named(current, ix), packer


def _named(current: Mapping[str, NodeCounts], ix: FreeIndex) -> dict[str, dict[str, int]]:
    return {name: {ix.nodes[i].name: c for i, c in counts.items()}
            for name, counts in current.items()}


def _add(packer: _Packer, job: Job, k: int, have: NodeCounts, afresh: bool = True) -> NodeCounts:
    """Bring a job to k workers: grow on and near its nodes, or place it afresh if tighter.

    The GPUs a job placed afresh leaves stay taken for the rest of the call: they
    are freed only when its scale-out is applied, after every other start.
    """
    ix = packer.ix
    counts = dict(have)
    missing = k - sum(counts.values())
    if counts and not (strategy_of(job) == DISTRIBUTED or job.latency_sensitive):
        probe = packer.ask(job, missing, counts)
        for i in sorted(counts, key=lambda i: (-counts[i], i)):
            extra = min(packer.room(probe, i), missing)
            if extra > 0:
                ix.take(i, extra, job.latency_sensitive)
                counts[i] += extra
                missing -= extra
    if missing > 0:
        more = packer.place(packer.ask(job, missing, counts))
        packer.take(job, more)
        for i, c in more.items():
            counts[i] = counts.get(i, 0) + c
    if afresh and have and packer.penalty(job, counts) > 0:
        packer.release(job, counts)
        fresh = packer.place(packer.ask(job, k, {}))
        if packer.penalty(job, fresh) < packer.penalty(job, counts):
            left = {i: c - fresh.get(i, 0) for i, c in have.items() if c > fresh.get(i, 0)}
            counts = fresh
            packer.reserve(job, left)
        packer.take(job, counts)
    return counts


def _relayout(
    packer: _Packer, jobs: Sequence[Job], current: dict[str, NodeCounts], steady: set[str]
) -> None:
    """Move running jobs of unchanged size whose layout is known to be slow (step 2b).

    At most `defragment_max_moved_jobs` per call, earliest jobs first; a job
    moves only when its new layout is nearer to what it should have.
    """
    moved = 0
    for job in jobs:
        if moved >= packer.s.defragment_max_moved_jobs:
            return
        counts = current[job.name]
        if job.name not in steady or not packer.slow_layout(job, counts):
            continue
        packer.release(job, counts)
        fresh = packer.place(packer.ask(job, sum(counts.values()), {}))
        if packer.penalty(job, fresh) < packer.penalty(job, counts):
            counts, moved = fresh, moved + 1
            packer.defragmented = True
        packer.take(job, counts)
        current[job.name] = counts


def _residents(current: Mapping[str, NodeCounts], size: int) -> list[dict[str, int]]:
    """{job: workers} per node id."""
    residents: list[dict[str, int]] = [{} for _ in range(size)]
    for name, counts in current.items():
        for i, c in counts.items():
            residents[i][name] = c
    return residents


def _make_room(
    packer: _Packer,
    job: Job,
    current: dict[str, NodeCounts],
    residents: list[dict[str, int]],
    movable: set[str],
    started: set[str],
    settings: PlacementSettings,
) -> None:
    """Step 3b: put a job that fits on one node on one node, moving a few one-node jobs.

    The candidate nodes are the freest ones; on each, the fewest one-node jobs
    to move away are the largest. Only `movable` jobs move: jobs started in
    this call (for free) and at most `defragment_max_moved_jobs` jobs that keep
    their size, each to a single node; resized jobs never move (a plan frees
    their GPUs too late).
    Changes `current`, `residents` and the index only when it succeeds.
    """
    ix = packer.ix
    mine = current[job.name]
    k = sum(mine.values())
    packer.release(job, mine)
    best: tuple[tuple[int, int, int], int, list[str]] | None = None
    scanned = 0
    for free in range(ix.max_cap, 0, -1):
        if scanned >= settings.candidates:
            break
        for i in ix.buckets[free]:
            if ix.cap[i] < k or (job.latency_sensitive and ix.sensitive[i] > 0):
                continue
            scanned += 1
            movable = sorted(
                (
                    name for name in residents[i]
                    if len(current[name]) == 1 and name in movable
                ),
                key=lambda n: (n not in started, -residents[i][n], n),
            )
            chosen, room = [], free
            for name in movable:
                if room >= k:
                    break
                chosen.append(name)
                room += residents[i][name]
            paid = sum(1 for name in chosen if name not in started)
            if room >= k and paid <= settings.defragment_max_moved_jobs:
                key = (paid, len(chosen), i)
                if best is None or key < best[0]:
                    best = (key, i, chosen)
            if scanned >= settings.candidates:
                break
    if best is None:
        packer.take(job, mine)
        return
    _, node, evicted = best
    old = {name: current[name] for name in evicted}
    for name in evicted:
        packer.release(packer.jobs[name], old[name])
    packer.take(job, {node: k})
    # A resized job frees its old GPUs only when its scale-out is applied: keep them.
    held = {} if job.name in started else {
        i: c - (k if i == node else 0) for i, c in mine.items() if c > (k if i == node else 0)
    }
    packer.reserve(job, held)
    moved: dict[str, NodeCounts] = {}
    for name in sorted(evicted, key=lambda n: (-sum(old[n].values()), n)):
        other = packer.jobs[name]
        counts = packer.place(packer.ask(other, sum(old[name].values()), {}))
        packer.take(other, counts)
        moved[name] = counts
        if len(counts) > 1:  # it would get wider: undo everything
            for n, c in moved.items():
                packer.release(packer.jobs[n], c)
            packer.release(job, {node: k})
            packer.unreserve(job, held)
            for n, c in old.items():
                packer.take(packer.jobs[n], c)
            packer.take(job, mine)
            return
    packer.defragmented = True
    for name, counts in [*moved.items(), (job.name, {node: k})]:
        for i in current[name]:
            residents[i].pop(name, None)
        for i, c in counts.items():
            residents[i][name] = c
        current[name] = counts


def _rebuild(
    packer: _Packer,
    jobs: Sequence[Job],
    allocation: Allocation,
    current: Mapping[str, NodeCounts],
    previous: Placement,
    movable: set[str],
    started: set[str],
    topology: Topology,
) -> dict[str, NodeCounts] | None:
    """Step 3a: the ideal layout packed from scratch, matched onto the current nodes.

    Only `movable` jobs (started in this call, or keeping their size) are
    rebuilt: resized jobs and the GPUs reserved for them stay as step 2 left
    them, since a plan frees their old GPUs too late for others to use. Returns
    the new node counts when they are tighter than `current` and move at most
    `defragment_max_moved_jobs` jobs that ran before; else None.
    """
    ix, settings = packer.ix, packer.s
    fresh = _Packer(FreeIndex(ix.nodes, topology), settings, packer.jobs)
    fixed_used = [0] * len(ix.nodes)
    for job in jobs:
        if job.name not in movable:
            fresh.take(job, current[job.name])
            for i, c in current[job.name].items():
                fixed_used[i] += c
    for job, counts in packer._reserved:
        fresh.take(job, counts)
        for i, c in counts.items():
            fixed_used[i] += c
    ideal: dict[str, dict[str, int]] = {}
    pinned: set[str] = set()
    rebuilt = [j for j in jobs if j.name in movable]
    for job in sorted(rebuilt, key=lambda j: (-allocation[j.name], j.sort_key)):
        counts = fresh.place(fresh.ask(job, allocation[job.name], {}))
        fresh.take(job, counts)
        for i, c in counts.items():
            ideal.setdefault(ix.nodes[i].name, {})[job.name] = c
        if job.preferred_domain in ix.leaf_ids:
            pinned.add(job.preferred_domain)
    now: dict[str, dict[str, int]] = {}
    for job in rebuilt:
        for node, count in previous.get(job.name, ()):
            if node in ix.index and count > 0:
                per_node = now.setdefault(node, {})
                per_node[job.name] = per_node.get(job.name, 0) + count
    room = [Node(n.name, n.gpus - fixed_used[i], n.gpu_type, n.leaf, n.spine)
            for i, n in enumerate(ix.nodes)]
    mapping = match_layouts(ideal, now, room, topology, frozenset(pinned))
    result: dict[str, NodeCounts] = {
        j.name: ({} if j.name in movable else dict(current[j.name])) for j in jobs
    }
    for node, per_job in apply_mapping(ideal, mapping).items():
        for name, c in per_job.items():
            result[name][ix.index[node]] = c
    before = sum(packer.penalty(j, current[j.name]) for j in jobs)
    after = sum(packer.penalty(j, result[j.name]) for j in jobs)
    paid = sum(1 for j in rebuilt if j.name not in started and result[j.name] != current[j.name])
    if after < before and paid <= settings.defragment_max_moved_jobs:
        return result
    return None


def counts_only(
    allocation: Allocation,
    jobs: Mapping[str, Job],
    cluster: Cluster,
    previous: Placement,
) -> Placement:
    """The placer of `--placement off`: only the GPU counts matter.

    It returns a valid placement (the first-fit one, which keeps every worker
    where it is), so the pipeline and its checks run unchanged; a consumer that
    sees `ignores_topology` (the simulator) runs every job at the speed of its
    most compact layout. First fit never moves a worker, so `off` makes no
    migrations.
    """
    node_type = {n.name: n.gpu_type for n in cluster.nodes}
    own_type = {
        name: tuple(
            (node, count) for node, count in shards
            if name not in jobs or node_type.get(node) == jobs[name].gpu_type
        )
        for name, shards in previous.items()
    }
    return first_fit(allocation, jobs, cluster, own_type)


counts_only.ignores_topology = True  # type: ignore[attr-defined]
