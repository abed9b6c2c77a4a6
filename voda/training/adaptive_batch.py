"""The batch an adaptive training script trains at, as AdaptDL's data loader picks it.

At each (re)start and each epoch boundary the script asks `decide` for the global batch
and its split on the ranks it has: per-rank micro-batch `atomic_bsz` and accumulation
steps. The choice is `GoodputModel.choose` (voda.core.goodput, the search the simulator's
adaptive jobs use) on the model the service would fit from the script's own measurements
(voda.core.goodput_report.model_of on voda.training.goodput_meter's report); until that model
exists the script trains at its initial batch (the declared model's smallest batch).

The learning rate follows AdaScale: its factor is the gain (var + sqr) / (var / s + sqr)
at scale s = batch / init batch, from the gradient statistics the script measures. The
example trains with SGD and momentum, for which AdaScale is made, and the gain is what
the model's statistical efficiency (gain / s) already assumes; square-root scaling is
AdaptDL's rule for Adam, which the example does not use. The factor is refreshed with the
batch (per epoch), not every step as AdaptDL does: one decision per epoch keeps the ranks
in step with one broadcast.

Pure: no clock, no I/O, no torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from voda.core.goodput import BatchChoice, GoodputModel
from voda.core.goodput_report import BatchLimits, ReportRefused, model_of, report_from_values


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """What every rank trains at until the next decision."""

    batch: int  # global samples per optimiser step
    atomic_bsz: int  # per-rank micro-batch
    accum_steps: int  # extra micro-batches per step
    lr_factor: float  # multiplies the learning rate
    fitted: bool  # chosen from a fitted model (False: the initial batch)
    goodput: float = 0.0  # the model's prediction for the choice (0: none)


def limits_values(limits: BatchLimits) -> dict[str, int]:
    """The `limits` of a goodput report: no `fixed_batch`, so the job is sized as adaptive."""
    return {"init_batch": limits.init_batch, "max_batch": limits.max_batch,
            "min_local": limits.min_local, "max_local": limits.max_local}


def declared_model(limits: BatchLimits, epoch_samples: float | None = None) -> GoodputModel:
    """The model of a job that has measured nothing: its limits only."""
    return GoodputModel(perf=None, grad_sqr=0.0, grad_var=0.0, init_batch=limits.init_batch,
                        max_batch=limits.max_batch, min_local=limits.min_local,
                        max_local=limits.max_local, epoch_samples=epoch_samples)


def measured_model(values: Mapping[str, Any] | None, replicas: int) -> GoodputModel | None:
    """The model the service would fit from a report body (GoodputMeter.report_values), or
    None while there is none or it cannot be fitted (training goes on at the initial
    batch; the backend logs why it refused the same report)."""
    if values is None:
        return None
    max_workers = max([replicas, *(o["replicas"] for o in values["observations"])])
    try:
        return model_of(report_from_values(values, max_workers), max_workers)
    except ReportRefused:
        return None


def within_limits(choice: BatchChoice, model: GoodputModel, replicas: int) -> BatchChoice:
    """`choice`, or when it leaves the per-rank range or exceeds the largest batch (the
    search rounds micro-batches and can, at the edges of the limits), the legal split
    nearest the initial batch with no accumulation. When no split is legal (more ranks
    than max_batch / min_local) every rank takes min_local samples."""
    atomic, accum = choice.atomic_bsz, choice.accum_steps
    batch = replicas * atomic * (accum + 1)
    if (model.min_local <= atomic <= model.max_local and accum >= 0
            and batch <= model.max_batch):
        return choice
    largest = min(model.max_local, model.max_batch // replicas)
    if largest < model.min_local:
        return BatchChoice(0.0, model.min_local, 0)
    wanted = math.ceil(model.init_batch / replicas)
    return BatchChoice(0.0, min(max(wanted, model.min_local), largest), 0)


def adascale_gain(model: GoodputModel, batch: int) -> float:
    """AdaScale's learning-rate factor at `batch` (1 without gradient statistics)."""
    if model.grad_sqr <= 0 and model.grad_var <= 0:
        return 1.0
    scale = batch / model.init_batch
    return float(model.efficiency(np.array([float(batch)]))[0] * scale)


def plan(model: GoodputModel, nodes: int, replicas: int, fitted: bool) -> BatchPlan:
    """The batch `model` picks on `replicas` ranks over `nodes` nodes, within its limits,
    with AdaScale's learning-rate factor for it."""
    choice = within_limits(model.choose(nodes, replicas), model, replicas)
    batch = choice.batch_size(replicas)
    return BatchPlan(batch, choice.atomic_bsz, choice.accum_steps,
                     adascale_gain(model, batch), fitted, choice.goodput)


def decide(limits: BatchLimits, values: Mapping[str, Any] | None, nodes: int, replicas: int,
           epoch_samples: float | None = None) -> BatchPlan:
    """The batch to train at on `replicas` ranks over `nodes` nodes, given the meter's
    report body `values` (None: nothing measured yet)."""
    fitted = measured_model(values, replicas)
    if fitted is not None:
        return plan(fitted, nodes, replicas, fitted=True)
    # The initial batch; its learning-rate factor from what gradients were measured.
    declared = dataclasses.replace(
        declared_model(limits, epoch_samples),
        grad_sqr=float((values or {}).get("grad_sqr", 0.0)),
        grad_var=float((values or {}).get("grad_var", 0.0)))
    return plan(declared, nodes, replicas, fitted=False)
