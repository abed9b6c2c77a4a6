"""One request at a time on a cluster partly in use, with the placement manager's packer.

The elastic path places whole allocations at once (`manager.TopologyPlacer`).
A pod scheduler places one gang at a time on what is free now, must be able to
say "no" instead of spilling anywhere, and wants to know which domain it chose
and how that scored. `RequestPacker` runs the manager's packer and weighted
score (`packer.Packer`) over a view of free units per node, and adds the one
step the manager does not have: a request wider than a leaf goes to the fewest
*adjacent* leaves of one spine (leaves in view order) before it goes to the
fewest leaves of a spine wherever they are, then across spines.

A "unit" is whatever one member of the request needs: a GPU for an elastic
worker, a whole pod (say 4 GPUs) for a pod scheduler, which builds the view
with the units each node can hold. See docs/design/007-secondary-scheduler.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from voda.core.model import Job, Node
from voda.core.placement.packer import Ask, Packer
from voda.core.placement.settings import PlacementSettings
from voda.core.placement.topology import FreeIndex, Topology

# Levels of the domain a request landed in, smallest first.
NODE, LEAF, SPINE, CLUSTER = "node", "leaf", "spine", "cluster"
LEVELS = (NODE, LEAF, SPINE, CLUSTER)


@dataclass(frozen=True, slots=True)
class Packed:
    """Where a request goes: units per node, the smallest domain holding them, its score."""

    counts: Mapping[str, int]
    level: str  # one of LEVELS
    domain: str  # the node, leaf or spine name; "" across spines
    leaves: tuple[str, ...]  # leaves used, in view order
    score: float  # the manager's weighted score of the chosen domain (0 to the weights' sum)


class RequestPacker:
    """Free units of a set of nodes, and the topology-aware packer over them.

    `nodes` give each node's capacity in units and its leaf and spine; `used`
    the units already taken per node; `sensitive` the latency-sensitive units
    per node (a latency-sensitive request avoids those nodes when it can).
    Adjacency of leaves follows the order of `nodes`.
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        used: Mapping[str, int] | None = None,
        settings: PlacementSettings | None = None,
        sensitive: Mapping[str, int] | None = None,
    ) -> None:
        self.settings = settings or PlacementSettings()
        ix = FreeIndex(nodes, Topology.of(nodes))
        if used:
            free = list(ix.cap)
            for name, count in used.items():
                i = ix.index.get(name)
                if i is not None and count > 0:
                    free[i] = max(0, free[i] - count)
            ix.set_free(free)
        for name, count in (sensitive or {}).items():
            i = ix.index.get(name)
            if i is not None:
                ix.sensitive[i] += max(0, count)
        self._ix = ix
        self._packer = Packer(ix, self.settings)

    # ----- the view ----------------------------------------------------------------
    def free(self, node: str) -> int:
        return self._ix.free[self._ix.index[node]]

    @property
    def total_free(self) -> int:
        return self._ix.total_free

    def set_free(self, node: str, units: int) -> None:
        """Set a node's free units (clamped to [0, capacity]) after the cluster changed."""
        ix = self._ix
        i = ix.index[node]
        target = max(0, min(units, ix.cap[i]))
        if target < ix.free[i]:
            ix.take(i, ix.free[i] - target)
        elif target > ix.free[i]:
            ix.release(i, target - ix.free[i])

    def add_sensitive(self, node: str, count: int) -> None:
        """Latency-sensitive units placed on a node from outside this packer."""
        i = self._ix.index.get(node)
        if i is not None:
            self._ix.sensitive[i] = max(0, self._ix.sensitive[i] + count)

    def take(self, job: Job, counts: Mapping[str, int]) -> None:
        self._packer.take(job, self._ids(counts))

    # ----- placing -----------------------------------------------------------------
    def place(
        self,
        job: Job,
        k: int,
        own: Mapping[str, int] | None = None,
        within: Collection[str] | None = None,
    ) -> Packed | None:
        """Where k units of `job` go, or None when they do not fit (nothing is taken).

        The job's strategy, preferred domain, bandwidth and latency hints apply
        as in the manager: tried with all of them, then without the preferred
        domain, then without the per-node and per-leaf limits (keeping the
        latency rule), then without any. `own` is what the job already holds
        (it scores its leaves higher; a spreading job avoids its nodes).
        `within` (leaf, spine or node names) restricts every attempt to those
        domains' leaves; unlike the manager, nothing spills outside them.
        """
        if k < 1:
            raise ValueError(f"k: must be at least 1, got {k}")
        if k > self._ix.total_free:
            return None
        packer, ix = self._packer, self._ix
        own_ids = self._ids(own or {})
        scope = None
        if within is not None:
            scope = sorted({leaf for d in within for leaf in ix.domain_leaves(d)})
            if not scope:
                return None
        ask = packer.ask(job, k, own_ids)
        attempts: list[Ask] = []
        if ask.allowed is not None:  # the preferred domain has room
            narrowed = ask.allowed if scope is None else [x for x in ask.allowed if x in scope]
            if narrowed:
                attempts.append(dataclasses.replace(ask, allowed=narrowed))
        attempts.append(dataclasses.replace(ask, allowed=scope))
        if ask.sensitive:
            attempts.append(dataclasses.replace(ask.relaxed(keep_sensitive=True), allowed=scope))
        attempts.append(dataclasses.replace(ask.relaxed(), allowed=scope))
        for attempt in attempts:
            counts = packer._spread(attempt) if attempt.spread else self._consolidate(attempt)
            if counts:
                return self._packed(attempt, counts)
        return None

    def _consolidate(self, ask: Ask) -> dict[int, int] | None:
        """One node, else one leaf, else adjacent leaves of one spine, else the manager's
        fewest leaves of one spine, else across spines (unless the job needs one leaf)."""
        packer = self._packer
        if ask.k <= ask.node_cap:
            node = packer._best_node(ask)
            if node is not None:
                return {node: ask.k}
        leaf = packer._best_leaf(ask)
        if leaf is not None:
            return packer._fill_leaf(ask, leaf, ask.k)
        if ask.single_leaf:
            return None
        window = self._best_window(ask)
        if window is not None:
            counts = packer._multi_leaf(dataclasses.replace(ask, allowed=window))
            if counts:
                return counts
        return packer._multi_leaf(ask)

    def _best_window(self, ask: Ask) -> list[int] | None:
        """The fewest adjacent leaves of one spine whose room holds the request (best score).

        Leaves are adjacent when consecutive in view order under the same spine;
        the smallest window wins, then the best weighted score, then view order.
        """
        ix, packer, k = self._ix, self._packer, ask.k
        allowed = None if ask.allowed is None else set(ask.allowed)
        best: tuple[int, float, int] | None = None
        best_window: list[int] = []
        for spine, leaves in enumerate(ix.spine_leaves):
            if ix.spine_free[spine] < k:
                continue
            rooms = [
                packer._leaf_room(ask, leaf) if allowed is None or leaf in allowed else 0
                for leaf in leaves
            ]
            end, total = 0, 0
            for start in range(len(leaves)):  # two pointers: the shortest window from start
                while end < len(leaves) and total < k:
                    total += rooms[end]
                    end += 1
                if total < k:
                    break
                window = leaves[start:end]
                free = sum(ix.leaf_free[leaf] for leaf in window)
                cap = sum(ix.leaf_cap[leaf] for leaf in window)
                fit = 1.0 - (free - k) / cap
                score = sum(packer._score(ask, leaf, fit) for leaf in window) / len(window)
                key = (-len(window), score, -window[0])
                if best is None or key > best:
                    best, best_window = key, list(window)
                total -= rooms[start]
        return best_window if best is not None and len(best_window) > 1 else None

    def _packed(self, ask: Ask, counts: Mapping[int, int]) -> Packed:
        ix, packer = self._ix, self._packer
        order = sorted(counts)
        leaves = sorted({ix.leaf[i] for i in order})
        spines = {ix.leaf_spine[leaf] for leaf in leaves}
        if len(order) == 1:
            i = order[0]
            level, domain = NODE, ix.nodes[i].name
            fit = 1.0 - (ix.free[i] - ask.k) / max(1, ix.max_cap)
            score = packer._score(ask, ix.leaf[i], fit)
        else:
            free = sum(ix.leaf_free[leaf] for leaf in leaves)
            cap = sum(ix.leaf_cap[leaf] for leaf in leaves)
            fit = 1.0 - (free - ask.k) / max(1, cap)
            score = sum(packer._score(ask, leaf, fit) for leaf in leaves) / len(leaves)
            if len(leaves) == 1:
                level, domain = LEAF, ix.leaf_names[leaves[0]]
            elif len(spines) == 1:
                level, domain = SPINE, ix.spine_names[next(iter(spines))]
            else:
                level, domain = CLUSTER, ""
        return Packed(
            counts={ix.nodes[i].name: counts[i] for i in order},
            level=level,
            domain=domain,
            leaves=tuple(ix.leaf_names[leaf] for leaf in leaves),
            score=round(score, 4),
        )

    def _ids(self, counts: Mapping[str, int]) -> dict[int, int]:
        index = self._ix.index
        return {index[name]: c for name, c in counts.items() if name in index and c > 0}
