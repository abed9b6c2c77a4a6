"""The engine's part in heterogeneous decisions: what each flexible job is known to do on
each GPU type, and the type the policy chose becoming the job's own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from voda.core.allocation.hetero import TypeChoice
from voda.core.allocation.hetero_models import accepted
from voda.core.goodput import has_gradient
from voda.core.model import Job


class _Record(Protocol):
    name: str
    category: str
    gpu_type: str
    gpu_types: tuple[str, ...]
    goodput: Any
    goodput_by_type: dict[str, Any]
    reported_by_type: dict[str, Any]
    epoch_time_by_workers: dict[int, float]
    category_early_gradient: tuple[float, float] | None
    category_model_types: tuple[str, ...]
    category_type_speeds: tuple[tuple[str, float], ...]


class EarlyGradients:
    """Per category, the mean of the gradient statistics its jobs reported first: what a
    new job of it is likely to measure early in its training. The category's best-measured
    model comes from a job late in its training, where the noise scale has grown: sized on
    it, a new job took many GPUs, shrank once its own first statistics came and grew again
    (docs/design/014-heterogeneous.md, "Early statistics")."""

    def __init__(self) -> None:
        self._sums: dict[str, tuple[float, float, int]] = {}

    def add(self, category: str, model: Any) -> None:
        """A job of `category` reported `model`, its first with gradient statistics."""
        if not has_gradient(model):
            return
        sqr, var, count = self._sums.get(category, (0.0, 0.0, 0))
        self._sums[category] = (sqr + model.grad_sqr, var + model.grad_var, count + 1)

    def of(self, category: str) -> tuple[float, float] | None:
        """(grad_sqr, grad_var) averaged over the category's first reports; None if none."""
        sums = self._sums.get(category)
        return None if sums is None else (sums[0] / sums[2], sums[1] / sums[2])


def fill_type_models(records: Iterable[_Record], history: Mapping[tuple[str, str], Any],
                     types: list[str], early: EarlyGradients | None = None,
                     speeds: Mapping[str, Mapping[str, float]] | None = None) -> None:
    """Each flexible job's throughput model per accepted type: its own report there, else
    its category's best-measured one there (Scheduler.goodput_history), with the types of
    the latter named; its category's early gradient statistics (`early`); and its
    category's profiled speed on each type (`speeds`, SchedulerSettings.type_speeds)."""
    for r in records:
        if not r.gpu_types:
            continue
        r.category_early_gradient = (
            early.of(r.category) if early is not None and r.category else None)
        profiled = (speeds or {}).get(r.category, {}) if r.category else {}
        r.category_type_speeds = tuple(sorted((t, float(v)) for t, v in profiled.items()))
        models = {}
        borrowed = []
        for t in accepted(_as_job(r), types):
            model = r.reported_by_type.get(t)
            if model is None and r.category:
                model = history.get((r.category, t))
                if model is not None:
                    borrowed.append(t)
            if model is not None:
                models[t] = model
        r.goodput_by_type = models
        r.category_model_types = tuple(borrowed)


def _as_job(r: _Record) -> Job:
    return Job(r.name, gpu_type=r.gpu_type, gpu_types=r.gpu_types)


def adopt_types(records: Mapping[str, _Record], typed: Iterable[Job], choice: TypeChoice
                ) -> list[str]:
    """The chosen types become the jobs' own (and the model the decision used there, with
    no epoch times from another type); the names of the jobs whose type changed."""
    changed = []
    for job in typed:
        r = records.get(job.name)
        if r is None or job.name not in choice.types or r.gpu_type == job.gpu_type:
            continue
        r.gpu_type = job.gpu_type
        r.goodput = job.goodput
        r.epoch_time_by_workers = {}
        changed.append(job.name)
    return changed
