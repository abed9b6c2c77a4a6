"""What a training script measures for its goodput report (voda.training.goodput_meter): the
gradient statistics on a problem whose truth is known, the medians of step times per
configuration, what is kept across restarts, and the report the service then fits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import voda.training.goodput_meter as meter_module
from voda.core.goodput_report import MAX_OBSERVATIONS, model_of, report_from_values
from voda.training.goodput_meter import (
    GOODPUT_FILE,
    Configuration,
    GoodputMeter,
    SmoothedAverage,
    gradient_statistics,
)

ONE = Configuration(1, 1, 96)
TWO = Configuration(1, 2, 48)
LIMITS = {"init_batch": 96, "max_batch": 96, "min_local": 1, "max_local": 96,
          "fixed_batch": 96}


# ----- the gradient statistics on a linear model with known noise --------------------------
def linear_problem(d: int, noise: float, seed: int) -> tuple[np.ndarray, float, float]:
    """Least squares 1/2 (x.w - y)^2 with x ~ N(0, I_d), y = x.w* + N(0, noise^2), at a
    point w = w* + delta. The per-sample gradient is x (x.delta - e): its mean is delta,
    and the trace of its covariance is d (|delta|^2 + noise^2) + |delta|^2 (Isserlis)."""
    delta = np.random.default_rng(seed).normal(size=d) * 0.3
    sqr = float(delta @ delta)
    return delta, sqr, d * (sqr + noise ** 2) + sqr


def per_sample_gradients(rng: np.random.Generator, delta: np.ndarray, noise: float,
                         n: int) -> np.ndarray:
    x = rng.normal(size=(n, len(delta)))
    e = rng.normal(size=n) * noise
    return x * (x @ delta - e)[:, None]


def estimate(grads: np.ndarray, sizes: list[int], init_batch: int) -> tuple[float, float]:
    """What a job computes from one step's batch split into parts of `sizes`."""
    batch = len(grads)
    parts = np.split(grads, np.cumsum(sizes)[:-1])
    local = sum(len(p) / batch * float(p.mean(axis=0) @ p.mean(axis=0)) for p in parts)
    mean = grads.mean(axis=0)
    return gradient_statistics(local, float(mean @ mean), len(sizes), batch, init_batch)


@pytest.mark.parametrize("sizes", [[48, 48], [24, 24, 24, 24], [20, 20, 20, 19, 19], [70, 26]],
                         ids=["two halves of one replica's batch", "four equal replicas",
                              "five replicas of a batch that does not divide",
                              "two unequal parts"])
def test_the_estimates_are_unbiased_on_a_linear_model_with_known_noise(
        sizes: list[int]) -> None:
    d, noise, init_batch = 8, 0.5, 32
    delta, true_sqr, true_trace = linear_problem(d, noise, seed=1)
    rng = np.random.default_rng(7)
    draws = np.array([estimate(per_sample_gradients(rng, delta, noise, sum(sizes)), sizes,
                               init_batch) for _ in range(4000)])
    sqr, var = draws.mean(axis=0)
    sqr_error, var_error = draws.std(axis=0) / np.sqrt(len(draws))
    # grad_var is the variance of the mean gradient at the initial batch: trace / M0.
    assert abs(sqr - true_sqr) < 4 * sqr_error + 1e-3 * true_sqr
    assert abs(var - true_trace / init_batch) < 4 * var_error
    # Not trivially so: the plain squared norm of the batch's mean gradient is biased up.
    plain = np.mean([float(g.mean(axis=0) @ g.mean(axis=0)) for g in
                     (per_sample_gradients(rng, delta, noise, sum(sizes)) for _ in range(4000))])
    assert plain - true_sqr > 10 * sqr_error


def test_one_part_is_no_estimate() -> None:
    with pytest.raises(ValueError, match="pieces"):
        gradient_statistics(1.0, 1.0, 1, 96, 96)


def test_the_smoothed_statistics_converge_to_the_truth() -> None:
    d, noise, init_batch = 8, 0.5, 48
    delta, true_sqr, true_trace = linear_problem(d, noise, seed=3)
    rng = np.random.default_rng(11)
    meter = GoodputMeter(init_batch)
    assert meter.grad_sqr is None and meter.grad_var is None
    for _ in range(3000):
        grads = per_sample_gradients(rng, delta, noise, 96)
        halves = np.split(grads, 2)
        local = sum(0.5 * float(h.mean(axis=0) @ h.mean(axis=0)) for h in halves)
        mean = grads.mean(axis=0)
        meter.gradients(local, float(mean @ mean), 2, 96)
    assert meter.grad_sqr == pytest.approx(true_sqr, rel=0.15)
    assert meter.grad_var == pytest.approx(true_trace / init_batch, rel=0.15)


def test_a_smoothed_average_is_not_pulled_towards_zero_at_first() -> None:
    average = SmoothedAverage()
    assert average.value is None
    average.add(5.0, 0.999)
    assert average.value == pytest.approx(5.0)
    for _ in range(10):
        average.add(5.0, 0.9)
    assert average.value == pytest.approx(5.0)
    average.add(6.0, 0.5)
    assert 5.0 < average.value < 6.0


def test_negative_estimates_are_reported_as_zero() -> None:
    meter = GoodputMeter(96)
    # Parts that agree more than their mean: both estimates come out negative.
    meter.gradients(local_sqr=0.5, total_sqr=1.0, pieces=2, batch=96)
    assert meter.grad_var == 0.0
    meter = GoodputMeter(96)
    meter.gradients(local_sqr=10.0, total_sqr=1.0, pieces=2, batch=96)
    assert meter.grad_sqr == 0.0 and meter.grad_var > 0


# ----- step times -------------------------------------------------------------------------
def test_a_configuration_is_the_median_of_its_latest_epoch() -> None:
    meter = GoodputMeter(96)
    for compute, step in [(0.5, 0.9), (0.01, 0.02), (0.011, 0.021), (0.012, 0.03)]:
        meter.step(ONE, compute, step)  # the first step (warm-up) is an outlier
    meter.step(TWO, 0.004, 0.006)  # one step is not a measurement
    meter.end_epoch()
    assert meter.observations == {ONE: (pytest.approx(0.0115), pytest.approx(0.0255))}
    for _ in range(3):
        meter.step(ONE, 0.02, 0.04)
    meter.end_epoch()
    assert meter.observations[ONE] == (0.02, 0.04)


def test_compute_never_exceeds_the_step_in_a_report() -> None:
    meter = GoodputMeter(96)
    for compute, step in [(0.03, 0.031), (0.03, 0.029), (0.03, 0.028)]:
        meter.step(ONE, compute, step)
    meter.end_epoch()
    compute, step = meter.observations[ONE]
    assert compute <= step


def test_at_most_the_services_bound_of_configurations_the_latest_kept() -> None:
    assert meter_module.MAX_OBSERVATIONS == MAX_OBSERVATIONS
    meter = GoodputMeter(96)
    for atomic in range(1, MAX_OBSERVATIONS + 11):
        for _ in range(2):
            meter.step(Configuration(1, 1, atomic), 0.01, 0.02)
        meter.end_epoch()
    assert len(meter.observations) == MAX_OBSERVATIONS
    assert Configuration(1, 1, 1) not in meter.observations
    assert Configuration(1, 1, MAX_OBSERVATIONS + 10) in meter.observations
    # A configuration measured again is the most recent again.
    for _ in range(2):
        meter.step(Configuration(1, 1, 11), 0.01, 0.02)
    meter.end_epoch()
    for _ in range(2):
        meter.step(Configuration(1, 2, 1), 0.01, 0.02)
    meter.end_epoch()
    assert Configuration(1, 1, 11) in meter.observations
    assert Configuration(1, 1, 12) not in meter.observations


# ----- kept across restarts ---------------------------------------------------------------
def measured_meter() -> GoodputMeter:
    meter = GoodputMeter(96)
    for config, compute, step in [(ONE, 0.02, 0.021), (TWO, 0.01, 0.012)]:
        for _ in range(3):
            meter.step(config, compute, step)
    meter.end_epoch()
    meter.gradients(local_sqr=2.0, total_sqr=1.0, pieces=2, batch=96)
    return meter


def test_what_was_measured_survives_a_restart(tmp_path: Path) -> None:
    meter = measured_meter()
    meter.save(tmp_path / GOODPUT_FILE)
    again = GoodputMeter.load(tmp_path / GOODPUT_FILE, 96)
    assert again.observations == meter.observations
    assert list(again.observations) == list(meter.observations)  # the order of recency
    assert (again.grad_sqr, again.grad_var) == (meter.grad_sqr, meter.grad_var)
    assert not list(tmp_path.glob(".*tmp"))


def test_a_new_initial_batch_keeps_the_times_and_measures_the_gradients_afresh(
        tmp_path: Path) -> None:
    measured_meter().save(tmp_path / GOODPUT_FILE)
    again = GoodputMeter.load(tmp_path / GOODPUT_FILE, 64)
    assert set(again.observations) == {ONE, TWO}
    assert again.grad_sqr is None


@pytest.mark.parametrize("text", ["", "{", "[]", '{"observations": [[1, 2]]}',
                                  '{"init_batch": 96, "observations": [], "grad_sqr": 1}'])
def test_an_unreadable_file_means_measuring_afresh(tmp_path: Path, text: str) -> None:
    (tmp_path / GOODPUT_FILE).write_text(text)
    meter = GoodputMeter.load(tmp_path / GOODPUT_FILE, 96)
    assert meter.observations == {} and meter.grad_sqr is None
    assert GoodputMeter.load(tmp_path / "none.json", 96).observations == {}


def test_init_batch_must_be_positive() -> None:
    with pytest.raises(ValueError, match="init_batch"):
        GoodputMeter(0)


# ----- the report -------------------------------------------------------------------------
def test_nothing_is_reported_before_anything_is_measured(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    monkeypatch.setenv("VODA_REPORT", str(tmp_path / "reports.jsonl"))
    monkeypatch.setenv("RANK", "0")
    assert GoodputMeter(96).report(LIMITS) is False
    assert not (tmp_path / "reports.jsonl").exists()


def test_the_report_is_what_the_service_fits(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.setenv("VODA_REPORT", str(tmp_path / "reports.jsonl"))
    monkeypatch.setenv("RANK", "0")
    meter = measured_meter()
    assert meter.report(LIMITS, epoch_samples=1536) is True
    values = json.loads((tmp_path / "reports.jsonl").read_text())["goodput"]
    assert values == meter.report_values(LIMITS, 1536)
    model = model_of(report_from_values(values, 4), 4)
    assert model.max_profiled_replicas == 2
    assert (model.grad_sqr, model.grad_var) == (meter.grad_sqr, meter.grad_var)
    assert model.fixed_batch == 96 and model.epoch_samples == 1536
    monkeypatch.setenv("RANK", "1")  # only rank 0 reports
    assert meter.report(LIMITS) is False


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 64),
                          st.floats(1e-4, 1.0), st.floats(1e-4, 1.0)), min_size=1,
                max_size=200))
def test_every_report_keeps_within_the_services_bounds(
        steps: list[tuple[int, int, float, float]]) -> None:
    meter = GoodputMeter(16)
    for i, (replicas, atomic, compute, step) in enumerate(steps):
        meter.step(Configuration(1, replicas, atomic), compute, step)
        if i % 7 == 6:
            meter.end_epoch()
    meter.end_epoch()
    meter.gradients(local_sqr=3.0, total_sqr=1.0, pieces=2, batch=32)
    values = meter.report_values({"init_batch": 16, "max_batch": 256, "min_local": 1,
                                  "max_local": 64})
    if not meter.observations:
        assert values is None
        return
    assert values is not None
    report = report_from_values(values, 4)  # raises naming the field if not
    assert len(report.observations) <= MAX_OBSERVATIONS
    assert all(o.compute_seconds <= o.step_seconds for o in report.observations)
