"""Speed estimates from observed epoch times."""

import pytest

from voda.core.estimate import fit_speed, remaining_time
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
