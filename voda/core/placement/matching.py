"""Minimal migration: put a freshly computed layout on the nodes that already hold its workers.

A layout is `{node: {job: workers}}`. When a placement has to be rebuilt, the
ideal layout is computed on the real nodes and then permuted, so that as many
workers as possible stay where they run now:

1. per spine, whole leaf layouts are matched to leaves (a leaf layout may go to
   another leaf of the same spine whose nodes can hold it);
2. per matched pair of leaves, node layouts are matched to nodes, never above a
   node's GPUs (nodes of different sizes work).

Both steps are `scipy.optimize.linear_sum_assignment` maximizing the workers
kept in place; a tie keeps a layout where it was computed, so the result is
deterministic. Layouts never move across spines. See docs/design/003-placement.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from voda.core.model import Node, Placement
from voda.core.placement.topology import Topology

Layout = Mapping[str, Mapping[str, int]]  # {node: {job: workers}}

_INFEASIBLE = -1.0e12


def layout_of(placement: Placement) -> dict[str, dict[str, int]]:
    """{node: {job: workers}} of a placement."""
    layout: dict[str, dict[str, int]] = {}
    for job, shards in placement.items():
        for node, count in shards:
            if count > 0:
                per_node = layout.setdefault(node, {})
                per_node[job] = per_node.get(job, 0) + count
    return layout


def placement_of(layout: Layout, node_order: Mapping[str, int]) -> dict[str, tuple]:
    """The placement of a layout, each job's nodes in cluster order."""
    shards: dict[str, dict[str, int]] = {}
    for node, jobs in layout.items():
        for job, count in jobs.items():
            if count > 0:
                shards.setdefault(job, {})[node] = count
    return {
        job: tuple(sorted(per_node.items(), key=lambda kv: node_order[kv[0]]))
        for job, per_node in sorted(shards.items())
    }


def kept_workers(a: Mapping[str, int], b: Mapping[str, int]) -> int:
    """Workers that stay when a node holding `b` is given layout `a`."""
    if len(a) > len(b):
        a, b = b, a
    return sum(min(count, b.get(job, 0)) for job, count in a.items())


def _assign(weights: np.ndarray) -> list[tuple[int, int]]:
    """Rows to columns maximizing the total weight (min(rows, columns) pairs)."""
    if weights.size == 0:
        return []
    rows, cols = linear_sum_assignment(weights, maximize=True)
    return list(zip(rows.tolist(), cols.tolist(), strict=True))


def _fits(totals: Sequence[int], capacities: Sequence[int]) -> bool:
    """Whether node layouts of these sizes fit one each on nodes of these capacities."""
    if len(totals) > len(capacities):
        return False
    ordered = sorted(capacities, reverse=True)
    return all(t <= c for t, c in zip(sorted(totals, reverse=True), ordered, strict=False))


def match_layouts(
    ideal: Layout,
    current: Layout,
    nodes: Sequence[Node],
    topology: Topology,
    pinned_leaves: frozenset[str] = frozenset(),
) -> dict[str, str]:
    """{ideal node: real node}, a permutation of the nodes keeping most workers in place.

    `ideal` must fit the nodes as computed (every node layout within its node's
    GPUs); `pinned_leaves` stay where they are (e.g. a job's preferred leaf).
    Nodes absent from `ideal` or with an empty layout are matched too, so the
    result is a bijection on `nodes`.
    """
    capacity = {n.name: n.gpus for n in nodes}
    names = [n.name for n in nodes]
    leaves_of_spine: dict[str, list[str]] = {}
    nodes_of_leaf: dict[str, list[str]] = {}
    for name in names:
        leaf = topology.leaf_of[name]
        if leaf not in nodes_of_leaf:
            nodes_of_leaf[leaf] = []
            leaves_of_spine.setdefault(topology.spine_of_leaf[leaf], []).append(leaf)
        nodes_of_leaf[leaf].append(name)

    def leaf_jobs(layout: Layout, leaf: str) -> dict[str, int]:
        total: dict[str, int] = {}
        for node in nodes_of_leaf[leaf]:
            for job, count in layout.get(node, {}).items():
                total[job] = total.get(job, 0) + count
        return total

    mapping: dict[str, str] = {}
    for leaves in leaves_of_spine.values():  # spines in cluster order
        # 1. leaves: weight = workers of each job the target leaf already holds.
        ideal_jobs = [leaf_jobs(ideal, leaf) for leaf in leaves]
        current_jobs = [leaf_jobs(current, leaf) for leaf in leaves]
        where_now: dict[str, list[int]] = {}
        for b, jobs in enumerate(current_jobs):
            for job in jobs:
                where_now.setdefault(job, []).append(b)
        weights = np.zeros((len(leaves), len(leaves)))
        for a, jobs in enumerate(ideal_jobs):
            for job, count in jobs.items():
                for b in where_now.get(job, ()):
                    weights[a, b] += min(count, current_jobs[b][job])
        # A tie keeps the leaf where it is: the bonuses add up to less than one worker.
        weights *= len(leaves) + 1.0
        weights[np.diag_indices(len(leaves))] += 1.0
        caps = [[capacity[n] for n in nodes_of_leaf[leaf]] for leaf in leaves]
        for a, leaf in enumerate(leaves):
            totals = [sum(ideal.get(n, {}).values()) for n in nodes_of_leaf[leaf]]
            totals = [t for t in totals if t > 0]
            for b in range(len(leaves)):
                pinned = leaf in pinned_leaves and a != b
                if pinned or (a != b and not _fits(totals, caps[b])):
                    weights[a, b] = _INFEASIBLE
        for a, b in _assign(weights):
            source, target = nodes_of_leaf[leaves[a]], nodes_of_leaf[leaves[b]]
            mapping.update(_match_nodes(ideal, current, source, target, capacity))
    return mapping


def _match_nodes(
    ideal: Layout,
    current: Layout,
    source: Sequence[str],
    target: Sequence[str],
    capacity: Mapping[str, int],
) -> dict[str, str]:
    """Node layouts of `source` onto the nodes of `target` (2. of the module doc)."""
    where: dict[str, list[tuple[int, int]]] = {}  # job -> (target position, workers there)
    for b, node in enumerate(target):
        for job, count in current.get(node, {}).items():
            where.setdefault(job, []).append((b, count))
    weights = np.zeros((len(source), len(target)))
    for a, node in enumerate(source):
        for job, count in ideal.get(node, {}).items():
            for b, there in where.get(job, ()):
                weights[a, b] += min(count, there)
    # A tie keeps a layout on its own node: the bonuses add up to less than one worker.
    weights *= len(source) + 1.0
    position = {node: b for b, node in enumerate(target)}
    for a, node in enumerate(source):
        if node in position:
            weights[a, position[node]] += 1.0
    totals = np.array([sum(ideal.get(node, {}).values()) for node in source])
    caps = np.array([capacity[node] for node in target])
    weights[totals[:, None] > caps[None, :]] = _INFEASIBLE
    mapping = {source[a]: target[b] for a, b in _assign(weights)}
    # A leaf of more nodes onto one of fewer (its layouts fit, `_fits`): the assignment
    # may leave a node with workers out for an empty one; then only the nodes with
    # workers are placed, each of them (kept as it was wherever it placed them all).
    filled = np.flatnonzero(totals > 0)
    if all(source[a] in mapping for a in filled):
        return mapping
    return {source[filled[a]]: target[b] for a, b in _assign(weights[filled])}


def apply_mapping(ideal: Layout, mapping: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """The layout with each node layout moved to its matched node."""
    return {mapping[node]: dict(jobs) for node, jobs in ideal.items() if jobs}


@dataclass(frozen=True, slots=True)
class Move:
    """`workers` of `job` leave `source` for `target`."""

    job: str
    source: str
    target: str
    workers: int


@dataclass(frozen=True, slots=True)
class MigrationPlan:
    moves: tuple[Move, ...]
    restarts: tuple[str, ...]  # jobs none of whose workers stay where they were

    @property
    def moved_workers(self) -> int:
        return sum(m.workers for m in self.moves)


# migration_plan takes a job on one node before and after without merging its shards, and
# skips a job that kept every worker of its one node before (it only grew); False: every
# job goes the general way (the reference the tests compare with).
ONE_NODE_SHORTCUT = True


def migration_plan(old: Placement, new: Placement) -> MigrationPlan:
    """The workers to move from `old` to `new`, and the jobs that must restart.

    A job that shrinks drops workers (not a move); one that grows adds workers
    (not a move); what is left is moved, pairing the nodes it leaves with the
    nodes it enters in cluster order of the placements. A job placed in both
    whose workers all leave their nodes must restart.
    """
    moves: list[Move] = []
    restarts: list[str] = []
    # (a job kept as it was, the same tuple handed back by a placer, has nothing to move:
    # only the others are sorted)
    for job in sorted([job for job, after in new.items()
                       if job in old and old[job] is not after]):
        if ONE_NODE_SHORTCUT and len(old[job]) == 1:
            if len(new[job]) == 1:
                _one_node_each(job, old[job][0], new[job][0], moves, restarts)
                continue
            if _kept_its_node(old[job][0], new[job]):
                continue
        before, after = _merged(old[job]), _merged(new[job])
        if not before or not after:
            continue
        kept = kept_workers(before, after)
        leaving = [(n, c - after.get(n, 0)) for n, c in before.items() if c > after.get(n, 0)]
        entering = [(n, c - before.get(n, 0)) for n, c in after.items() if c > before.get(n, 0)]
        to_move = min(sum(c for _, c in leaving), sum(c for _, c in entering))
        if kept == 0:
            restarts.append(job)
        sources = [[n, c] for n, c in leaving]
        targets = [[n, c] for n, c in entering]
        si = ti = 0
        while to_move > 0:
            count = min(sources[si][1], targets[ti][1], to_move)
            moves.append(Move(job, sources[si][0], targets[ti][0], count))
            sources[si][1] -= count
            targets[ti][1] -= count
            to_move -= count
            si += sources[si][1] == 0
            ti += targets[ti][1] == 0
    return MigrationPlan(tuple(moves), tuple(restarts))


def _one_node_each(job: str, before: tuple[str, int], after: tuple[str, int],
                   moves: list[Move], restarts: list[str]) -> None:
    """migration_plan's loop body for a job on one node before and after: on the same
    node it only grows or shrinks; on another, its workers move (as many as both hold)
    and it restarts."""
    (source, held), (target, count) = before, after
    if held <= 0 or count <= 0 or source == target:
        return
    restarts.append(job)
    moves.append(Move(job, source, target, min(held, count)))


def _kept_its_node(before: tuple[str, int], after: Sequence[tuple[str, int]]) -> bool:
    """Whether a job on one node before has nothing to move or restart: it held no worker
    (nothing to move), or its node keeps all of them (it only grows, or stays)."""
    source, held = before
    return held <= 0 or sum(c for n, c in after if n == source and c > 0) >= held


def _merged(shards: Sequence[tuple[str, int]]) -> dict[str, int]:
    """{node: workers} of a job's shards, in the order of their first shard."""
    merged: dict[str, int] = {}
    for node, count in shards:
        if count > 0:
            merged[node] = merged.get(node, 0) + count
    return merged
