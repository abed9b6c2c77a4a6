"""The batched estimates AFS-L tables before its tournament equal the one-at-a-time ones."""

import dataclasses
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voda.core import estimate
from voda.core.allocation.afs_states import rounded_as_python
from voda.core.estimate import (
    amdahl_fits,
    amdahl_fits_together,
    epoch_time_at,
    epoch_time_runs,
    fit_speed,
    growth_limit,
    growth_limits,
    observation_points,
)
from voda.core.model import Job

seconds = st.sampled_from([10.0, 20.0, 35.0, 60.0, 90.0]) | st.floats(0.01, 1e5)
observations = st.dictionaries(st.integers(1, 40), seconds, max_size=5)


@st.composite
def asked_runs(draw: st.DrawFn, observed: st.SearchStrategy = observations) -> tuple:
    count = draw(st.integers(0, 8))
    jobs = [Job(name=f"j{i}", epoch_time_by_workers=draw(observed)) for i in range(count)]
    first = [draw(st.integers(1, 48)) for _ in jobs]
    runs = [draw(st.integers(0, 12)) for _ in jobs]
    return jobs, first, runs


def one_at_a_time(jobs: list[Job], first: list[int], runs: list[int]) -> list[float]:
    return [epoch_time_at(job, k) for job, lo, n in zip(jobs, first, runs, strict=True)
            for k in range(lo, lo + n)]


# A few epoch times are asked of each job's model in Python (SMALL_RUNS), more all at
# once in NumPy: each way is checked against epoch_time_at.
WAYS = pytest.mark.parametrize("small_runs", [estimate.SMALL_RUNS, -1],
                               ids=["one by one", "all at once"])


@WAYS
@settings(max_examples=300, deadline=None)
@given(asked=asked_runs())
def test_epoch_time_runs_are_bit_for_bit_the_epoch_times_at_each_count(
        small_runs: int, asked: tuple) -> None:
    jobs, first, runs = asked
    with mock.patch.object(estimate, "SMALL_RUNS", small_runs):
        got = epoch_time_runs(jobs, first, runs)
    assert got.tolist() == one_at_a_time(jobs, first, runs)
    assert got.tobytes() == np.array(one_at_a_time(jobs, first, runs), dtype=float).tobytes()


@WAYS
@settings(max_examples=50, deadline=None)
@given(asked=asked_runs(st.dictionaries(st.sampled_from([1, 2, 2**40, 2**50]), seconds,
                                        min_size=1, max_size=3)))
def test_epoch_time_runs_with_counts_too_large_to_key_exactly(small_runs: int,
                                                              asked: tuple) -> None:
    jobs, first, runs = asked
    with mock.patch.object(estimate, "SMALL_RUNS", small_runs):
        got = epoch_time_runs(jobs, first, runs)
    assert got.tolist() == one_at_a_time(jobs, first, runs)


@settings(max_examples=100, deadline=None)
@given(asked=asked_runs())
def test_epoch_time_runs_in_python_are_those_in_numpy_from_remembered_models(
        asked: tuple) -> None:
    jobs, first, runs = asked
    snapshots = [dataclasses.replace(job) for job in jobs]  # read-only maps: remembered
    for _ in range(2):
        with mock.patch.object(estimate, "SMALL_RUNS", -1):
            theirs = epoch_time_runs(snapshots, np.array(first), runs)
        mine = estimate.epoch_time_runs_one_by_one(snapshots, np.array(first), np.array(runs))
        assert mine.tobytes() == theirs.tobytes()


near_ties = st.builds(lambda i, d, e: (i + 0.5) / 10.0**d + e, st.integers(-10**12, 10**12),
                      st.sampled_from([6, 12]), st.sampled_from([0.0, 1e-17, -1e-17]))
values = st.lists(st.floats(allow_nan=True, allow_infinity=True) | near_ties, max_size=30)


@settings(max_examples=500, deadline=None)
@given(values=values, digits=st.sampled_from([6, 12]))
def test_rounded_as_python_is_round_for_every_value(values: list[float], digits: int) -> None:
    got = rounded_as_python(np.array(values, dtype=float), digits).tolist()
    expected = [round(v, digits) for v in values]
    assert all((math.isnan(a) and math.isnan(b)) or a == b for a, b in
               zip(got, expected, strict=True)), (got, expected)
    # The same sign of zero as round gives, too.
    assert [math.copysign(1.0, a) for a in got] == [math.copysign(1.0, b) for b in expected]


@settings(max_examples=300, deadline=None)
@given(observed=st.lists(st.dictionaries(st.integers(1, 64), seconds | st.sampled_from(
    [1e-300, 5e-324, 1e300]), min_size=1, max_size=12), min_size=1, max_size=10))
def test_amdahl_fits_of_many_jobs_are_fit_speed_of_each(observed: list[dict]) -> None:
    # The fits epoch_time_runs makes for all jobs at once (voda.core.estimate.amdahl_fits)
    # are fit_speed's, the reference, to the last bit: each sum in the same order.
    points = [(j, k, t) for j, times in enumerate(observed) for k, t in sorted(times.items())]
    job, k, t = (np.array(column, dtype=float) for column in zip(*points, strict=True))
    serial, parallel, slope = amdahl_fits(job.astype(np.int64), k, t,
                                          np.arange(len(observed)))
    for j, times in enumerate(observed):
        model = fit_speed(times)
        for mine, theirs in ((serial[j], model.serial), (parallel[j], model.parallel),
                             (slope[j], model.last_slope)):
            assert mine == theirs or (math.isnan(mine) and math.isnan(theirs))


@settings(max_examples=400, deadline=None)
@given(observed=st.lists(st.dictionaries(st.integers(1, 64), seconds | st.sampled_from(
    [1e-300, 5e-324, 1e300, 1e-160, 1e160]), min_size=1, max_size=12), min_size=1, max_size=10),
    some=st.data())
def test_amdahl_fits_one_job_at_a_time_are_those_of_all_jobs_together(
        observed: list[dict], some: st.DataObject) -> None:
    # amdahl_fits works in Python floats, job by job, remembered by points; the vectorised
    # amdahl_fits_together is the reference: the same bits (signs of zero and NaNs too).
    points = [(j, k, t) for j, times in enumerate(observed) for k, t in sorted(times.items())]
    job, k, t = (np.array(column, dtype=float) for column in zip(*points, strict=True))
    job = job.astype(np.int64)
    fitted = np.array(sorted(some.draw(st.sets(st.sampled_from(range(len(observed))),
                                               min_size=1))), dtype=np.int64)
    for _ in range(2):  # the second time from what was remembered
        mine = amdahl_fits(job, k, t, fitted)
        theirs = amdahl_fits_together(job, k, t, fitted)
        assert [a.tobytes() for a in mine] == [b.tobytes() for b in theirs]


def test_amdahl_fits_of_no_job() -> None:
    empty = np.empty(0)
    assert [len(a) for a in amdahl_fits(empty.astype(np.int64), empty, empty,
                                         empty.astype(np.int64))] == [0, 0, 0]


@settings(max_examples=300, deadline=None)
@given(observed=st.dictionaries(st.integers(-2, 64), seconds | st.sampled_from(
    [0.0, -1.0, 1e-300, 5e-324, 1e300]), max_size=12))
def test_kept_models_are_fit_speeds(observed: dict) -> None:
    # The model epoch_time_runs_one_by_one keeps per map fits by the remembered points.
    for _ in range(2):
        assert estimate._fit_speed_of_kept_points(observed, 37.0) == fit_speed(observed, 37.0)


@settings(max_examples=300, deadline=None)
@given(observed=st.lists(st.dictionaries(st.integers(0, 24), seconds | st.sampled_from(
    [0.0, -5.0]), max_size=6), max_size=10), data=st.data())
def test_growth_limits_of_many_jobs_are_growth_limit_of_each(observed: list[dict],
                                                             data: st.DataObject) -> None:
    """Counts past the measured ones, below them, between; ties; counts and times a model
    drops (0, and times not above 0); hi at, below and above lo."""
    jobs = [Job(name=f"j{i}", epoch_time_by_workers=times) for i, times in enumerate(observed)]
    lo = [data.draw(st.integers(1, 20)) for _ in jobs]
    hi = [data.draw(st.integers(0, 26)) for _ in jobs]
    limits = growth_limits(observation_points(jobs), np.array(lo, dtype=np.int64),
                           np.array(hi, dtype=np.int64))
    assert limits.tolist() == [growth_limit(job, a, b)
                               for job, a, b in zip(jobs, lo, hi, strict=True)]
