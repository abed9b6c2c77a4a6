"""The goodput model: throughput x statistical efficiency, batch choice, and the step-time fit."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import check_grad

from voda.core.goodput import GoodputModel, PerfParams, _objective, fit_perf_params

TRUE = PerfParams(alpha_c=0.05, beta_c=0.002, alpha_n=0.3, beta_n=0.02, alpha_r=0.08,
                  beta_r=0.005, gamma=1.8)


def model(perf: PerfParams | None = TRUE, sqr: float = 1.0, var: float = 50.0,
          fixed: int | None = None) -> GoodputModel:
    return GoodputModel(perf=perf, grad_sqr=sqr, grad_var=var, init_batch=128, max_batch=4096,
                        min_local=32, max_local=1024, max_profiled_replicas=4, fixed_batch=fixed)


def observations(perf: PerfParams) -> tuple[tuple[int, int, float, float, float], ...]:
    """(nodes, GPUs, micro-batch, compute time, step time) of a few configurations."""
    m = GoodputModel(perf, 1.0, 1.0, 1, 10_000, 1, 10_000)
    rows = []
    for nodes, replicas, atomic in [(1, 1, 64), (1, 1, 256), (1, 2, 128), (1, 4, 128),
                                    (2, 8, 128), (4, 16, 256), (2, 4, 64)]:
        n, r, a = np.array([nodes]), np.array([replicas]), np.array([atomic])
        compute = perf.alpha_c + perf.beta_c * atomic
        step = float(m.step_time(n, r, a, np.array([0]))[0])
        rows.append((nodes, replicas, float(atomic), compute, step))
    return tuple(rows)


def test_efficiency_is_one_at_the_initial_batch_and_falls_as_the_batch_grows() -> None:
    eff = model().efficiency(np.array([128.0, 256.0, 1024.0, 4096.0]))
    assert eff[0] == pytest.approx(1.0)
    assert np.all(np.diff(eff) < 0)
    # gain = (var + sqr) / (var / s + sqr) at s = 2: 51 / 26
    assert eff[1] == pytest.approx(51 / 26 / 2)


def test_noisier_gradients_make_large_batches_more_efficient() -> None:
    quiet, noisy = model(var=1.0), model(var=1000.0)
    assert noisy.efficiency(np.array([2048.0]))[0] > quiet.efficiency(np.array([2048.0]))[0]


def test_the_chosen_batch_is_valid_and_maximises_goodput() -> None:
    m = model()
    for nodes, replicas in [(1, 1), (1, 4), (2, 8), (8, 32)]:
        choice = m.choose(nodes, replicas)
        assert 32 <= choice.atomic_bsz <= 1024
        batch = choice.batch_size(replicas)
        assert 128 <= batch <= 4096
        value = m.goodput(np.array([nodes]), np.array([replicas]), np.array([choice.atomic_bsz]),
                          np.array([choice.accum_steps]))[0]
        assert choice.goodput == pytest.approx(value, rel=1e-3)
        # Any other valid batch of the 50 candidates does no better.
        atomic, accum, valid = m.candidates(np.array([float(replicas)]))
        others = m.goodput(np.full(len(atomic), nodes), np.full(len(atomic), replicas),
                           np.maximum(atomic[:, 0], 1), accum[:, 0])
        assert choice.goodput >= np.max(np.where(valid[:, 0], others, 0)) - 1e-9


def test_one_gpu_beyond_the_initial_batch_accumulates() -> None:
    choice = model(var=1e6).choose(1, 1)  # very noisy: the largest batch is best
    assert choice.accum_steps >= 1


def test_without_a_fitted_model_a_job_trains_at_its_smallest_batch() -> None:
    m = model(perf=None)
    assert m.choose(1, 1).batch_size(1) == 128
    assert m.choose(1, 8).batch_size(8) == 8 * 32  # min local batch x GPUs
    assert m.choose(1, 8).goodput == 0.0


def test_a_fixed_batch_is_kept_whatever_the_gpus() -> None:
    m = model(fixed=2048)
    for replicas in (1, 2, 4):
        assert m.choose(1, replicas).batch_size(replicas) == 2048


def test_the_fit_recovers_step_times_it_was_given() -> None:
    obs = observations(TRUE)
    fitted = fit_perf_params(obs)
    m_true = GoodputModel(TRUE, 1.0, 1.0, 1, 10_000, 1, 10_000)
    m_fit = GoodputModel(fitted, 1.0, 1.0, 1, 10_000, 1, 10_000)
    n, r, a, _, _ = (np.array(c) for c in zip(*obs, strict=True))
    zero = np.zeros(len(n))
    assert np.allclose(m_fit.step_time(n, r, a, zero), m_true.step_time(n, r, a, zero), rtol=0.05)
    assert fit_perf_params(obs) is fitted  # cached: the same measurements, the same model


def test_without_multi_node_measurements_links_between_nodes_are_assumed_slower() -> None:
    obs = tuple(o for o in observations(TRUE) if o[0] == 1)
    fitted = fit_perf_params(obs)
    assert fitted.alpha_n >= 1.1 * fitted.alpha_r - 1e-12
    assert fitted.beta_n >= 1.1 * fitted.beta_r - 1e-12


def test_one_micro_batch_size_fixes_the_compute_constant_at_half_the_compute_time() -> None:
    obs = ((1, 1, 64.0, 0.2, 0.2), (1, 2, 64.0, 0.2, 0.25))
    assert fit_perf_params(obs).alpha_c == pytest.approx(0.1)


def test_the_fit_refuses_no_measurements() -> None:
    with pytest.raises(ValueError, match="observations"):
        fit_perf_params(())


def test_the_loss_gradient_matches_finite_differences() -> None:
    obs = np.array(observations(TRUE))
    nodes, replicas, atomic, compute, step = obs.T
    across = (nodes > 1).astype(float)
    within = ((nodes == 1) & (replicas > 1)).astype(float)
    args = (atomic, across, within, 1 - across - within, np.maximum(replicas - 2, 1e-8),
            np.log(compute) + 0.01, np.log(step) - 0.02, 1 / len(obs))
    x = np.array([0.04, 0.003, 0.2, 0.01, 0.1, 0.004, 2.5])
    err = check_grad(lambda v: _objective(v, *args)[0], lambda v: _objective(v, *args)[1], x,
                     epsilon=1e-7)
    assert err < 1e-4 * max(1.0, float(np.linalg.norm(_objective(x, *args)[1])))
