"""The four readings of "p99 no worse than the baseline's" (voda.sim.tail), which the
quality benches print side by side."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voda.sim.tail import TailRun, p99, tail_readings

# 100 JCTs each: the p99 lies 0.01 of the way from the second longest to the longest.
SHORT = [100.0] * 98


def test_the_readings_can_disagree_and_each_is_reported() -> None:
    # Run a: ours has one long job more than theirs, so its p99 is above.
    # Run b: ours is far below. Both runs are of workload-1.
    # Run c (workload-2): ours a little below.
    runs = [
        TailRun("workload-1", [*SHORT, 1000.0, 5000.0], [*SHORT, 100.0, 5000.0]),
        TailRun("workload-1", [*SHORT, 200.0, 300.0], [*SHORT, 2000.0, 9000.0]),
        TailRun("workload-2", [*SHORT, 900.0, 950.0], [*SHORT, 1000.0, 1000.0]),
    ]
    got = tail_readings(runs)
    ours = [p99(r.ours) for r in runs]
    theirs = [p99(r.theirs) for r in runs]
    assert ours[0] == pytest.approx(1_040.0) and theirs[0] == pytest.approx(149.0)
    assert got.runs_above == 1 and got.runs == 3
    assert got.mean_p99 == pytest.approx(sum(ours) / sum(theirs))
    # workload-1 sums to (1,040 + 201) / (149 + 2,070) = 0.56; workload-2 to 0.9005.
    assert got.worst_group == "workload-2"
    assert got.worst_group_ratio == pytest.approx(ours[2] / theirs[2])
    pooled_ours = np.percentile([j for r in runs for j in r.ours], 99)
    pooled_theirs = np.percentile([j for r in runs for j in r.theirs], 99)
    assert got.pooled == pytest.approx(pooled_ours / pooled_theirs)


def test_a_run_where_no_job_finished_reads_nan_not_below_and_an_empty_set_is_refused(
) -> None:
    got = tail_readings([TailRun("w", [], [1.0, 2.0]), TailRun("w", [5.0], [1.0])])
    assert math.isnan(got.mean_p99) and math.isnan(got.worst_group_ratio)
    assert got.runs_above == 1  # the run that finished a job; the other is not counted below
    assert got.pooled == pytest.approx(5.0 / p99([1.0, 2.0, 1.0]))
    with pytest.raises(ValueError, match="no runs"):
        tail_readings([])


jcts = st.lists(st.floats(1.0, 1e6), min_size=1, max_size=40)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), jcts, jcts), min_size=1, max_size=6))
def test_identical_schedules_read_one_everywhere_and_a_uniformly_slower_one_its_factor(
        raw: list[tuple[str, list[float], list[float]]]) -> None:
    same = tail_readings([TailRun(g, theirs, theirs) for g, _, theirs in raw])
    assert (same.mean_p99, same.worst_group_ratio, same.pooled) == pytest.approx((1, 1, 1))
    assert same.runs_above == 0
    slower = tail_readings([TailRun(g, [1.5 * j for j in theirs], theirs)
                            for g, _, theirs in raw])
    assert (slower.mean_p99, slower.worst_group_ratio, slower.pooled) == pytest.approx(
        (1.5, 1.5, 1.5))
    assert slower.runs_above == len(raw)
