"""Step 2 places a job afresh only when the free GPUs allow a lower penalty than it has
(Packer.penalty_floor, steps.SKIP_HOPELESS_AFRESH) against always trying (the former
code): the same placements; and the floor is below the penalty of every placement.
"""

from __future__ import annotations

import random
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_placement_fast_paths import packers
from tests.test_placement_unreachable import crowded_call
from voda.core.model import Cluster, Job, Node, Placement
from voda.core.placement import steps
from voda.core.placement.manager import PlacementSettings, TopologyPlacer
from voda.core.placement.packer import Ask, Packer

AFRESH_SETTINGS = settings(max_examples=80, deadline=None,
                           suppress_health_check=[HealthCheck.too_slow])


def placed(seed: int, skip: bool, many_leaves: bool = False) -> Placement:
    placer, allocation, jobs, cluster, previous = (
        resized_call(seed) if many_leaves else crowded_call(seed))
    with mock.patch.object(steps, "SKIP_HOPELESS_AFRESH", skip):
        return placer(allocation, jobs, cluster, previous)


def resized_call(seed: int) -> tuple[TopologyPlacer, dict[str, int], dict[str, Job], Cluster,
                                      Placement]:
    """Like bench/place.py's resized calls, on 64-128 leaves (the leaf tables are used)."""
    rng = random.Random(seed)
    per_leaf, gpus = rng.choice((1, 2, 4)), rng.choice((4, 8))
    leaves = rng.choice((64, 96, 128))
    cluster = Cluster(tuple(
        Node(f"n{i}", gpus, leaf=f"l{i // per_leaf}", spine=f"s{i // (per_leaf * 16)}")
        for i in range(leaves * per_leaf)))
    capacity = cluster.capacity()
    count = capacity // 4
    strategies = ("consolidated",) * 6 + ("distributed", "balanced")
    jobs = {f"j{i:04d}": Job(f"j{i:04d}", 1, 64, submit_time=float(i),
                             placement_strategy=rng.choice(strategies))
            for i in range(count + count // 10)}
    names = sorted(jobs)
    placer = TopologyPlacer(rng.choice((PlacementSettings(), PlacementSettings(candidates=2),
                                        PlacementSettings(max_nodes_per_leaf=2))))
    old = _fitted({n: rng.choice((1, 1, 2, 2, 4, 4, 8, 16)) for n in names[:count]},
                  int(capacity * 0.9))
    previous = placer(old, jobs, cluster, {})
    resized = rng.choice((0.3, 0.7))
    allocation = {}
    for name in names[:count]:
        r = rng.random()
        if r >= 0.05:
            allocation[name] = (max(1, old[name] // 2) if r < 0.05 + resized / 2
                                else old[name] * 2 if r < 0.05 + resized else old[name])
    for name in names[count:]:
        allocation[name] = rng.choice((1, 2, 4, 8))
    allocation = _fitted(allocation, capacity)
    return placer, allocation, jobs, cluster, {n: p for n, p in previous.items()
                                               if n in allocation}


def _fitted(allocation: dict[str, int], capacity: int) -> dict[str, int]:
    while sum(allocation.values()) > capacity:
        name = max(allocation, key=lambda n: (allocation[n], n))
        allocation[name] = max(1, allocation[name] // 2)
    return allocation


@AFRESH_SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_skipping_a_hopeless_fresh_placement_changes_no_placement(seed: int) -> None:
    assert placed(seed, skip=True) == placed(seed, skip=False)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_the_same_on_many_leaves(seed: int) -> None:
    assert placed(seed, skip=True, many_leaves=True) == placed(seed, skip=False,
                                                               many_leaves=True)


def test_fresh_placements_are_skipped_in_these_cases() -> None:
    """The comparisons above are not empty: fewer requests are packed with the skip."""
    for many_leaves in (False, True):
        packed = {}
        for skip in (True, False):
            with mock.patch.object(Packer, "place", side_effect=Packer.place,
                                   autospec=True) as place:
                for seed in range(8):
                    placed(seed, skip, many_leaves)
            packed[skip] = place.call_count
        assert packed[True] < packed[False], packed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=packers())
def test_the_floor_is_at_most_the_penalty_of_any_placement(
    case: tuple[Packer, list[Ask]],
) -> None:
    packer, asks = case
    rng = np.random.default_rng(len(asks))
    for ask in asks:
        k = min(ask.k, packer.ix.total_free)
        if k == 0:
            continue
        floor = packer.penalty_floor(ask.job, k)
        fresh = packer.place(packer.ask(ask.job, k, {}))
        assert floor <= packer.penalty(ask.job, fresh)
        assert floor <= packer.penalty(ask.job, packer._anywhere(k))
        assert floor <= packer.penalty(ask.job, random_placement(packer, k, rng))
        packer.take(ask.job, fresh)  # the free GPUs change between asks


def random_placement(packer: Packer, k: int, rng: np.random.Generator) -> dict[int, int]:
    """k of the free GPUs, from nodes in a random order."""
    counts: dict[int, int] = {}
    for i in rng.permutation(len(packer.ix.free)).tolist():
        take = min(packer.ix.free[i], k)
        if take:
            counts[i] = take
            k -= take
        if k == 0:
            break
    return counts
