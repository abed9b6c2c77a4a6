"""Goodput report bodies for the API tests: what a batch-adaptive job with a given true
step-time model measures."""

from __future__ import annotations

from typing import Any

import numpy as np

from voda.core.goodput import GoodputModel, PerfParams
from voda.core.goodput_report import StepObservation

CONFIGS = [(1, 1, 64), (1, 1, 256), (1, 2, 128), (1, 4, 128), (2, 8, 128), (2, 4, 64)]
# Compute-bound: scales almost linearly.
SCALES = PerfParams(alpha_c=0.05, beta_c=0.004, alpha_n=0.01, beta_n=0.001, alpha_r=0.005,
                    beta_r=0.0005, gamma=2.0)
# Sync-bound: a slow network makes more GPUs worth little.
SYNC_BOUND = PerfParams(alpha_c=0.02, beta_c=0.0005, alpha_n=2.0, beta_n=0.5, alpha_r=1.0,
                        beta_r=0.3, gamma=1.0)
LIMITS = {"init_batch": 64, "max_batch": 4096, "min_local": 16, "max_local": 256}


def measured(perf: PerfParams, configs: list[tuple[int, int, int]] = CONFIGS
             ) -> tuple[StepObservation, ...]:
    """What a job whose true step-time model is `perf` measures on `configs`."""
    truth = GoodputModel(perf, 1.0, 1.0, 1, 10_000, 1, 10_000)
    out = []
    for nodes, replicas, atomic in configs:
        step = truth.step_time(np.array([nodes]), np.array([replicas]), np.array([atomic]),
                               np.array([0]))[0]
        out.append(StepObservation(nodes, replicas, atomic, perf.alpha_c + perf.beta_c * atomic,
                                   float(step)))
    return tuple(out)


def body(perf: PerfParams = SCALES, configs: list[tuple[int, int, int]] | None = None,
         **changes: Any) -> dict[str, Any]:
    """A report measured on `configs` (nodes, GPUs, micro-batch); default: 1 and 2 GPUs."""
    configs = configs or [(1, 1, 64), (1, 1, 128), (1, 2, 64), (1, 2, 128)]
    observations = [{"nodes": o.nodes, "replicas": o.replicas, "atomic_bsz": o.atomic_bsz,
                     "compute_seconds": o.compute_seconds, "step_seconds": o.step_seconds}
                    for o in measured(perf, configs)]
    return {"observations": observations, "grad_sqr": 1.0, "grad_var": 40.0,
            "limits": dict(LIMITS), "epoch_samples": 50_000.0, **changes}
