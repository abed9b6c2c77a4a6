"""Packing one request of k GPUs on one GPU type's FreeIndex: the Packer.

The span a job needs and has, the weighted score of a candidate, and the
consolidated, balanced and distributed layouts, relaxed step by step down to
"anywhere". See voda.core.placement.manager for the rules.
"""

from __future__ import annotations

import array
import bisect
import heapq
import itertools
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from voda.core.compiled import compiled
from voda.core.model import Job
from voda.core.placement.layout import half_node, spread_pays, worth_moving
from voda.core.placement.leaf_rooms import MANY_LEAVES, MAX_CELLS, LeafRooms
from voda.core.placement.settings import (
    BALANCED,
    CONSOLIDATED,
    DISTRIBUTED,
    PlacementSettings,
    strategy_of,
)
from voda.core.placement.topology import FreeIndex

NodeCounts = dict[int, int]  # node id in a FreeIndex -> workers
_NOWHERE: frozenset[int] = frozenset()
# Up to this many leaves tied on nodes, their scores are worked out one by one.
_FEW_WINNERS = 24
# `_best_leaf` finds its tied leaves by the compiled kernel where numba is installed;
# False: from the leaf table (the reference the tests compare with).
COMPILED_WINNERS = True
_NO_LEAVES = np.zeros(0, dtype=np.int64)
# `_spread` reads only the first node of each of its first k leaves where that is all it
# hands out (`_first_turn`); False: it builds every leaf's column (the reference).
FIRST_TURN_TOP_NODES = True
# `_best_node` runs compiled where numba is installed, for requests neither
# latency-sensitive nor limited to a domain; False: in Python (the reference).
COMPILED_BEST_NODE = True
# `_spread` finds its first leaves by the compiled kernel where it applies
# (`_compiled_spread_first`); False: from `_spread_order` (the reference).
COMPILED_SPREAD_FIRST = True


def _leaf_kernel() -> ModuleType | None:
    """`leaf_kernel`, imported on first use; None without numba (voda.core.compiled)."""
    return compiled("voda.core.placement.leaf_kernel")


@dataclass(slots=True)
class Ask:
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

    def relaxed(self, keep_sensitive: bool = False) -> Ask:
        """The same request with the optional constraints dropped (or all but one)."""
        return Ask(self.job, self.k, keep_sensitive, 1 << 30, keep_sensitive, self.own,
                    self.near_leaves, self.near_spines)


class Packer:
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
        # (version, rooms, prefix sums) by (leaf, per-node cap): see _capped_rooms.
        self._rooms: dict[tuple[int, int], tuple[int, list[tuple[int, int]], list[int]]] = {}
        self._reserved: list[tuple[Job, NodeCounts]] = []
        # Reservations held per node id (their count), for voda.core.placement.unreachable.
        self.reservations = [0] * len(ix.nodes)
        self._tables: dict[int, LeafRooms] = {}  # by per-node cap: see _leaf_table
        self._all_leaves: np.ndarray | None = None
        self._winners_out: np.ndarray | None = None  # the kernel's output (a leaf each)
        self._node_scratch: tuple[np.ndarray, ...] | None = None  # see _compiled_best_node
        self._stamp = 0
        self._spread_ranks: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._views: tuple[array.array[int], array.array[int], np.ndarray, np.ndarray] | None = None
        self._leaf_arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.released = False  # whether reservations had to be given back
        self._spread_pays: dict[tuple[str, int], bool] = {}
        self._half: tuple[list[int], list[int]] | None = None
        self._half_cap = half_node(ix.max_cap)
        self._finite_weights = all(math.isfinite(w) for w in (
            settings.resource_weight, settings.topology_weight, settings.utilization_weight,
            settings.history_weight))
        self.defragmented = False  # whether step 3b moved a job
        self._history = [
            settings.history(name, ix.spine_names[ix.leaf_spine[leaf]])
            for leaf, name in enumerate(ix.leaf_names)
        ]
        # Leaves alike: one capacity and one history, weights that are not negative, and
        # scores that cannot overflow (each term is at most its weight): see _spread_order.
        self._weights = weights = (settings.resource_weight, settings.topology_weight,
                                   settings.utilization_weight, settings.history_weight)
        self._alike = (len(set(ix.leaf_cap)) == 1 and len(set(self._history)) == 1
                       and min(weights) >= 0 and math.isfinite(
                           sum(weights[:3]) + weights[3] * abs(self._history[0])))

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

    def penalty_floor(self, job: Job, k: int) -> int:
        """A lower bound of `penalty` for any k of the free GPUs (0 where not worked out):
        they lie on at least as many nodes as the freest nodes holding k, and on at least
        as many leaves as the freest leaves holding k."""
        if (strategy_of(job) != CONSOLIDATED or job.latency_sensitive
                or self.halves(job, k)):
            return 0
        ix = self.ix
        nodes = _fewest_holding(((free, len(ix.buckets[free]))
                                 for free in range(ix.max_cap, 0, -1)), k)
        floor = nodes - _needed(self._node_prefix, k)
        if max(ix.leaf_free) >= k:
            return floor + 1 - _needed(self._leaf_prefix, k)
        leaves = _needed(_prefix(sorted(ix.leaf_free, reverse=True)), k)
        return floor + leaves - _needed(self._leaf_prefix, k)

    def _half_prefixes(self) -> tuple[list[int], list[int]]:
        """Prefix sums of node and leaf capacities with every node capped at half a node."""
        if self._half is None:
            ix, half = self.ix, half_node(self.ix.max_cap)
            leaf_caps = [sum(min(ix.cap[i], half) for i in nodes) for nodes in ix.leaf_nodes]
            self._half = (_prefix(sorted((min(c, half) for c in ix.cap), reverse=True)),
                          _prefix(sorted(leaf_caps, reverse=True)))
        return self._half

    # ----- a request ------------------------------------------------------------
    def ask(self, job: Job, k: int, own: NodeCounts) -> Ask:
        ix, s = self.ix, self.s
        spread = job.placement_strategy == DISTRIBUTED or job.latency_sensitive
        node_cap = self.node_cap(job, k + sum(own.values()))
        allowed = None
        if job.preferred_domain:
            near_leaves = {ix.leaf[i] for i in own}
            leaves = ix.domain_leaves(job.preferred_domain)
            if sum(ix.leaf_free[leaf] for leaf in leaves) >= k:
                allowed = leaves
            near_leaves.update(leaves)
            near, spines = frozenset(near_leaves), frozenset(ix.leaf_spine[x] for x in near_leaves)
        elif own:
            leaf_of, leaf_spine = ix.leaf, ix.leaf_spine
            near = frozenset([leaf_of[i] for i in own])
            spines = frozenset([leaf_spine[leaf] for leaf in near])
        else:
            near = spines = _NOWHERE
        bandwidth = job.network_bandwidth
        return Ask(job, k, spread, node_cap, job.latency_sensitive, own, near, spines, allowed,
                   bandwidth is not None and bandwidth > s.leaf_uplink_bandwidth,
                   s.max_nodes_per_leaf, s.max_gpus_per_leaf)

    def node_cap(self, job: Job, total: int) -> int:
        """The most workers per node of a job of `total` workers (an Ask's node_cap)."""
        max_cap = self.ix.max_cap
        if total <= max_cap:  # (then only a balanced job halves: see `halves`)
            return self._half_cap if job.placement_strategy == BALANCED else max_cap
        return self._half_cap if self.halves(job, total) else max_cap

    def reserve(self, job: Job, counts: NodeCounts) -> None:
        """Keep GPUs taken for the rest of the call (see steps._add), unless room runs out."""
        self.take(job, counts)
        self._reserved.append((job, counts))
        for i in counts:
            self.reservations[i] += 1

    def unreserve(self, job: Job, counts: NodeCounts) -> None:
        """Give back a reservation, if `place` has not given it back already."""
        for pos, (other, reserved) in enumerate(self._reserved):
            if other is job and reserved is counts:
                self.release(job, counts)
                del self._reserved[pos]
                for i in counts:
                    self.reservations[i] -= 1
                return

    def place(self, ask: Ask) -> NodeCounts:
        """Where the request goes (nothing is taken): constraints first, then relaxed."""
        if self.ix.total_free < ask.k:
            for job, counts in self._reserved:
                self.release(job, counts)
                for i in counts:
                    self.reservations[i] -= 1
            self._reserved.clear()
            self.released = True
        for attempt in _attempts(ask):
            strategy = self._spread if attempt.spread else self._consolidate
            counts = strategy(attempt)
            if counts is not None:
                return counts
        return self._anywhere(ask.k)

    def take(self, job: Job, counts: NodeCounts) -> None:
        self._move(job, counts, -1)

    def release(self, job: Job, counts: NodeCounts) -> None:
        self._move(job, counts, 1)

    def _move(self, job: Job, counts: NodeCounts, sign: int) -> None:
        """Every node's count freed (sign 1) or taken (-1), and a latency-sensitive job's
        workers counted as FreeIndex.release and take do."""
        move = self.ix.move
        if job.latency_sensitive:
            sensitive = self.ix.sensitive
            for i, c in counts.items():
                move(i, sign * c)
                sensitive[i] -= sign * c
        else:
            for i, c in counts.items():
                move(i, sign * c)

    # ----- rooms and scores -------------------------------------------------------
    def room(self, ask: Ask, i: int) -> int:
        ix = self.ix
        if ask.sensitive and ix.sensitive[i] - ask.own.get(i, 0) > 0:
            return 0
        return min(ix.free[i], ask.node_cap)

    def _score(self, ask: Ask, leaf: int, fit: float) -> float:
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

    def _scores(self, ask: Ask, leaves: np.ndarray, k: int | None,
                free: np.ndarray | None = None) -> np.ndarray:
        """`_score` of many leaves at once, with the fit of k GPUs in each leaf (None: a
        fit of 0), by the same operations in the same order, so the same floats.
        `free`: the leaves' free GPUs, where the caller has them."""
        ix, s = self.ix, self.s
        if self._leaf_arrays is None:
            self._leaf_arrays = (np.array(ix.leaf_spine, dtype=np.int64),
                                 np.array(ix.leaf_cap, dtype=np.int64),
                                 np.array(self._history, dtype=np.float64))
        spines, caps, history = self._leaf_arrays
        caps = caps[leaves]
        if free is None:
            free = self._leaf_free(leaves)
        fit = 0.0 if k is None else 1.0 - (free - k) / caps
        alignment = np.zeros(len(leaves))
        if ask.near_spines:
            near = np.zeros(len(ix.spine_names), dtype=bool)
            near[list(ask.near_spines)] = True
            alignment[near[spines[leaves]]] = 0.5
        if ask.near_leaves:  # over a near spine's 0.5
            near = np.zeros(len(ix.leaf_names), dtype=bool)
            near[list(ask.near_leaves)] = True
            alignment[near[leaves]] = 1.0
        utilization = 1.0 - free / caps
        if ask.spread:
            fit, utilization = 1.0 - fit, 1.0 - utilization
        return (
            s.resource_weight * fit
            + s.topology_weight * alignment
            + s.utilization_weight * utilization
            + s.history_weight * history[leaves]
        )

    def _leaf_free(self, leaves: np.ndarray) -> np.ndarray:
        """The free GPUs of these leaves."""
        leaf_free = self.ix.leaf_free
        if len(leaves) < MANY_LEAVES:
            return np.array([leaf_free[leaf] for leaf in leaves.tolist()], dtype=np.int64)
        return np.array(leaf_free, dtype=np.int64)[leaves]

    def _by_score(self, ask: Ask) -> list[int]:
        """The leaves of `_leaves(ask)` with free GPUs, best score (at a fit of 0) first,
        then the freest, then the lowest id."""
        # (the order is total: in what order the leaves come in does not matter)
        leaves = self._every_leaf() if ask.allowed is None else self._leaf_order(ask)
        free = self._leaf_free(leaves)
        with_free = free > 0
        free_leaves, free = leaves[with_free], free[with_free]
        scores = self._scores(ask, free_leaves, None, free)
        return free_leaves[np.lexsort((free_leaves, -free, -scores))].tolist()

    def _spread_order(self, ask: Ask) -> Iterable[int]:
        """`_by_score(ask)` for a spread request, made as it is read where every leaf has
        the same capacity and history: then, among the leaves of one alignment with the
        job's leaves, the score grows with the free GPUs (each of its operations is
        monotone), so each alignment's leaves come by free GPUs, then id, and the three
        lists are merged on the scores of the leaves read only."""
        if not (ask.spread and ask.allowed is None and self._alike):
            return self._by_score(ask)
        free = np.array(self.ix.leaf_free, dtype=np.int64)
        by_free: list[int] = np.argsort(-free, kind="stable")[: np.count_nonzero(free)].tolist()
        near_leaves, near_spines = ask.near_leaves, ask.near_spines
        if not near_leaves and not near_spines:  # one alignment
            return by_free
        leaf_free, leaf_spine = self.ix.leaf_free, self.ix.leaf_spine
        near = sorted((leaf for leaf in near_leaves if leaf_free[leaf] > 0),
                      key=lambda leaf: (-leaf_free[leaf], leaf))
        by_spine = (leaf for leaf in by_free
                    if leaf_spine[leaf] in near_spines and leaf not in near_leaves)
        others = (leaf for leaf in by_free
                  if leaf_spine[leaf] not in near_spines and leaf not in near_leaves)
        return heapq.merge(near, by_spine, others, key=self._spread_key(ask))

    def _spread_key(self, ask: Ask) -> Callable[[int], tuple[float, int, int]]:
        """A leaf's place in `_by_score`'s order for a spread request on leaves alike:
        (-score, -free GPUs, id), the score as `_scores` works it out (the same floats)."""
        leaf_free, leaf_spine = self.ix.leaf_free, self.ix.leaf_spine
        near_leaves, near_spines = ask.near_leaves, ask.near_spines
        score = self._spread_score

        def key(leaf: int) -> tuple[float, int, int]:
            free = leaf_free[leaf]
            alignment = (1.0 if leaf in near_leaves
                         else 0.5 if leaf_spine[leaf] in near_spines else 0.0)
            return -score(alignment, free), -free, leaf

        return key

    def _leaf_rooms(self, ask: Ask, leaf: int) -> list[tuple[int, int]]:
        """(room, node) of the leaf's nodes with room, largest first, within the limits."""
        if not ask.sensitive:
            rooms = self._capped_rooms(leaf, min(ask.node_cap, self.ix.max_cap))[0]
        else:
            rooms = sorted(
                ((r, i) for i in self.ix.leaf_nodes[leaf] if (r := self.room(ask, i)) > 0),
                key=_largest_first,
            )
        if ask.max_nodes_per_leaf is not None:
            rooms = rooms[: ask.max_nodes_per_leaf]
        return rooms

    def _capped_rooms(self, leaf: int, cap: int) -> tuple[list[tuple[int, int]], list[int]]:
        """(room, node) of the leaf's nodes with room, largest first, a node's room being
        its free GPUs up to `cap`, and their prefix sums; kept until the leaf changes."""
        ix = self.ix
        key = (leaf, cap)
        version = ix.leaf_version[leaf]
        cached = self._rooms.get(key)
        if cached is None or cached[0] != version:
            frees = zip(ix.leaf_free_of[leaf](ix.free), ix.leaf_nodes[leaf], strict=True)
            # Nodes in id order; a stable sort on the room alone keeps ties by id. (No
            # node has more free GPUs than the largest capacity.)
            rooms = sorted(
                [(f, i) for f, i in frees if f] if cap >= ix.max_cap
                else [(f if f < cap else cap, i) for f, i in frees if f],
                key=_room, reverse=True,
            )
            cached = (version, rooms, _prefix(map(_room, rooms)))
            self._rooms[key] = cached
        return cached[1], cached[2]

    def _room_totals(self, leaf: int, cap: int) -> list[int]:
        """The prefix sums of `_capped_rooms(leaf, cap)`, without building its rooms."""
        cached = self._rooms.get((leaf, cap))
        if cached is not None and cached[0] == self.ix.leaf_version[leaf]:
            return cached[2]
        ix = self.ix
        if cap < ix.max_cap:
            return list(itertools.accumulate(sorted(
                [f if f < cap else cap for i in ix.leaf_nodes[leaf] if (f := ix.free[i]) > 0],
                reverse=True)))
        # No node has more free GPUs than the cap: the rooms are the free counts.
        rooms = sorted(ix.leaf_free_of[leaf](ix.free), reverse=True)
        empty = rooms.count(0)
        if empty:
            del rooms[len(rooms) - empty:]
        return list(itertools.accumulate(rooms))

    def _leaf_parts(self, ask: Ask, leaf: int) -> int | None:
        """How many of the leaf's largest rooms hold the request (None: not all of them):
        len(_split(self._leaf_rooms(ask, leaf), ask.k))."""
        if ask.sensitive:
            return _count_split(self._leaf_rooms(ask, leaf), ask.k)
        prefix = self._capped_rooms(leaf, min(ask.node_cap, self.ix.max_cap))[1]
        parts = bisect.bisect_left(prefix, ask.k) + 1
        if parts > len(prefix) or (ask.max_nodes_per_leaf is not None
                                   and parts > ask.max_nodes_per_leaf):
            return None
        return parts

    def _leaf_room(self, ask: Ask, leaf: int) -> int:
        plain = not ask.sensitive and ask.node_cap >= self.ix.max_cap
        if plain and ask.max_nodes_per_leaf is None:
            total = self.ix.leaf_free[leaf]
        else:
            total = sum(r for r, _ in self._leaf_rooms(ask, leaf))
        if ask.max_gpus_per_leaf is not None:
            total = min(total, ask.max_gpus_per_leaf)
        return total

    def _leaves(self, ask: Ask) -> list[int]:
        """Candidate leaves: the preferred domain, else the near leaves then the others."""
        if ask.allowed is not None:
            return ask.allowed
        near = sorted(ask.near_leaves)
        near_set = set(near)
        return near + [leaf for leaf in range(len(self.ix.leaf_names)) if leaf not in near_set]

    def _leaf_order(self, ask: Ask) -> np.ndarray:
        """`_leaves(ask)` as an array."""
        if ask.allowed is None and not ask.near_leaves:
            return self._every_leaf()
        if ask.allowed is not None:
            return np.array(ask.allowed, dtype=np.int64)
        near = np.array(sorted(ask.near_leaves), dtype=np.int64)
        every = self._every_leaf()
        others = np.ones(len(every), dtype=bool)
        others[near] = False
        return np.concatenate((near, every[others]))

    def _every_leaf(self) -> np.ndarray:
        """Every leaf id, in order."""
        if self._all_leaves is None:
            self._all_leaves = np.arange(len(self.ix.leaf_names))
        return self._all_leaves

    def _leaf_table(self, cap: int) -> LeafRooms | None:
        """The running totals of every leaf's rooms under a per-node cap, up to date;
        None when the table would be too large (a scan is cheaper)."""
        ix = self.ix
        table = self._tables.get(cap)
        if table is None:
            sizes = [len(nodes) for nodes in ix.leaf_nodes]
            if len(sizes) * max(sizes, default=0) > MAX_CELLS:
                return None
            table = self._tables[cap] = LeafRooms(sizes)
        table.refresh(ix.leaf_changes, lambda leaf: self._room_totals(leaf, cap))
        return table

    # ----- consolidated and balanced ------------------------------------------------
    def _consolidate(self, ask: Ask) -> NodeCounts | None:
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

    def _best_node(self, ask: Ask) -> int | None:
        """The best-scoring node with room for the whole request, or None.

        The score is `_score`'s, worked out inline by the same operations in the same
        order (the same floats): this runs for nearly every request."""
        ix, k, s = self.ix, ask.k, self.s
        if (COMPILED_BEST_NODE and ask.allowed is None and not ask.sensitive
                and s.candidates >= 1 and ix.leaf_rows is not None
                and len(ix.leaf_names) >= MANY_LEAVES and len(ask.near_leaves) <= 2
                and len(ask.near_spines) <= 2):
            kernel = _leaf_kernel()
            if kernel is not None:
                return self._compiled_best_node(kernel, ask)
        pool: Iterable[int]
        # (a leaf with fewer than k free GPUs has no node with room)
        leaf_nodes, leaf_free = ix.leaf_nodes, ix.leaf_free
        if ask.allowed is not None:
            pool = (i for leaf in ask.allowed if leaf_free[leaf] >= k for i in leaf_nodes[leaf])
        else:
            fits = (self._best_fits(ask) if ask.sensitive or self.s.candidates < 1
                    else self._tightest(k))
            pool = itertools.chain(fits, self._near_nodes(ask)) if ask.near_leaves else fits
        free_of, leaf_of, max_cap, sensitive = ix.free, ix.leaf, ix.max_cap, ask.sensitive
        leaf_spine, leaf_cap, history = ix.leaf_spine, ix.leaf_cap, self._history
        near_leaves, near_spines, spread = ask.near_leaves, ask.near_spines, ask.spread
        rw, tw, uw, hw = (s.resource_weight, s.topology_weight, s.utilization_weight,
                          s.history_weight)
        best_score, best = 0.0, -1
        seen: set[int] = set()  # (leaf, free) as leaf * (max_cap + 1) + free
        stride = max_cap + 1
        for i in pool:
            free = free_of[i]
            if free < k or (sensitive and self.room(ask, i) < k):
                continue
            leaf = leaf_of[i]
            pair = leaf * stride + free
            if pair in seen:  # the same score as a node seen before, with a lower id
                continue
            seen.add(pair)
            fit = 1.0 - (free - k) / max_cap
            if leaf in near_leaves:
                alignment = 1.0
            elif leaf_spine[leaf] in near_spines:
                alignment = 0.5
            else:
                alignment = 0.0
            utilization = 1.0 - leaf_free[leaf] / leaf_cap[leaf]
            if spread:
                fit, utilization = 1.0 - fit, 1.0 - utilization
            score = rw * fit + tw * alignment + uw * utilization + hw * history[leaf]
            # (the highest score, then the lowest id; as comparing (score, -id) tuples)
            if best < 0 or score > best_score or (score == best_score and i < best):
                best_score, best = score, i
        return None if best < 0 else best

    def _compiled_best_node(self, kernel: ModuleType, ask: Ask) -> int | None:
        """`_best_node` by the compiled kernel (voda.core.placement.leaf_kernel.best_node),
        for a request with at most two near leaves and two near spines."""
        near, spines = ask.near_leaves, ask.near_spines
        near_a, near_b = sorted(near) if len(near) == 2 else (*near, -1, -1)[:2]
        spine_a, spine_b = (*spines, -1, -1)[:2]
        if self._node_scratch is None:
            self._node_scratch = (
                np.zeros(len(self.ix.hist), dtype=np.int64),  # `seen`
                np.array(self._history, dtype=np.float64),
                np.array(self._weights, dtype=np.float64),
            )
        seen, history, weights = self._node_scratch
        self._stamp += 1
        free, hist = self._kernel_arrays()
        best = kernel.best_node(free, hist, self.ix.leaf_rows, history, weights, near_a, near_b,
                                spine_a, spine_b, ask.k, self.s.candidates, ask.spread, seen,
                                self._stamp)
        return None if best < 0 else best

    def _kernel_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The index's free counts and histogram as NumPy arrays (views, kept while the
        index keeps the same arrays)."""
        ix = self.ix
        views = self._views
        if views is None or views[0] is not ix.free_array or views[1] is not ix.hist:
            views = self._views = (ix.free_array, ix.hist,
                                   np.frombuffer(ix.free_array, dtype=np.int64),
                                   np.frombuffer(ix.hist, dtype=np.int64))
        return views[2], views[3]

    def _near_nodes(self, ask: Ask) -> list[int]:
        """The nodes with k free GPUs or more in the request's near leaves, leaf by leaf
        in id order, then by id."""
        ix, k = self.ix, ask.k
        leaf_free, leaf_free_of, leaf_nodes, free = (ix.leaf_free, ix.leaf_free_of,
                                                     ix.leaf_nodes, ix.free)
        nodes: list[int] = []
        for leaf in sorted(ask.near_leaves):
            if leaf_free[leaf] >= k:
                nodes += [i for f, i in zip(leaf_free_of[leaf](free), leaf_nodes[leaf],
                                            strict=True) if f >= k]
        return nodes

    def _best_fits(self, ask: Ask) -> Iterable[int]:
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

    def _tightest(self, k: int) -> list[int]:
        """The nodes with room for k, tightest first, `candidates` (>= 1) of them at most:
        `_best_fits` of a request that is not latency-sensitive."""
        buckets, left = self.ix.buckets, self.s.candidates
        nodes: list[int] = []
        for free in range(k, self.ix.max_cap + 1):
            bucket = buckets[free]
            if len(bucket) >= left:
                nodes += bucket[:left]
                break
            nodes += bucket
            left -= len(bucket)
        return nodes

    def _best_leaf(self, ask: Ask) -> int | None:
        """The leaf holding the request on the fewest nodes, the best-scoring among
        them; leaves are scanned in the order of `_leaves` until `candidates` of them
        need no more nodes than an empty cluster would.

        Without latency-sensitive rules, on many leaves, the leaves tied on nodes come
        at once from the index's histogram by a compiled kernel (`_compiled_winners`), or
        from a table of running totals (LeafRooms: `_table_winners`); `_best_leaf_scan`
        goes leaf by leaf.
        """
        ix, k = self.ix, ask.k
        fewest = _needed(self._node_prefix, k) if ask.node_cap >= ix.max_cap else math.ceil(
            k / max(1, min(ask.node_cap, ix.max_cap))
        )
        cap = min(ask.node_cap, ix.max_cap)
        if ask.sensitive or len(ix.leaf_nodes) < MANY_LEAVES:
            return self._best_leaf_scan(ask, fewest)
        if ask.max_gpus_per_leaf is not None and ask.max_gpus_per_leaf < k:
            return None
        kernel = _leaf_kernel() if COMPILED_WINNERS else None
        if kernel is not None:
            winners = self._compiled_winners(kernel, ask, cap, fewest)
        else:
            table = self._leaf_table(cap)
            if table is None:
                return self._best_leaf_scan(ask, fewest)
            winners = self._table_winners(table, ask, fewest)
        if winners is None:
            return None
        if len(winners) <= _FEW_WINNERS and self._finite_weights:
            # (an infinite weight may give NaN, which only the arrays' rule handles)
            return self._best_scored(ask, winners.tolist())
        if not ask.spread and not ask.near_leaves and not ask.near_spines and self._alike:
            best = self._tightest_pick(ask, *(
                _tightest_of(winners, self._leaf_free(winners)) if kernel is None
                else kernel.tightest(self._kernel_arrays()[1], ix.max_cap + 1, winners)))
            if best is not None:
                return best
        # (with rooms uncapped, a leaf's room is its free GPUs; the table's column of
        # rooms held them, the same numbers)
        free = self._leaf_free(winners)
        scores = self._scores(ask, winners, k, free)
        return int(winners[scores == scores.max()].min())

    def _compiled_winners(self, kernel: ModuleType, ask: Ask, cap: int,
                          fewest: int) -> np.ndarray | None:
        """The leaves `_best_leaf` scores, from the index's histogram by the compiled
        kernel (voda.core.placement.leaf_kernel); None when no leaf holds the request."""
        ix = self.ix
        if ask.allowed is not None:
            first, then_rest = np.array(ask.allowed, dtype=np.int64), False
        elif ask.near_leaves:
            first, then_rest = np.array(sorted(ask.near_leaves), dtype=np.int64), True
        else:
            first, then_rest = _NO_LEAVES, True
        if self._winners_out is None:
            self._winners_out = np.empty(len(ix.leaf_names), dtype=np.int64)
        out = self._winners_out
        count = kernel.winners(
            self._kernel_arrays()[1], ix.max_cap + 1, first, then_rest, ask.k,
            cap, -1 if ask.max_nodes_per_leaf is None else ask.max_nodes_per_leaf, fewest,
            self.s.candidates, out)
        return out[:count].copy() if count else None

    def _table_winners(self, table: LeafRooms, ask: Ask, fewest: int) -> np.ndarray | None:
        """The leaves `_best_leaf` scores, from the leaf table (the reference of
        `_compiled_winners`); None when no leaf holds the request."""
        k = ask.k
        order = self._leaf_order(ask)
        if not len(order):
            return None
        fits, hits = table.fits(k, fewest, ask.max_nodes_per_leaf)
        # No leaf holds k on fewer than `fewest` nodes: when some leaf needs no more, the
        # scan ends at the `candidates`-th such leaf and they are the winners.
        if order is self._all_leaves:
            at_fewest = np.flatnonzero(hits)
        else:
            at_fewest = order[np.flatnonzero(hits[order])]
            scanned = np.zeros(len(fits), dtype=bool)
            scanned[order] = True
            fits = fits & scanned
        if len(at_fewest):
            return at_fewest[: self.s.candidates]
        # the scan goes through every leaf: the winners need the fewest nodes
        return table.fewest_parts(fits, k, fewest + 1)

    def _tightest_pick(self, ask: Ask, tightest: int, looser: int, lowest: int) -> int | None:
        """The best-scoring of the winning leaves for a request not spread, near no leaf, on
        leaves alike, from the fewest free GPUs of one (`tightest`), the fewest above that
        (`looser`, -1 where none) and the lowest id of the tightest (`_tightest_of`): a
        leaf's score then only falls as its free GPUs grow (each of its operations is
        monotone), so the tightest leaves score best, and the lowest id of them wins, when
        the next tightest scores less; None when it does not (a tie of floats: every leaf
        must be scored)."""
        if looser >= 0 and self._alike_score(ask, looser) >= self._alike_score(ask, tightest):
            return None
        return lowest

    def _alike_score(self, ask: Ask, free: int) -> float:
        """`_scores`'s score of a leaf with `free` free GPUs at the fit of the request, on
        leaves alike, for a request not spread and near no leaf (the same floats)."""
        (rw, tw, uw, hw), cap = self._weights, self.ix.leaf_cap[0]
        fit = 1.0 - (free - ask.k) / cap
        utilization = 1.0 - free / cap
        return rw * fit + tw * 0.0 + uw * utilization + hw * self._history[0]

    def _best_leaf_scan(self, ask: Ask, fewest: int) -> int | None:
        """_best_leaf, one leaf at a time (latency-sensitive requests: a node's room
        depends on the job's own workers)."""
        ix, k = self.ix, ask.k
        leaf_free = ix.leaf_free
        # Without limits a leaf's room is its free GPUs.
        plain = (not ask.sensitive and ask.node_cap >= ix.max_cap
                 and ask.max_nodes_per_leaf is None and ask.max_gpus_per_leaf is None)
        # The leaves needing the fewest nodes among those scanned; the score decides
        # between them (it is worked out only for them).
        least: int | None = None
        winners: list[int] = []
        at_fewest = 0
        for leaf in self._leaves(ask):
            if leaf_free[leaf] < k or (not plain and self._leaf_room(ask, leaf) < k):
                continue
            parts = self._leaf_parts(ask, leaf)
            if parts is None:
                continue
            if least is None or parts < least:
                least, winners = parts, [leaf]
            elif parts == least:
                winners.append(leaf)
            if parts <= fewest:
                at_fewest += 1
                if at_fewest >= self.s.candidates:
                    break
        if least is None:
            return None
        return self._best_scored(ask, winners)

    def _best_scored(self, ask: Ask, leaves: Sequence[int]) -> int:
        """The leaf of the highest `_score` at the fit of the request's k GPUs in it, the
        lowest id on ties (as max over (score, -leaf)); the score worked out inline by the
        same operations in the same order (the same floats)."""
        ix, k, spread = self.ix, ask.k, ask.spread
        leaf_free, leaf_cap, leaf_spine, history = (ix.leaf_free, ix.leaf_cap, ix.leaf_spine,
                                                    self._history)
        near_leaves, near_spines = ask.near_leaves, ask.near_spines
        rw, tw, uw, hw = self._weights
        best_score, best = 0.0, -1
        for leaf in leaves:
            free, cap = leaf_free[leaf], leaf_cap[leaf]
            fit = 1.0 - (free - k) / cap
            alignment = (1.0 if leaf in near_leaves
                         else 0.5 if leaf_spine[leaf] in near_spines else 0.0)
            utilization = 1.0 - free / cap
            if spread:
                fit, utilization = 1.0 - fit, 1.0 - utilization
            score = rw * fit + tw * alignment + uw * utilization + hw * history[leaf]
            if best < 0 or score > best_score or (score == best_score and leaf < best):
                best_score, best = score, leaf
        return best

    def _fill_leaf(self, ask: Ask, leaf: int, amount: int) -> NodeCounts:
        parts = _split(self._leaf_rooms(ask, leaf), amount)
        if parts is None:  # cannot happen: callers check the leaf's room
            raise ValueError(f"leaf {self.ix.leaf_names[leaf]!r}: no room for {amount} GPUs")
        return dict(parts)

    def _multi_leaf(self, ask: Ask) -> NodeCounts | None:
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
    def _spread(self, ask: Ask) -> NodeCounts | None:
        """One worker per node in turn, across the emptiest leaves."""
        k = ask.k
        if (FIRST_TURN_TOP_NODES and not ask.sensitive and ask.max_gpus_per_leaf is None
                and ask.max_nodes_per_leaf is None):
            firsts = self._compiled_spread_first(ask)
            ordered = self._spread_leaves(ask) if firsts is None else firsts
            if ordered is None:
                return None
            first = self._first_turn(ask, ordered)
            if first is not None:
                return first
        ordered = self._spread_leaves(ask)
        if ordered is None:
            return None
        columns: list[list[int]] = []
        total = 0
        own = ask.own
        for leaf in ordered:
            rooms = self._leaf_rooms(ask, leaf)
            if not rooms:
                continue
            # the job's own nodes come last, so it spreads onto new ones (rooms are
            # largest first, then by id: a stable partition keeps that order)
            if own:
                nodes = ([i for _, i in rooms if i not in own]
                         + [i for _, i in rooms if i in own])
            else:
                nodes = [i for _, i in rooms]
            columns.append(nodes)
            total += min(sum(map(_room, rooms)), ask.max_gpus_per_leaf or k)
            if len(columns) >= k and total >= k:
                break
        if total < k:
            return None
        if ask.max_gpus_per_leaf is None:
            # Every node in the columns has room (rooms are above 0): the first pass of
            # the turns below gives one worker to each of the first k nodes, if there are k.
            first = dict.fromkeys(_first_turns(columns, k), 1)
            if len(first) == k:
                return first
        return self._hand_out(ask, columns)

    def _compiled_spread_first(self, ask: Ask) -> list[int] | None:
        """The first k leaves of `_spread_order(ask)` (fewer where fewer have free GPUs)
        by the compiled kernel (voda.core.placement.leaf_kernel.spread_first), where it
        applies: a spread request, leaves alike, many, no domain, at most two near leaves
        and spines; else None."""
        ix = self.ix
        near, spines = ask.near_leaves, ask.near_spines
        if not (COMPILED_SPREAD_FIRST and ask.spread and ask.allowed is None
                and not ask.single_leaf and self._alike and len(ix.leaf_names) >= MANY_LEAVES
                and len(near) <= 2 and len(spines) <= 2):
            return None
        kernel = _leaf_kernel()
        if kernel is None:
            return None
        if self._spread_ranks is None:
            self._spread_ranks = (self._spread_rank_table(),
                                  np.array(ix.leaf_spine, dtype=np.int64),
                                  np.empty(len(ix.leaf_names), dtype=np.int64))
        rank, leaf_spine, out = self._spread_ranks
        near_a, near_b = sorted(near) if len(near) == 2 else (*near, -1, -1)[:2]
        spine_a, spine_b = (*spines, -1, -1)[:2]
        count = kernel.spread_first(self._kernel_arrays()[1], leaf_spine, rank, near_a, near_b,
                                    spine_a, spine_b, ask.k, out)
        return out[:count].tolist()

    def _spread_rank_table(self) -> np.ndarray:
        """rank[alignment, free]: the place of a leaf of that alignment (0: a near leaf, 1:
        of a near spine, 2: other) and free GPUs in `_spread_order`'s order on leaves
        alike, before the leaf id: by `_spread_score`, then free GPUs, both descending;
        pairs of the same score and free GPUs share a rank."""
        cap = self.ix.leaf_cap[0]
        keys = [(-self._spread_score(alignment, free), -free)
                for alignment in (1.0, 0.5, 0.0) for free in range(cap + 1)]
        distinct = {key: rank for rank, key in enumerate(sorted(set(keys)))}
        return np.array([distinct[key] for key in keys], dtype=np.int64).reshape(3, cap + 1)

    def _spread_score(self, alignment: float, free: int) -> float:
        """`_scores`'s score of a spread request at a fit of 0 on a leaf with `free` free
        GPUs, on leaves alike (the same floats)."""
        rw, tw, uw, hw = self._weights
        fit = 1.0 - 0.0  # (a fit of 0, turned for a spread request)
        utilization = 1.0 - (1.0 - free / self.ix.leaf_cap[0])
        return rw * fit + tw * alignment + uw * utilization + hw * self._history[0]

    def _first_turn(self, ask: Ask, ordered: Iterable[int]) -> NodeCounts | None:
        """What `_spread` gives when its first k leaves each have a node with room: the
        first node of each leaf's column (the largest room, the lowest id on ties, the
        job's own nodes last), one worker each; None when there are fewer such leaves.
        (Without per-leaf limits and latency-sensitive rules: rooms are capped free GPUs.)"""
        k, own = ask.k, ask.own
        cap = min(ask.node_cap, self.ix.max_cap)
        nodes: list[int] = []
        for leaf in ordered:
            node = self._top_node(leaf, cap, own)
            if node is None:
                return None
            nodes.append(node)
            if len(nodes) == k:
                return dict.fromkeys(nodes, 1)
        return None

    def _top_node(self, leaf: int, cap: int, own: NodeCounts) -> int | None:
        """The first node of `_spread`'s column for a leaf: the largest room (free GPUs up
        to `cap`), the lowest id on ties, a node of `own` only when no other has room."""
        ix = self.ix
        frees, nodes = ix.leaf_free_of[leaf](ix.free), ix.leaf_nodes[leaf]
        top = max(frees)
        if top == 0:
            return None
        if top <= cap:
            node = nodes[frees.index(top)]
            if node not in own:
                return node
        best = best_room = mine = mine_room = 0
        for pos, free in enumerate(frees):
            room = free if free < cap else cap
            if nodes[pos] in own:
                if room > mine_room:
                    mine, mine_room = nodes[pos], room
            elif room > best_room:
                best, best_room = nodes[pos], room
        return best if best_room else mine

    def _spread_leaves(self, ask: Ask) -> Iterable[int] | None:
        """The leaves `_spread` fills, in order (None: none can hold a single-leaf job)."""
        ix, k = self.ix, ask.k
        candidates = len(ix.leaf_names) if ask.allowed is None else len(ask.allowed)
        if ask.single_leaf or candidates < MANY_LEAVES:
            leaves = self._leaves(ask)
        if ask.single_leaf:
            fitting = [leaf for leaf in leaves if self._leaf_room(ask, leaf) >= k]
            if not fitting:
                return None
            leaves = [max(fitting, key=lambda leaf: (ix.leaf_free[leaf], -leaf))]
        if ask.single_leaf or candidates < MANY_LEAVES:
            return sorted(
                (leaf for leaf in leaves if ix.leaf_free[leaf] > 0),
                key=lambda leaf: (-self._score(ask, leaf, 0.0), -ix.leaf_free[leaf], leaf),
            )
        # the same order, the scores worked out at once or as the leaves are read
        return self._spread_order(ask)

    def _hand_out(self, ask: Ask, columns: list[list[int]]) -> NodeCounts | None:
        """One worker per node in turn, across the columns (a leaf's nodes each), as long
        as nodes have room: the first of each column, then the second of each, and so on."""
        ix, k = self.ix, ask.k
        sequence = [col[p] for p in range(max(map(len, columns))) for col in columns
                    if p < len(col)]
        left: dict[int, int] = {}  # each node's room, worked out when first reached
        per_leaf: dict[int, int] = {}
        counts: NodeCounts = {}
        placed = 0
        while placed < k:
            progress = False
            for i in sequence:
                leaf = ix.leaf[i]
                limit = ask.max_gpus_per_leaf
                if i not in left:
                    left[i] = self.room(ask, i)
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


_room = operator.itemgetter(0)


def _largest_first(room: tuple[int, int]) -> tuple[int, int]:
    return -room[0], room[1]


def _prefix(values: Iterable[int]) -> list[int]:
    return list(itertools.accumulate(values))


def _needed(prefix: Sequence[int], k: int) -> int:
    """How many of the largest domains hold k GPUs (prefix sums of capacities, descending)."""
    return bisect.bisect_left(prefix, k) + 1


def _fewest_holding(sizes: Iterable[tuple[int, int]], k: int) -> int:
    """How many domains hold k GPUs at the fewest, from (free GPUs, domains with that
    many) largest first; one past them all when they do not."""
    used = 0
    for free, count in sizes:
        if count * free >= k:
            return used - (-k // free)
        used += count
        k -= count * free
    return used + 1


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


def _count_split(rooms: Sequence[tuple[int, int]], k: int) -> int | None:
    """len(_split(rooms, k)) (None where _split gives None), without building the split."""
    left = k
    for count, (room, _) in enumerate(rooms, 1):
        if room >= left:
            return count
        left -= room
    return None


def _tightest_of(leaves: np.ndarray, free: np.ndarray) -> tuple[int, int, int]:
    """Of these leaves (`free`: their free GPUs): the fewest free GPUs of one, the fewest
    above that (-1 where none has more) and the lowest id of those with the fewest."""
    tightest = int(free.min())
    looser = free[free > tightest]
    return (tightest, int(looser.min()) if len(looser) else -1,
            int(leaves[free == tightest].min()))


def _first_turns(columns: Sequence[list[int]], k: int) -> list[int]:
    """The first k items (fewer if there are not) taking one from each column in turn:
    the first of each, then the second of each, and so on."""
    turns: list[int] = []
    depth = max(map(len, columns))
    for p in range(depth):
        for col in columns:
            if p < len(col):
                turns.append(col[p])
                if len(turns) == k:
                    return turns
    return turns


def _attempts(ask: Ask) -> Iterator[Ask]:
    """The request, then relaxed step by step; each built only when the one before it
    found no place."""
    yield ask
    if ask.allowed is not None:
        yield _without_domain(ask)
    if ask.sensitive:
        yield ask.relaxed(keep_sensitive=True)
    yield ask.relaxed()


def _without_domain(ask: Ask) -> Ask:
    return Ask(ask.job, ask.k, ask.spread, ask.node_cap, ask.sensitive, ask.own,
                ask.near_leaves, ask.near_spines, None, ask.single_leaf,
                ask.max_nodes_per_leaf, ask.max_gpus_per_leaf)
