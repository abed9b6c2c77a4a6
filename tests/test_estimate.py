"""Speed estimates from observed epoch times."""

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voda.core.estimate import (
    EpochTimes,
    fastest_count,
    fit_speed,
    growth_limit,
    growth_limit_of,
    never_slower,
    never_slower_of,
    remaining_time,
    throughput_speed_model,
)
from voda.core.model import Job


def test_unknown_speed_is_linear() -> None:
    model = fit_speed({}, default_epoch_seconds=100.0)
    assert not model.known
    assert model.speedup(4) == pytest.approx(4.0)
    assert model.epoch_time(2) == pytest.approx(50.0)


def test_one_observation_extrapolates_linearly_from_it() -> None:
    model = fit_speed({2: 30.0})
    assert model.epoch_time(2) == 30.0
    assert model.epoch_time(4) == pytest.approx(15.0)
    assert model.epoch_time(1) == pytest.approx(60.0)


def test_observed_counts_are_used_as_observed_and_throughput_interpolates_between() -> None:
    model = fit_speed({1: 100.0, 4: 40.0})
    assert model.epoch_time(1) == 100.0
    assert model.epoch_time(4) == 40.0
    # throughput at 2 = 1/100 + (1/40 - 1/100) / 3
    expected = 1.0 / (0.01 + (0.025 - 0.01) / 3)
    assert model.epoch_time(2) == pytest.approx(expected)
    assert model.speedup(4) == pytest.approx(2.5)


def test_amdahl_extrapolation_saturates_beyond_observations() -> None:
    # t = 20 + 80/k exactly: serial 20 s, parallel 80 s.
    model = fit_speed({1: 100.0, 2: 60.0, 4: 40.0})
    assert model.serial == pytest.approx(20.0)
    assert model.parallel == pytest.approx(80.0)
    assert model.epoch_time(8) == pytest.approx(30.0)
    assert model.speedup(1000) < 5.0


def test_no_gain_from_more_workers_gives_flat_extrapolation() -> None:
    model = fit_speed({1: 50.0, 2: 50.0})
    assert model.epoch_time(8) == pytest.approx(50.0)


def test_speedup_at_zero_workers_is_zero() -> None:
    assert fit_speed({1: 10.0}).speedup(0) == 0.0


def test_remaining_time_counts_remaining_epochs() -> None:
    job = Job("a", 1, 4, epochs=10, completed_epochs=4, epoch_time_by_workers={2: 30.0})
    assert remaining_time(job, 2) == pytest.approx(6 * 30.0)
    assert remaining_time(job, 0) == float("inf")
    done = Job("b", 1, 4, epochs=3, completed_epochs=3)
    assert remaining_time(done, 1) == 0.0


def test_the_gain_past_the_last_observation_never_exceeds_the_last_measured_gain() -> None:
    # The review's case: unanchored, the 5th GPU was worth 0.67 and the measured 3rd 0.25.
    model = fit_speed({1: 100.0, 2: 50.0, 4: 40.0})
    third = model.speedup(3) - model.speedup(2)
    fifth = model.speedup(5) - model.speedup(4)
    assert third == pytest.approx(0.25)
    assert fifth <= third + 1e-12


def test_the_extrapolation_is_anchored_at_the_nearest_observation() -> None:
    # Amdahl's shape, scaled to pass through the last observation: no jump at its edge.
    model = fit_speed({1: 100.0, 2: 62.0, 4: 40.0})
    assert model.epoch_time(4) == 40.0
    assert model._amdahl_time(4) != pytest.approx(40.0)  # the fit alone misses it
    ratio = model._amdahl_time(5) / model._amdahl_time(4)
    assert model.epoch_time(5) == pytest.approx(40.0 * ratio)
    low = fit_speed({4: 40.0, 8: 25.0})
    assert low.epoch_time(3) > 40.0
    assert low.epoch_time(1) == pytest.approx(40.0 * low._amdahl_time(1) / low._amdahl_time(4))


@pytest.mark.parametrize(
    "times",
    [
        pytest.param({1: 10.0, 2: 20.0}, id="a slow-down on two workers"),
        pytest.param({1: 100.0, 2: 50.0, 4: 60.0}, id="a slow-down on the last segment"),
        pytest.param({1: 100.0, 2: 100.0}, id="no change"),
    ],
)
def test_no_speed_up_is_predicted_past_a_measured_slow_down(times: dict[int, float]) -> None:
    model = fit_speed(times)
    last = max(times)
    for k in range(last + 1, last + 8):
        assert model.epoch_time(k) >= model.epoch_time(last) - 1e-12


observations = st.dictionaries(
    st.integers(1, 12), st.floats(1.0, 1000.0, allow_nan=False), min_size=1, max_size=5
)


@settings(max_examples=300, deadline=None)
@given(times=observations)
def test_speedup_past_the_observations_is_concave_and_capped_by_the_last_segment(
    times: dict[int, float],
) -> None:
    model = fit_speed(times)
    counts = sorted(times)
    last = counts[-1]
    speedups = [model.speedup(k) for k in range(last, last + 20)]
    gains = [b - a for a, b in pairwise(speedups)]
    assert all(g >= -1e-12 for g in gains), "never slower with more workers past the edge"
    assert all(later <= earlier + 1e-9 for earlier, later in pairwise(gains))
    if len(counts) >= 2:
        previous = counts[-2]
        measured = (model.speedup(last) - model.speedup(previous)) / (last - previous)
        assert gains[0] <= max(measured, 0.0) + 1e-9


def throughput_job(times: dict[int, float], rates: dict[tuple[int, int], float],
                   current: int = 0) -> Job:
    return Job("j", 1, 64, epochs=10, epoch_time_by_workers=times, layout_throughput=rates,
               current_workers=current)


def test_epoch_times_follow_the_throughput_from_the_epoch_time_now() -> None:
    # An early epoch at 8 GPUs took 300 s; now, on 4, an epoch takes 100 s at 1,000
    # samples/s: an epoch is 100,000 samples, and 8 GPUs run 1,800 samples/s.
    job = throughput_job({8: 300.0, 4: 100.0}, {(4, 1): 1000.0, (8, 2): 1800.0, (1, 1): 260.0},
                         current=4)
    model = throughput_speed_model(job)
    assert model is not None
    assert model.epoch_time(4) == pytest.approx(100.0)
    assert model.epoch_time(8) == pytest.approx(100_000 / 1800)
    assert model.epoch_time(1) == pytest.approx(100_000 / 260)
    assert model.epoch_time(2) > model.epoch_time(4) > model.epoch_time(8)


def test_each_count_takes_its_best_layout_and_a_waiting_job_its_largest_measured_count() -> None:
    job = throughput_job({2: 50.0, 4: 30.0}, {(2, 1): 400.0, (4, 1): 800.0, (4, 4): 500.0})
    model = throughput_speed_model(job)
    assert model is not None
    assert model.epoch_time(4) == pytest.approx(30.0)  # the anchor: 24,000 samples an epoch
    assert model.epoch_time(2) == pytest.approx(24_000 / 400)


def test_without_a_count_measured_both_ways_there_is_no_throughput_model() -> None:
    assert throughput_speed_model(throughput_job({2: 50.0}, {})) is None
    assert throughput_speed_model(throughput_job({2: 50.0}, {(4, 1): 800.0})) is None
    assert throughput_speed_model(throughput_job({}, {(4, 1): 800.0})) is None


@settings(max_examples=300, deadline=None)
@given(times=st.dictionaries(st.integers(1, 14),
                             st.sampled_from([7.0, 10.0, 20.0, 35.0, 60.0, 90.0]), max_size=4),
       lo=st.integers(1, 12), span=st.integers(0, 12))
def test_growth_limit_and_fastest_count_agree_with_the_estimate_count_by_count(
    times: dict[int, float], lo: int, span: int
) -> None:
    """growth_limit and fastest_count read the measured counts only; the estimate, walked
    count by count, agrees: the epoch time never rises from lo up to the limit and rises
    right after it (below hi), and no count of [lo, hi] is faster than fastest_count nor
    a larger one as fast."""
    job = Job(name="j", epoch_time_by_workers=times)
    hi = lo + span
    t = EpochTimes(job)
    limit = growth_limit(job, lo, hi)
    assert lo <= limit <= hi
    assert all(t(k + 1) <= t(k) for k in range(lo, limit))
    if limit < hi:
        assert t(limit + 1) > t(limit)
    best = fastest_count(job, lo, hi)
    assert lo <= best <= hi
    assert all(t(best) <= t(k) for k in range(lo, hi + 1))
    assert all(t(k) > t(best) for k in range(best + 1, hi + 1))


# ----- the memo of never_slower and growth_limit, by the Job's own read-only map -------
_times = st.dictionaries(st.integers(0, 9), st.sampled_from([0.0, 10.0, 20.0, 30.0, 45.0, -1.0]),
                         max_size=4)


@settings(max_examples=300, deadline=None)
@given(maps=st.lists(_times, min_size=1, max_size=4))
def test_the_memo_says_what_the_measured_times_say(maps: list[dict[int, float]]) -> None:
    from voda.engine.scheduler import JobRecord

    jobs = [Job(name=f"j{i}", max_workers=9, epoch_time_by_workers=m)
            for i, m in enumerate(maps)]
    record = JobRecord("r", max_workers=9)  # a map that changes under the same object
    for times in maps:
        record.epoch_time_by_workers.clear()
        record.epoch_time_by_workers.update(times)
        for job in [*jobs, *jobs, record]:  # each Job twice: the second from the memo
            observed = dict(job.epoch_time_by_workers)
            assert never_slower(job) == never_slower_of(observed)  # type: ignore[arg-type]
            for lo, hi in [*((lo, hi) for lo in range(5) for hi in range(10)),
                           *((lo, hi) for hi in range(10) for lo in range(5))]:
                expected = max(lo, hi) if not observed or hi <= lo else growth_limit_of(
                    observed, lo, hi)
                assert growth_limit(job, lo, hi) == expected  # type: ignore[arg-type]
