"""The packer's cheaper spread and scoring paths against the code they replaced, on
random clusters of many leaves (hypothesis, as tests/test_placement_fast_paths.py):

- the leaf order of a spread request made as it is read (Packer._spread_order) against
  every leaf scored and sorted (the order of Packer._spread's scan);
- Packer._spread (own nodes last by a stable partition, the first turn handed out at once)
  against the former loop;
- the best-scoring leaf (Packer._best_scored) against max over Packer._score, and on
  leaves alike (Packer._tightest_pick) against every leaf scored at once;
- a leaf's rooms (Packer._capped_rooms) against the rooms worked out node by node.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.test_placement_fast_paths import (
    FAST_PATH_SETTINGS,
    fewest_nodes,
    leaves_by_score_reference,
    packers,
)
from voda.core.placement import packer as packer_module
from voda.core.placement.packer import Ask, NodeCounts, Packer


def spread_reference(packer: Packer, ask: Ask) -> NodeCounts | None:
    """Packer._spread as it was: the leaves scored and sorted, own nodes last by a sort,
    every turn walked."""
    with mock.patch.object(Packer, "_spread_order", Packer._by_score):  # every leaf scored
        ordered = packer._spread_leaves(ask)
    columns: list[list[int]] = []
    total = 0
    for leaf in ordered or ():
        rooms = packer._leaf_rooms(ask, leaf)
        if rooms:  # own nodes last
            key = lambda room: (room[1] in ask.own, -room[0], room[1])  # noqa: E731
            columns.append([i for _, i in sorted(rooms, key=key)])
            total += min(sum(r for r, _ in rooms), ask.max_gpus_per_leaf or ask.k)
        if len(columns) >= ask.k and total >= ask.k:
            break
    # (every turn walked, unchanged)
    return packer._hand_out(ask, columns) if ordered is not None and total >= ask.k else None


def best_scored_reference(packer: Packer, ask: Ask, leaves: list[int]) -> int:
    ix, k = packer.ix, ask.k
    return max(leaves, key=lambda leaf: (
        packer._score(ask, leaf, 1.0 - (ix.leaf_free[leaf] - k) / ix.leaf_cap[leaf]), -leaf))


def rooms_reference(packer: Packer, leaf: int, cap: int) -> list[tuple[int, int]]:
    ix = packer.ix
    rooms = [(min(ix.free[i], cap), i) for i in ix.leaf_nodes[leaf] if min(ix.free[i], cap) > 0]
    return sorted(rooms, key=lambda room: (-room[0], room[1]))


@FAST_PATH_SETTINGS
@given(case=packers(alike=True))
def test_spread_orders_and_placements_are_those_of_the_former_code(
    case: tuple[Packer, list[Ask]],
) -> None:
    packer, asks = case
    assert packer._alike
    for ask in asks:
        for attempt in (ask, ask.relaxed(keep_sensitive=True)):
            assert list(packer._spread_order(attempt)) == leaves_by_score_reference(
                packer, attempt)
            expected = spread_reference(packer, attempt)
            got = packer._spread(attempt)
            assert got == expected
            assert got is None or list(got.items()) == list(expected.items())  # (its order)
        counts = packer._spread(ask) if ask.spread else None
        if counts is not None:  # the leaves change between asks
            packer.take(ask.job, counts)


@FAST_PATH_SETTINGS
@given(case=packers(), seed=st.integers(0, 2**32 - 1))
def test_the_best_scored_leaf_and_a_leaf_s_rooms_are_those_of_the_former_code(
    case: tuple[Packer, list[Ask]], seed: int,
) -> None:
    packer, asks = case
    ix = packer.ix
    leaves = list(range(len(ix.leaf_names)))
    for n, ask in enumerate(asks):
        for start in range(0, len(leaves), 7 + n):
            chosen = leaves[start:start + (seed % 30) + 1]
            assert packer._best_scored(ask, chosen) == best_scored_reference(packer, ask, chosen)
        for leaf in leaves:
            for cap in {ix.max_cap, max(1, ix.max_cap // 2)}:
                assert packer._capped_rooms(leaf, cap)[0] == rooms_reference(packer, leaf, cap)
        node = packer._best_node(ask)
        if node is not None:
            packer.take(ask.job, {node: ask.k})


@FAST_PATH_SETTINGS
@given(case=packers(alike=True), seed=st.integers(0, 2**32 - 1))
def test_the_tightest_winner_on_leaves_alike_is_the_best_scored(
    case: tuple[Packer, list[Ask]], seed: int,
) -> None:
    packer, asks = case
    assert packer._alike
    rng = np.random.default_rng(seed)
    leaves = len(packer.ix.leaf_names)
    for ask in asks:
        fresh = packer.ask(ask.job, ask.k, {})  # near no leaf (unless a preferred domain)
        if fresh.spread or fresh.near_leaves:
            continue
        for _ in range(5):
            winners = np.sort(rng.choice(leaves, int(rng.integers(1, leaves)), replace=False))
            free = packer._leaf_free(winners)
            scores = packer._scores(fresh, winners, fresh.k, free)
            best = packer._tightest_pick(fresh, *packer_module._tightest_of(winners, free))
            assert best is None or best == int(winners[scores == scores.max()].min())
        fewest = fewest_nodes(packer, fresh)
        assert packer._best_leaf(fresh) == packer._best_leaf_scan(fresh, fewest)
        leaf = packer._best_leaf(fresh)
        if leaf is not None:  # the leaves change between asks
            packer.take(fresh.job, packer._fill_leaf(fresh, leaf, fresh.k))
