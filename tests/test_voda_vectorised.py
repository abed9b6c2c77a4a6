"""Voda's weights, charges, tail floors and the count program's bands worked out for all
jobs at once (voda.core.allocation.voda, counts) are those worked out one job at a time, as
they were (tests/voda_reference.py): the same bits, on random jobs (some with goodput
models and restart costs), curves from them, and the bench's jobs."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import voda_reference as reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_allocation_properties import jobs_strategy
from test_utility_rows import CONFIGS, same_bits, with_models

from voda.core.allocation import counts, voda
from voda.core.allocation.run_memo import VodaMemo
from voda.core.allocation.voda import INELASTIC_SHARES, Curve
from voda.core.model import Job

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
from allocate import make_jobs

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def with_restart_costs(jobs: list[Job], seed: int) -> list[Job]:
    """Some jobs with a restart cost of their own (0, a few seconds, NaN) and restarts."""
    rng = random.Random(seed)
    return [dataclasses.replace(j, restart_cost=rng.choice([0.0, 0.0, 12.0, 250.0, math.nan]),
                                restarts=rng.randint(0, 3), rescale_delay=rng.choice([0.0, 4.5]))
            for j in jobs]


def curves_of(jobs: list[Job], capacity: int, which: int) -> list[Curve]:
    algorithm = CONFIGS[which]
    models = voda.category_models(jobs)
    return algorithm.curves(jobs, models, capacity)


def check_alike(jobs: list[Job], curves: list[Curve], capacity: int, node: int,
                exponent: float, rank_exponent: float) -> None:
    with mock.patch.object(voda, "VECTOR_MIN_JOBS", 0):  # all jobs at once, however few
        aged = voda.aged_sizes(jobs, curves, 2.0, 0.9)
        factors = [voda.inelastic_first(jobs, curves, capacity, exponent, node, share)
                   for share in INELASTIC_SHARES]
        floors = [voda.tail_floors(curves, budget, node) for budget in (1, 3, len(jobs))]
        shares_of = ({share: voda.water_shares(curves, capacity, share).tolist()
                      for share in INELASTIC_SHARES} if jobs else {})
    for share, shares in shares_of.items():  # the one-job-at-a-time shares, on Python ints
        assert shares == voda.water_shares_each(curves, capacity, share)
    old_aged = voda.aged_sizes_each(jobs, [c.size for c in curves], 2.0, 0.9)
    assert same_bits(np.array(aged, dtype=float), np.array(old_aged, dtype=float))
    assert same_bits(voda.rank_weights(aged, rank_exponent),
                     reference.rank_weights(old_aged, rank_exponent))
    if exponent > 0 and jobs:
        for share, mine in zip(INELASTIC_SHARES, factors, strict=True):
            shares = voda.water_shares(curves, capacity, share).tolist()
            assert same_bits(mine, voda.inelastic_factors_each(jobs, curves, shares,
                                                               exponent, node))
    for budget, mine in zip((1, 3, len(jobs)), floors, strict=True):
        assert mine == voda.tail_floors_each(curves, budget, node)
    for mine, theirs in zip(voda.restart_charges(jobs, 30.0, 240.0),
                            reference.restart_charges(jobs, 30.0, 240.0), strict=True):
        assert same_bits(mine, np.asarray(theirs, dtype=float))


@SETTINGS
@given(jobs=jobs_strategy(max_jobs=14), capacity=st.integers(1, 48),
       which=st.integers(0, len(CONFIGS) - 1), seed=st.integers(0, 2**32 - 1),
       exponent=st.sampled_from([0.0, 0.75, 1, 2.5]),
       rank_exponent=st.sampled_from([0.0, 0.5, 0.9]))
def test_weights_and_charges_of_all_jobs_are_those_of_each(
    jobs: list[Job], capacity: int, which: int, seed: int, exponent: float,
    rank_exponent: float
) -> None:
    jobs = with_restart_costs(with_models(jobs, seed), seed)
    node = counts.per_node(CONFIGS[which].gpus_per_node)
    check_alike(jobs, curves_of(jobs, capacity, which), capacity, node, exponent,
                rank_exponent)


@SETTINGS
@given(sizes=st.lists(st.one_of(st.sampled_from([0.0, -0.0, 1.0, 2.0, math.inf, math.nan]),
                                st.floats(-1e6, 1e6)), max_size=30),
       p=st.sampled_from([0.0, 0.5, 0.9]))
def test_the_rank_order_is_python_sorts_even_with_ties_and_nan(sizes: list[float],
                                                               p: float) -> None:
    assert same_bits(voda.rank_weights(sizes, p), reference.rank_weights(sizes, p))


@SETTINGS
@given(tops=st.lists(st.integers(0, 40), max_size=30), capacity=st.integers(-5, 400))
def test_the_bands_are_those_worked_out_job_by_job(tops: list[int], capacity: int) -> None:
    assert counts._bands(tops, capacity) == reference.bands(tops, capacity)


def test_the_bench_jobs_weigh_alike() -> None:
    for seed, count, capacity in ((1, 1_000, 4_096), (2, 400, 64), (3, 300, 1_500)):
        jobs = with_restart_costs(make_jobs(count, seed), seed)
        check_alike(jobs, curves_of(jobs, capacity, 0), capacity, 4, 0.75, 0.5)


@SETTINGS
@given(jobs=jobs_strategy(max_jobs=14), cuts=st.lists(st.integers(0, 14), max_size=4),
       capacities=st.lists(st.integers(1, 48), min_size=5, max_size=5),
       which=st.integers(0, len(CONFIGS) - 1), seed=st.integers(0, 2**32 - 1),
       exponent=st.sampled_from([0.0, 0.75, 2.5]), share=st.sampled_from(INELASTIC_SHARES),
       vector_from=st.sampled_from([0, 6]))
def test_factors_of_many_problems_are_those_of_each_problem(
    jobs: list[Job], cuts: list[int], capacities: list[int], which: int, seed: int,
    exponent: float, share: str, vector_from: int
) -> None:
    # The quota layer's problems priced together: each problem's factors are those of
    # its own call, one job at a time.
    jobs = with_models(jobs, seed)
    node = counts.per_node(CONFIGS[which].gpus_per_node)
    bounds = [0, *sorted(min(c, len(jobs)) for c in cuts), len(jobs)]
    problems = [(jobs[a:b], curves_of(jobs[a:b], capacity, which), capacity)
                for (a, b), capacity in zip(itertools.pairwise(bounds), capacities, strict=False)]
    with mock.patch.object(voda, "VECTOR_MIN_JOBS", vector_from):
        many = voda.inelastic_first_many(problems, exponent, node, share)
    for (part, curves, capacity), mine in zip(problems, many, strict=True):
        assert same_bits(mine, voda.inelastic_first(part, curves, capacity, exponent, node,
                                                    share))


def test_factors_of_the_bench_jobs_in_many_problems_are_those_of_each_problem() -> None:
    jobs = make_jobs(400, 5)
    rng = random.Random(5)
    bounds = sorted({0, len(jobs), *(rng.randrange(len(jobs)) for _ in range(30))})
    problems = []
    for a, b in itertools.pairwise(bounds):
        capacity = rng.choice([8, 24, 61, 200])
        problems.append((jobs[a:b], curves_of(jobs[a:b], capacity, 0), capacity))
    for share in INELASTIC_SHARES:
        many = voda.inelastic_first_many(problems, 0.75, 4, share)
        each = [voda.inelastic_first(part, curves, capacity, 0.75, 4, share)
                for part, curves, capacity in problems]
        assert all(same_bits(mine, theirs) for mine, theirs in zip(many, each, strict=True))
        assert sum(int((f != 1.0).sum()) for f in many) > len(jobs) // 10  # factors that count


@SETTINGS
@given(rows=st.lists(st.tuples(
    st.sampled_from([0.0, 1.0, 30.0, 1e-3, 7.5, 1e4]),  # seconds run in the epoch
    st.floats(0.0, 12.0),  # GPUs held on average there (half-way values round to even)
    st.integers(1, 9), st.floats(0.0, 9.0),  # epochs, completed
    st.lists(st.sampled_from([0.0, 1.0, 2.5, 40.0, 1e5, math.inf, math.nan]),
             min_size=1, max_size=6)), max_size=12))
def test_the_shares_left_of_all_jobs_are_those_of_each(rows: list[tuple]) -> None:
    jobs, caps, segments = [], [], []
    for i, (ran, gpus, epochs, done, seconds) in enumerate(rows):
        jobs.append(Job(name=f"j{i}", epochs=epochs, completed_epochs=min(done, epochs),
                        running_seconds_since_epoch=ran,
                        attained_gpu_seconds_since_epoch=ran * round(gpus * 2) / 2))
        caps.append(len(seconds))
        segments.append([math.inf, *seconds])
    flat = np.array([v for part in segments for v in part], dtype=float)
    starts = np.cumsum([0, *(len(p) for p in segments[:-1])]).astype(np.int64)
    mine = voda.shares_left(jobs, [j.remaining_epochs for j in jobs], flat, starts, caps)
    theirs = [voda.share_left(j, np.array(p), voda.EPOCH_PROGRESS)
              for j, p in zip(jobs, segments, strict=True)]
    assert same_bits(mine, np.array(theirs, dtype=float))


@SETTINGS
@given(jobs=jobs_strategy(max_jobs=14), cuts=st.lists(st.integers(0, 14), max_size=4),
       capacities=st.lists(st.integers(0, 48), min_size=5, max_size=5),
       which=st.integers(0, len(CONFIGS) - 1), seed=st.integers(0, 2**32 - 1),
       vector_from=st.sampled_from([0, 6, 64]))
def test_weights_floors_and_shares_of_many_problems_are_those_of_each(
    jobs: list[Job], cuts: list[int], capacities: list[int], which: int, seed: int,
    vector_from: int
) -> None:
    # The quota layer's problems of one call: their weights worked out together, their
    # tail floors read from one store at budgets up and down, and the water shares of
    # jobs that all fit at their caps read off the caps, against each problem on its own
    # by the old path.
    algorithm = CONFIGS[which]
    jobs = with_restart_costs(with_models(jobs, seed), seed)
    node = counts.per_node(algorithm.gpus_per_node)
    bounds = [0, *sorted(min(c, len(jobs)) for c in cuts), len(jobs)]
    problems = [(jobs[a:b], curves_of(jobs[a:b], capacity, which), capacity)
                for (a, b), capacity in zip(itertools.pairwise(bounds), capacities, strict=False)]
    with mock.patch.object(voda, "VECTOR_MIN_JOBS", vector_from):
        many = algorithm._job_weights_many([(part, curves) for part, curves, _ in problems])
        memo = VodaMemo()
        for budget in (3, 0, len(jobs), 1, 2):
            for _, curves, _ in problems:
                kept = memo.floors(curves, budget, node, voda.tail_floors)
                assert kept == voda.tail_floors_each(curves, budget, node)
        for _, curves, capacity in problems:
            caps = [max(c.cap, 0) for c in curves]
            for share in INELASTIC_SHARES:
                filled = voda.water_shares_filled(curves, caps, capacity, share) if caps else []
                assert voda.water_shares_each(curves, capacity, share) == filled
                assert voda.water_shares(curves, capacity, share).tolist() == filled
    for (part, curves, _), mine in zip(problems, many, strict=True):
        assert same_bits(mine, algorithm._job_weights(part, curves))


@settings(max_examples=400, deadline=None)
@given(caps=st.lists(st.integers(-1, 40), min_size=1, max_size=40),
       sizes=st.lists(st.sampled_from([0.5, 1.0, 1.0, 3.0, 120.0, math.inf, math.nan])
                      | st.floats(0.0, 1e4), min_size=40, max_size=40),
       capacity=st.integers(0, 400))
def test_water_shares_between_match_the_filled_levels(caps: list[int], sizes: list[float],
                                                      capacity: int) -> None:
    # The one-pass "between" shares (and the prefix levels' pass over the rooms that fit)
    # against the water levels worked out as before, with ties, inf and NaN among the sizes.
    curves = [Curve(cap, np.zeros(max(cap, 0) + 1), size, None, None)
              for cap, size in zip(caps, sizes, strict=False)]
    rooms = [max(cap, 0) for cap in caps]
    for share in INELASTIC_SHARES:
        assert (voda.water_shares_each(curves, capacity, share)
                == (rooms if sum(rooms) <= capacity
                    else voda.water_shares_filled(curves, rooms, capacity, share)))
    assert voda.water_shares_filled(curves, rooms, capacity, "between") == [
        int(math.sqrt(min(room, even) * min(room, later))) for room, even, later in zip(
            rooms, [voda.water_level(sorted(rooms), capacity)] * len(rooms),
            _later_levels(curves, rooms, capacity), strict=True)]


def _later_levels(curves: list[Curve], rooms: list[int], capacity: int) -> list[int]:
    """Each job's water level over the jobs at least as long as it, one prefix at a time
    (the reference for `prefix_water_levels`' pass over the rooms that all fit)."""
    longest_first = sorted(range(len(curves)), key=lambda i: (curves[i].size, i))[::-1]
    levels = [0] * len(curves)
    for k, i in enumerate(longest_first):
        prefix = sorted(rooms[j] for j in longest_first[:k + 1])
        levels[i] = prefix[-1] if sum(prefix) <= capacity else voda.water_level(prefix, capacity)
    return levels
