"""voda.sim.job_gaps: one run's JCTs against another's, by model, and its no-loss average."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voda.sim.job_gaps import (
    category_gaps,
    category_of,
    merge_gaps,
    no_loss_mean_jct,
    paired_jcts,
)
from voda.sim.report import JobResult


def job(name: str, jct: float | None) -> JobResult:
    return JobResult(name=name, submit=0.0, finish=jct, jct=jct)


def test_a_jobs_model_is_its_name_up_to_the_last_dash() -> None:
    assert category_of("cifar10-12") == "cifar10"
    assert category_of("gpt-pmp-3") == "gpt-pmp"
    assert category_of("solo") == "solo"
    assert category_of("-7") == "-7"


def test_gaps_split_each_models_difference_into_hours_saved_and_lost() -> None:
    first = [job("a-1", 3600), job("a-2", 7200), job("b-1", 1800)]
    other = [job("a-1", 7200), job("a-2", 3600), job("b-1", 1800)]
    a, b = category_gaps(first, other)
    assert (a.category, a.jobs, a.jct_hours, a.other_jct_hours) == ("a", 2, 3.0, 3.0)
    assert (a.saved_hours, a.lost_hours, a.later_jobs) == (1.0, 1.0, 1)
    assert (b.category, b.saved_hours, b.lost_hours, b.later_jobs) == ("b", 0.0, 0.0, 0)


def test_only_jobs_finished_in_both_runs_are_compared() -> None:
    first = [job("a-1", 100.0), job("a-2", None), job("a-3", 50.0)]
    other = [job("a-1", 200.0), job("a-2", 10.0)]
    assert paired_jcts(first, other) == [("a-1", 100.0, 200.0)]
    assert no_loss_mean_jct(first, other) == 100.0
    assert math.isnan(no_loss_mean_jct([job("a-1", None)], other))


def test_merged_gaps_add_up_per_model() -> None:
    one = category_gaps([job("a-1", 3600)], [job("a-1", 7200)])
    two = category_gaps([job("a-2", 7200), job("c-1", 60)], [job("a-2", 3600), job("c-1", 60)])
    a, c = merge_gaps([one, two])
    assert (a.jobs, a.saved_hours, a.lost_hours, a.later_jobs) == (2, 1.0, 1.0, 1)
    assert (c.category, c.jobs) == ("c", 1)


@given(st.lists(st.tuples(st.floats(1, 1e6), st.floats(1, 1e6)), min_size=1, max_size=30))
def test_the_no_loss_average_is_no_worse_than_either_run(jcts: list[tuple[float, float]]
                                                         ) -> None:
    first = [job(f"m-{i}", a) for i, (a, _) in enumerate(jcts)]
    other = [job(f"m-{i}", b) for i, (_, b) in enumerate(jcts)]
    bound = no_loss_mean_jct(first, other)
    mean_first = sum(a for a, _ in jcts) / len(jcts)
    mean_other = sum(b for _, b in jcts) / len(jcts)
    assert bound <= min(mean_first, mean_other) * (1 + 1e-12)
    (gap,) = category_gaps(first, other)
    assert gap.jct_hours - gap.other_jct_hours == pytest.approx(
        gap.lost_hours - gap.saved_hours, rel=1e-9, abs=1e-9)
    assert mean_first - bound == pytest.approx(gap.lost_hours * 3600 / len(jcts),
                                               rel=1e-9, abs=1e-6)
