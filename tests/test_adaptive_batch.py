"""The batch the example script picks (voda.training.adaptive_batch): the goodput model's best
split within the job's limits, AdaScale's learning-rate factor, the initial batch until
the script's measurements fit."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voda.core.goodput import GoodputModel, PerfParams
from voda.core.goodput_report import BatchLimits, model_of, report_from_values
from voda.training.adaptive_batch import BatchPlan, decide, limits_values, plan
from voda.training.goodput_meter import Configuration, GoodputMeter

PERF = PerfParams(alpha_c=0.02, beta_c=0.0002, alpha_n=0.01, beta_n=0.001, alpha_r=0.004,
                  beta_r=0.0004, gamma=1.5)
LIMITS = BatchLimits(init_batch=32, max_batch=256, min_local=4, max_local=64)


def model(perf: PerfParams | None = PERF, sqr: float = 1.0, var: float = 10.0,
          limits: BatchLimits = LIMITS) -> GoodputModel:
    return GoodputModel(perf=perf, grad_sqr=sqr, grad_var=var, init_batch=limits.init_batch,
                        max_batch=limits.max_batch, min_local=limits.min_local,
                        max_local=limits.max_local)


def legal_splits(m: GoodputModel, replicas: int) -> list[tuple[int, int]]:
    """Every (micro-batch, accumulation steps) within the limits, by brute force. (On one
    replica a batch above the initial one takes at least two micro-batches, as in AdaptDL.)"""
    return [(a, k) for a in range(m.min_local, m.max_local + 1) for k in range(0, 64)
            if m.init_batch <= replicas * a * (k + 1) <= m.max_batch
            and not (replicas == 1 and k == 0 and a > m.init_batch)]


def goodput_of(m: GoodputModel, nodes: int, replicas: int, atomic: int, accum: int) -> float:
    return float(m.goodput(np.array([nodes]), np.array([replicas]), np.array([atomic]),
                           np.array([accum]))[0])


def assert_legal(p: BatchPlan, m: GoodputModel, replicas: int) -> None:
    assert p.batch == replicas * p.atomic_bsz * (p.accum_steps + 1)
    assert p.accum_steps >= 0
    if m.min_local * replicas <= m.max_batch:
        assert m.min_local <= p.atomic_bsz <= m.max_local
        assert p.batch <= m.max_batch
    else:  # no legal split: each rank takes the least it may
        assert p.atomic_bsz == m.min_local and p.accum_steps == 0
    assert math.isfinite(p.lr_factor) and p.lr_factor > 0


# ----- the best batch of a known model ---------------------------------------------------------
@pytest.mark.parametrize("replicas", [2, 4, 8])
def test_with_gradient_noise_only_a_larger_batch_costs_no_efficiency_so_the_largest_wins(
        replicas: int) -> None:
    # grad_sqr 0: efficiency is 1 at any batch; per-sample time falls with the batch
    # (a micro-batch's fixed compute and a step's sync are shared), so the largest wins.
    m = model(sqr=0.0, var=10.0)
    p = plan(m, 1, replicas, fitted=True)
    assert p.batch == max(replicas * a * (k + 1) for a, k in legal_splits(m, replicas))
    assert p.lr_factor == pytest.approx(p.batch / m.init_batch)  # AdaScale: linear scaling


@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_without_gradient_noise_a_larger_batch_only_costs_so_the_smallest_wins(
        replicas: int) -> None:
    # grad_var 0: efficiency is M0 / B, goodput M0 / step time: the shortest step wins.
    m = model(sqr=1.0, var=0.0)
    p = plan(m, 1, replicas, fitted=True)
    assert p.batch == max(m.init_batch, m.min_local * replicas)
    assert p.lr_factor == pytest.approx(1.0)  # AdaScale: no noise, no gain


@pytest.mark.parametrize(("nodes", "replicas"), [(1, 1), (1, 2), (1, 4), (2, 4), (4, 8)])
def test_the_choice_is_within_a_few_percent_of_the_best_legal_split_by_brute_force(
        nodes: int, replicas: int) -> None:
    m = model(sqr=1.0, var=10.0)
    p = plan(m, nodes, replicas, fitted=True)
    best = max(goodput_of(m, nodes, replicas, a, k) for a, k in legal_splits(m, replicas))
    assert goodput_of(m, nodes, replicas, p.atomic_bsz, p.accum_steps) >= 0.97 * best
    assert p.goodput == pytest.approx(goodput_of(m, nodes, replicas, p.atomic_bsz,
                                                 p.accum_steps))


def test_adascale_factor_is_the_gain_of_the_chosen_batch() -> None:
    m = model(sqr=2.0, var=6.0)
    p = plan(m, 1, 4, fitted=True)
    s = p.batch / m.init_batch
    assert s > 1
    assert p.lr_factor == pytest.approx((6.0 + 2.0) / (6.0 / s + 2.0))


# ----- from the script's measurements -----------------------------------------------------------
def measured(limits: BatchLimits, perf: PerfParams, configs: list[tuple[int, int, int]],
             sqr: float, var: float) -> dict:
    """A meter's report body after a few steps at each configuration, timed by `perf`."""
    m = model(perf, limits=limits)
    meter = GoodputMeter(limits.init_batch)
    for nodes, replicas, atomic in configs:
        compute = perf.alpha_c + perf.beta_c * atomic
        step = float(m.step_time(np.array([nodes]), np.array([replicas]), np.array([atomic]),
                                 np.array([0]))[0])
        for _ in range(3):
            meter.step(Configuration(nodes, replicas, atomic), compute, step)
    meter.end_epoch()
    meter.grad_sqr_avg.add(sqr, 0.5)
    meter.grad_var_avg.add(var, 0.5)
    values = meter.report_values(limits_values(limits), epoch_samples=1024)
    assert values is not None
    return values


def test_until_it_has_measured_the_script_trains_at_its_initial_batch() -> None:
    for replicas in (1, 2, 16):
        p = decide(LIMITS, None, 1, replicas)
        assert not p.fitted and p.lr_factor == 1.0
        assert p.batch == max(LIMITS.init_batch, LIMITS.min_local * replicas)


def test_once_measured_the_script_picks_what_the_services_fit_of_its_report_picks() -> None:
    values = measured(LIMITS, PERF, [(1, 1, 32), (1, 2, 16), (1, 2, 40)], sqr=1.0, var=10.0)
    p = decide(LIMITS, values, 1, 2, epoch_samples=1024)
    fitted = model_of(report_from_values(values, 2), 2)  # what the service holds of the job
    assert p.fitted and fitted.fixed_batch is None
    want = fitted.choose(1, 2)
    assert (p.atomic_bsz, p.accum_steps) == (want.atomic_bsz, want.accum_steps)
    assert p.batch > LIMITS.init_batch  # the fixed costs make a larger batch pay here


def test_a_report_that_cannot_be_fitted_keeps_the_initial_batch_and_scales_by_its_gradients(
        ) -> None:
    values = measured(LIMITS, PERF, [(1, 2, 16)], sqr=1.0, var=10.0)
    values["observations"][0]["compute_seconds"] = 10 * values["observations"][0][
        "step_seconds"]  # compute longer than its step: refused
    p = decide(LIMITS, values, 1, 8)
    assert not p.fitted and p.batch == LIMITS.min_local * 8
    s = p.batch / LIMITS.init_batch
    assert p.lr_factor == pytest.approx((10.0 + 1.0) / (10.0 / s + 1.0))


# ----- limits respected for any input -------------------------------------------------------------
positive = st.floats(1e-6, 10.0, allow_nan=False)
statistic = st.floats(0.0, 1e6, allow_nan=False)


@st.composite
def limits_strategy(draw: st.DrawFn) -> BatchLimits:
    init = draw(st.integers(1, 4096))
    max_batch = draw(st.integers(init, 65536))
    min_local = draw(st.integers(1, 512))
    max_local = draw(st.integers(min(min_local, max_batch), max_batch))
    return BatchLimits(init, max_batch, min(min_local, max_local), max_local)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(limits=limits_strategy(), replicas=st.integers(1, 64), nodes=st.integers(1, 8),
       perf=st.none() | st.builds(PerfParams, positive, positive, positive, positive, positive,
                                  positive, st.floats(1.0, 10.0)),
       sqr=statistic, var=statistic)
def test_the_chosen_batch_is_always_within_the_limits_and_splits_evenly(
        limits: BatchLimits, replicas: int, nodes: int, perf: PerfParams | None, sqr: float,
        var: float) -> None:
    m = model(perf, sqr=sqr, var=var, limits=limits)
    p = plan(m, min(nodes, replicas), replicas, fitted=perf is not None)
    assert_legal(p, m, replicas)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(limits=limits_strategy(), replicas=st.integers(1, 16),
       perf=st.builds(PerfParams, positive, positive, positive, positive, positive, positive,
                      st.floats(1.0, 10.0)),
       atomics=st.lists(st.integers(1, 4096), min_size=1, max_size=3),
       sqr=statistic, var=statistic)
def test_from_any_measurements_the_script_trains_within_its_limits(
        limits: BatchLimits, replicas: int, perf: PerfParams, atomics: list[int], sqr: float,
        var: float) -> None:
    configs = [(1, r, min(max(a, limits.min_local), limits.max_local))
               for r, a in itertools.product((1, replicas), atomics)]
    values = measured(limits, perf, configs, sqr, var)
    p = decide(limits, values, 1, replicas)
    assert_legal(p, model(limits=limits), replicas)
