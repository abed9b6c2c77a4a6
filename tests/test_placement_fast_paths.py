"""The packer's fast paths against the plain ones they replaced, on random clusters with
many leaves (so the leaf tables are used) and random free GPUs (ties on purpose).

Each reference is the former code: the leaf table's node counts for every leaf
(LeafRooms.parts), the leaf scan (Packer._best_leaf_scan), a node's score
(Packer._score), a leaf's rooms (Packer._capped_rooms) and the whole list of
sequence problems.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voda.core.model import Cluster, Job, Node
from voda.core.placement import packer as packer_module
from voda.core.placement.packer import Ask, Packer
from voda.core.placement.settings import PlacementSettings
from voda.core.placement.topology import FreeIndex, Topology
from voda.core.plan import sequence_applicable, sequence_problems

FAST_PATH_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
STRATEGIES = ("consolidated", "consolidated", "balanced", "distributed")


@st.composite
def packers(draw: st.DrawFn, alike: bool = False) -> tuple[Packer, list[Ask]]:
    """A packer on a cluster of 64 to 96 leaves, part of it taken, and asks on it.
    `alike`: every leaf of the same capacity and history, and latency-sensitive jobs too."""
    leaves = draw(st.integers(64, 96))
    per_leaf = draw(st.sampled_from((4, 16) if alike else (1, 2, 4, 16)))
    sizes = draw(st.sampled_from(((8,), (8, 4), (4, 8, 8, 2))))
    per_spine = per_leaf * draw(st.sampled_from((4, 16)))
    nodes = tuple(
        Node(f"n{i}", sizes[i % len(sizes)], leaf=f"l{i // per_leaf}",
             spine=f"s{i // per_spine}")
        for i in range(leaves * per_leaf)
    )
    cluster = Cluster(nodes)
    settings_ = PlacementSettings(
        candidates=draw(st.sampled_from((1, 4, 16))),
        max_nodes_per_leaf=draw(st.sampled_from((None, None, 1, 2, 3))),
        max_gpus_per_leaf=draw(st.sampled_from((None, None, 6, 12))),
        domain_performance={"l1": 0.9, "s0": 0.2} if not alike and draw(st.booleans()) else {},
        resource_weight=draw(st.sampled_from((0.0, 0.4, 1.0, 0.37))),
        topology_weight=draw(st.sampled_from((0.3, 1.0, 4.0, 0.71))),
        utilization_weight=draw(st.sampled_from((0.0, 0.2, 1.0, 0.13))),
    )
    packer = Packer(FreeIndex.of(cluster.nodes, Topology.of(cluster)), settings_)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # few distinct free counts (ties everywhere), any, or nearly full (scattered)
    taken = draw(st.sampled_from(([0, 0, 4, 6, 8, 8], list(range(9)), [5, 6, 7, 7, 8, 8])))
    for i, node in enumerate(nodes):
        packer.ix.take(i, min(node.gpus, int(rng.choice(taken))))
    asks = []
    for n in range(draw(st.integers(1, 12))):
        job = Job(f"j{n}", placement_strategy=STRATEGIES[int(rng.integers(len(STRATEGIES)))],
                  preferred_domain="l2" if rng.random() < 0.1 else None,
                  latency_sensitive=alike and rng.random() < 0.2)
        own = {int(i): 1 for i in rng.choice(len(nodes), int(rng.integers(0, 3)))}
        asks.append(packer.ask(job, int(rng.integers(1, 40)), own))
    return packer, asks


def fewest_nodes(packer: Packer, ask: Ask) -> int:
    if ask.node_cap >= packer.ix.max_cap:
        return packer_module._needed(packer._node_prefix, ask.k)
    return math.ceil(ask.k / max(1, min(ask.node_cap, packer.ix.max_cap)))


def best_node_reference(packer: Packer, ask: Ask) -> int | None:
    """Packer._best_node as it was: each candidate scored by Packer._score."""
    ix, k = packer.ix, ask.k
    pool: Iterable[int]
    if ask.allowed is not None:
        pool = (i for leaf in ask.allowed for i in ix.leaf_nodes[leaf])
    else:
        near = (i for leaf in sorted(ask.near_leaves) for i in ix.leaf_nodes[leaf])
        pool = [*packer._best_fits(ask), *near]
    best: tuple[float, int] | None = None
    seen: set[tuple[int, int]] = set()
    for i in pool:
        free = ix.free[i]
        if free < k or (ask.sensitive and packer.room(ask, i) < k):
            continue
        leaf = ix.leaf[i]
        if (leaf, free) in seen:
            continue
        seen.add((leaf, free))
        key = (packer._score(ask, leaf, 1.0 - (free - k) / ix.max_cap), -i)
        if best is None or key > best:
            best = key
    return None if best is None else -best[1]


def leaves_by_score_reference(packer: Packer, ask: Ask) -> list[int]:
    """The leaf order of Packer._spread's scan, leaf by leaf."""
    free = packer.ix.leaf_free
    return sorted((leaf for leaf in packer._leaves(ask) if free[leaf] > 0),
                  key=lambda leaf: (-packer._score(ask, leaf, 0.0), -free[leaf], leaf))


@FAST_PATH_SETTINGS
@given(case=packers())
def test_the_leaf_table_picks_the_leaf_of_the_scan_and_its_columns_agree_with_its_rows(
    case: tuple[Packer, list[Ask]],
) -> None:
    packer, asks = case
    for ask in asks:
        if ask.spread:
            continue
        cap = min(ask.node_cap, packer.ix.max_cap)
        table = packer._leaf_table(cap)
        assert table is not None
        fewest = fewest_nodes(packer, ask)
        parts, fits = table.parts(ask.k, ask.max_nodes_per_leaf)
        assert np.array_equal(table.fits(ask.k, fewest, ask.max_nodes_per_leaf)[0], fits)
        assert np.array_equal(table.fits(ask.k, fewest, ask.max_nodes_per_leaf)[1],
                              fits & (parts <= fewest))
        # no leaf holds k GPUs on fewer nodes than an empty cluster
        assert (parts[fits] >= fewest).all()
        least = table.fewest_parts(fits, ask.k, fewest)
        if fits.any():
            assert least is not None
            assert np.array_equal(least, np.flatnonzero(fits & (parts == parts[fits].min())))
        else:
            assert least is None
        assert packer._best_leaf(ask) == packer._best_leaf_scan(ask, fewest)
        leaf = packer._best_leaf(ask)
        if leaf is not None:  # the leaves change between asks
            packer.take(ask.job, packer._fill_leaf(ask, leaf, ask.k))


@FAST_PATH_SETTINGS
@given(case=packers())
def test_scores_at_once_or_inline_are_those_leaf_by_leaf(case: tuple[Packer, list[Ask]]) -> None:
    packer, asks = case
    for ask in asks:
        assert packer._best_node(ask) == best_node_reference(packer, ask)
        assert packer._by_score(ask) == leaves_by_score_reference(packer, ask)
        for leaf in range(len(packer.ix.leaf_names)):
            for cap in {packer.ix.max_cap, max(1, packer.ix.max_cap // 2)}:
                assert packer._room_totals(leaf, cap) == packer._capped_rooms(leaf, cap)[1]
        node = packer._best_node(ask)
        if node is not None:
            packer.take(ask.job, {node: ask.k})


@FAST_PATH_SETTINGS
@given(case=packers())
def test_the_leaf_tables_read_every_change_in_order(case: tuple[Packer, list[Ask]]) -> None:
    """Rows built afresh equal rows kept up to date by the changes read."""
    packer, asks = case
    cap = packer.ix.max_cap
    kept = packer._leaf_table(cap)
    assert kept is not None
    for ask in asks:
        node = packer._best_node(ask)
        if node is not None:
            packer.take(ask.job, {node: ask.k})
        with mock.patch.dict(packer._tables, clear=True):
            fresh = packer._leaf_table(cap)
        kept = packer._leaf_table(cap)
        assert fresh is not None and kept is not None
        assert np.array_equal(kept.totals, fresh.totals)
        assert np.array_equal(kept.count, fresh.count)
        assert np.array_equal(kept.room, fresh.room)


@FAST_PATH_SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_applicable_means_no_sequence_problem(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nodes = [f"n{i}" for i in range(4)]
    capacity = dict.fromkeys(nodes, 4)

    def placement() -> dict[str, tuple[tuple[str, int], ...]]:
        used = dict.fromkeys(nodes, 0)
        out = {}
        for job in (f"j{n}" for n in range(6)):
            node = nodes[int(rng.integers(len(nodes)))]
            count = int(rng.integers(0, 4 - used[node] + 1))
            if count:
                used[node] += count
                out[job] = ((node, count),)
        return out

    before, after = placement(), placement()
    assert sequence_applicable(before, after, capacity) == (
        not sequence_problems(before, after, capacity))
