"""What a training script measures for its goodput report (voda.training.report.goodput), as an
AdaptDL/Pollux job measures it; standard library only, no torch.

    meter = GoodputMeter.load(checkpoint_dir / GOODPUT_FILE, init_batch=96)
    ...every step:  meter.step(config, compute_seconds, step_seconds)
                    meter.gradients(local_sqr, total_sqr, pieces, batch)
    ...every epoch: meter.end_epoch(); meter.save(path); meter.report(limits, samples)

- Times: per configuration (nodes, replicas = world size, per-GPU micro-batch
  `atomic_bsz`), the medians over the steps of its latest epoch of the compute time
  (forward and backward, no gradient sync) and of the whole step (with the sync and the
  update). Every configuration the job has run is kept (the most recent
  MAX_OBSERVATIONS), across restarts when the script saves the meter in its checkpoint
  directory: after a rescale the report holds more than one configuration.
- Gradient statistics, from the gradients of `pieces` disjoint parts of one step's
  batch (the replicas' local gradients before they are averaged, or two halves of the
  batch on one replica): the unbiased estimates AdaptDL's GradientNoiseScale uses of the
  true gradient's squared norm |G|^2 (`grad_sqr`) and of the trace of the gradient's
  variance at the initial batch M0 (`grad_var`), smoothed by an exponential average
  with bias correction, its weight 0.999 ** (batch / M0) per step.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import voda.training.report

GOODPUT_FILE = "goodput.json"
# The service's bound (voda.core.goodput_report.MAX_OBSERVATIONS, not imported: it would
# bring NumPy and SciPy into every rank).
MAX_OBSERVATIONS = 64
SMOOTHING = 0.999
# The fewest steps whose median stands for a configuration.
MIN_STEPS = 2


@dataclass(frozen=True, slots=True)
class Configuration:
    nodes: int
    replicas: int
    atomic_bsz: int


def gradient_statistics(local_sqr: float, total_sqr: float, pieces: int, batch: int,
                        init_batch: int) -> tuple[float, float]:
    """Unbiased (grad_sqr, grad_var) from one step.

    `total_sqr` is |g|^2 of the step's mean gradient over its `batch` samples; `local_sqr`
    is sum_i (b_i / batch) |g_i|^2 over the `pieces` parts of the batch, g_i the mean
    gradient over the b_i samples of part i. With v the trace of one sample's gradient
    variance, E[total_sqr] = |G|^2 + v / batch and E[local_sqr] = |G|^2 + pieces * v /
    batch, whatever the parts' sizes; so local - total estimates v (pieces - 1) / batch.
    grad_var is the variance of the mean gradient at the initial batch: v / init_batch.
    """
    if pieces < 2:
        raise ValueError(f"pieces: at least 2 parts of a batch are needed, got {pieces}")
    grad_sqr = (pieces * total_sqr - local_sqr) / (pieces - 1)
    grad_var = (local_sqr - total_sqr) / (pieces - 1) * batch / init_batch
    return grad_sqr, grad_var


@dataclass
class SmoothedAverage:
    """An exponential average with bias correction (the first values are not pulled
    towards zero)."""

    biased: float = 0.0
    weight: float = 0.0

    def add(self, value: float, factor: float) -> None:
        self.biased = factor * self.biased + (1.0 - factor) * value
        self.weight = factor * self.weight + (1.0 - factor)

    @property
    def value(self) -> float | None:
        return self.biased / self.weight if self.weight > 0 else None


@dataclass
class GoodputMeter:
    init_batch: int
    observations: dict[Configuration, tuple[float, float]] = field(default_factory=dict)
    grad_sqr_avg: SmoothedAverage = field(default_factory=SmoothedAverage)
    grad_var_avg: SmoothedAverage = field(default_factory=SmoothedAverage)
    # This epoch's step times, by configuration: (compute seconds, step seconds).
    _steps: dict[Configuration, list[tuple[float, float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.init_batch < 1:
            raise ValueError(f"init_batch: must be at least 1, got {self.init_batch}")

    # ----- measuring ------------------------------------------------------------------
    def step(self, config: Configuration, compute_seconds: float, step_seconds: float) -> None:
        self._steps.setdefault(config, []).append((compute_seconds, step_seconds))

    def gradients(self, local_sqr: float, total_sqr: float, pieces: int, batch: int) -> None:
        """One step's gradient norms (see gradient_statistics), added to the averages."""
        grad_sqr, grad_var = gradient_statistics(local_sqr, total_sqr, pieces, batch,
                                                 self.init_batch)
        factor = SMOOTHING ** (batch / self.init_batch)
        self.grad_sqr_avg.add(grad_sqr, factor)
        self.grad_var_avg.add(grad_var, factor)

    def end_epoch(self) -> None:
        """This epoch's medians replace what was measured before at the same
        configurations (a configuration of fewer than MIN_STEPS steps is dropped)."""
        for config, times in self._steps.items():
            if len(times) < MIN_STEPS:
                continue
            compute = statistics.median(c for c, _ in times)
            step = statistics.median(s for _, s in times)
            self.observations.pop(config, None)  # now the most recent
            self.observations[config] = (min(compute, step), step)
        self._steps.clear()
        while len(self.observations) > MAX_OBSERVATIONS:
            del self.observations[next(iter(self.observations))]

    # ----- the report -----------------------------------------------------------------
    @property
    def grad_sqr(self) -> float | None:
        value = self.grad_sqr_avg.value
        return None if value is None else max(value, 0.0)

    @property
    def grad_var(self) -> float | None:
        value = self.grad_var_avg.value
        return None if value is None else max(value, 0.0)

    def report_values(self, limits: Mapping[str, int],
                      epoch_samples: float | None = None) -> dict[str, Any] | None:
        """The body of a goodput report, or None while nothing has been measured."""
        if not self.observations or self.grad_sqr is None or self.grad_var is None:
            return None
        values: dict[str, Any] = {
            "observations": [
                {"nodes": c.nodes, "replicas": c.replicas, "atomic_bsz": c.atomic_bsz,
                 "compute_seconds": compute, "step_seconds": step}
                for c, (compute, step) in self.observations.items()],
            "grad_sqr": self.grad_sqr, "grad_var": self.grad_var, "limits": dict(limits)}
        if epoch_samples is not None:
            values["epoch_samples"] = float(epoch_samples)
        return values

    def report(self, limits: Mapping[str, int], epoch_samples: float | None = None) -> bool:
        """voda.training.report.goodput of what was measured; False when nothing was yet or the
        report failed (training goes on either way)."""
        values = self.report_values(limits, epoch_samples)
        if values is None:
            return False
        return voda.training.report.goodput(values["observations"], values["grad_sqr"],
                                   values["grad_var"], values["limits"],
                                   epoch_samples=values.get("epoch_samples"))

    # ----- kept across restarts -------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"init_batch": self.init_batch,
                "observations": [[c.nodes, c.replicas, c.atomic_bsz, compute, step]
                                 for c, (compute, step) in self.observations.items()],
                "grad_sqr": [self.grad_sqr_avg.biased, self.grad_sqr_avg.weight],
                "grad_var": [self.grad_var_avg.biased, self.grad_var_avg.weight]}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], init_batch: int) -> GoodputMeter:
        """What was saved, if it was measured at the same initial batch (the gradient
        variance is relative to it); else a fresh meter keeping the step times."""
        meter = cls(init_batch)
        for nodes, replicas, atomic, compute, step in values.get("observations", []):
            meter.observations[Configuration(int(nodes), int(replicas), int(atomic))] = (
                float(compute), float(step))
        if int(values.get("init_batch", 0)) == init_batch:
            meter.grad_sqr_avg = SmoothedAverage(*map(float, values["grad_sqr"]))
            meter.grad_var_avg = SmoothedAverage(*map(float, values["grad_var"]))
        return meter

    @classmethod
    def load(cls, path: Path, init_batch: int) -> GoodputMeter:
        """The meter saved at `path`; a fresh one when there is none or it is unreadable."""
        try:
            return cls.from_dict(json.loads(path.read_text()), init_batch)
        except FileNotFoundError:
            return cls(init_batch)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            with contextlib.suppress(OSError):
                print(f"voda.training.goodput_meter: {path} is unreadable; measuring afresh",
                      flush=True)
            return cls(init_batch)

    def save(self, path: Path) -> None:
        """Write then rename: a reader sees the old file or the new one, never half."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_dict()))
        os.replace(tmp, path)
