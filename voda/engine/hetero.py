"""The engine's part in heterogeneous decisions: what each flexible job is known to do on
each GPU type, and the type the policy chose becoming the job's own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from voda.core.allocation.hetero import TypeChoice
from voda.core.allocation.hetero_models import accepted
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


def fill_type_models(records: Iterable[_Record], history: Mapping[tuple[str, str], Any],
                     types: list[str]) -> None:
    """Each flexible job's throughput model per accepted type: its own report there, else
    its category's best-measured one there (Scheduler.goodput_history)."""
    for r in records:
        if not r.gpu_types:
            continue
        models = {}
        for t in accepted(_as_job(r), types):
            model = r.reported_by_type.get(t)
            if model is None and r.category:
                model = history.get((r.category, t))
            if model is not None:
                models[t] = model
        r.goodput_by_type = models


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
