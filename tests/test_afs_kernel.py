"""AFS-L's compiled rounds (voda/core/allocation/afs_kernel.py) decide as the interpreted
ones (`_Tournament.run_interpreted`, the reference) and as the tournament replayed for
every GPU (tests/afs_reference.py)."""

from __future__ import annotations

import dataclasses
import random
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_allocation_properties import check_afs_l_against_the_replay, jobs_strategy

from voda.core.allocation import afs, afs_states
from voda.core.allocation.base import by_submit, without_slowdown
from voda.core.model import Job, JobStatus

pytest.importorskip("numba")

KERNEL = afs._kernel()
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def mixed_jobs(count: int, seed: int) -> list[Job]:
    """Jobs as bench/allocate.py makes them: elastic and rigid, with and without
    measured epoch times (linear, Amdahl, and some that slow down past a count)."""
    rng = random.Random(seed)
    jobs = []
    for i in range(count):
        lo = rng.choice((1, 1, 2, 4))
        hi = lo if rng.random() < 0.3 else lo * rng.choice((2, 4))
        times = {}
        if rng.random() < 0.7:
            one, serial = rng.uniform(30.0, 600.0), rng.uniform(0.0, 0.3)
            times = {k: one * (serial + (1 - serial) / k) for k in sorted({1, lo, hi})}
            if rng.random() < 0.1:
                times[hi + 1] = times[hi] * 1.2  # slower past max: without_slowdown cuts
        jobs.append(Job(name=f"job-{i:04d}", min_workers=lo, max_workers=hi,
                        submit_time=float(rng.randint(0, count)),
                        epochs=rng.randint(1, 100), completed_epochs=float(rng.randint(0, 3)),
                        status=JobStatus.WAITING, epoch_time_by_workers=times))
    return jobs


def both_ways(jobs: list[Job], capacity: int) -> tuple[list[int], list[int]]:
    """One class's counts from the interpreted rounds and from the compiled ones."""
    ordered = [without_slowdown(j) for j in by_submit(jobs) if j.min_workers <= capacity]
    if not ordered:
        return [], []
    return (afs._Tournament(ordered, capacity).run_interpreted(),
            afs._Tournament(ordered, capacity).run_compiled(KERNEL))


@SETTINGS
@given(count=st.integers(1, 300), share=st.floats(0.05, 3.0), seed=st.integers(0, 10**6))
def test_compiled_rounds_are_the_interpreted_ones(count: int, share: float, seed: int) -> None:
    """Up to 300 jobs: masks of several words, a query crossing from one to the next."""
    jobs = mixed_jobs(count, seed)
    interpreted, compiled = both_ways(jobs, max(1, int(share * count)))
    assert compiled == interpreted


@SETTINGS
@given(count=st.integers(1, 200), share=st.floats(0.05, 3.0), seed=st.integers(0, 10**6))
def test_compiled_rounds_with_states_computed_one_at_a_time(
        count: int, share: float, seed: int) -> None:
    """No state tabled past min: the kernel stops for every state and goes on."""
    jobs = mixed_jobs(count, seed)
    with mock.patch.object(afs_states, "GROWTH_TABLED", 0):
        interpreted, compiled = both_ways(jobs, max(1, int(share * count)))
    assert compiled == interpreted


@SETTINGS
@given(jobs=jobs_strategy(max_jobs=60), capacity=st.integers(0, 400))
def test_compiled_rounds_are_the_replayed_tournament(jobs: list[Job], capacity: int) -> None:
    with mock.patch.object(afs, "KERNEL_MIN_JOBS", 0):
        check_afs_l_against_the_replay(
            [dataclasses.replace(j, priority=0) for j in jobs], capacity)


@SETTINGS
@given(jobs=jobs_strategy(max_jobs=30), capacity=st.integers(0, 200))
def test_compiled_rounds_are_the_replayed_tournament_without_tables(
        jobs: list[Job], capacity: int) -> None:
    with mock.patch.object(afs, "KERNEL_MIN_JOBS", 0), \
            mock.patch.object(afs_states, "GROWTH_TABLED", 0):
        check_afs_l_against_the_replay(jobs, capacity)


@pytest.mark.parametrize(("count", "capacity"), [(1000, 4096), (1000, 512), (3000, 2000)])
def test_compiled_rounds_on_the_benchmarks_cells(count: int, capacity: int) -> None:
    interpreted, compiled = both_ways(mixed_jobs(count, count + capacity), capacity)
    assert compiled == interpreted


def test_many_jobs_take_the_compiled_rounds() -> None:
    jobs = mixed_jobs(afs.KERNEL_MIN_JOBS, 1)
    with mock.patch.object(afs._Tournament, "run_interpreted", side_effect=AssertionError):
        afs.afs_l(by_submit(jobs), 40)


def test_counts_follow_the_class_order_with_jobs_left_out() -> None:
    """A job whose min exceeds the capacity gets 0 in its place; the others' counts
    are the tournament's over the jobs that fit."""
    jobs = by_submit(mixed_jobs(200, 3))
    fit = [j for j in jobs if j.min_workers <= 3]
    assert len(fit) < len(jobs)
    counts = dict(zip([j.name for j in jobs], afs.afs_l(jobs, 3), strict=True))
    assert {j.name: counts[j.name] for j in fit} == dict(
        zip([j.name for j in fit], afs.afs_l(fit, 3), strict=True))
    assert all(counts[j.name] == 0 for j in jobs if j.min_workers > 3)


def test_without_numba_the_rounds_run_interpreted() -> None:
    jobs = by_submit(mixed_jobs(150, 4))
    compiled = afs.afs_l(jobs, 200)
    with mock.patch.object(afs, "_kernel", return_value=None), \
            mock.patch.object(afs._Tournament, "run_compiled", side_effect=AssertionError):
        assert afs.afs_l(jobs, 200) == compiled
