"""What a simulation measured: JCTs, makespan, utilization and allocation changes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from voda.sim.tail import p99

if TYPE_CHECKING:
    from voda.engine.scheduler import Scheduler
    from voda.sim.backend import SimBackend
    from voda.sim.workloads import Workload


@dataclass(frozen=True)
class JobResult:
    name: str
    submit: float
    finish: float | None
    jct: float | None


@dataclass(frozen=True)
class SimResult:
    algorithm: str
    workload: str
    jobs: tuple[JobResult, ...]
    avg_jct: float
    p50_jct: float
    p99_jct: float
    makespan: float
    utilization: float  # GPUs held / GPUs present, from the first submission to the last finish
    rescales: int
    migrations: int
    preemptions: int
    unfinished: int
    # Shares of the GPU-seconds held: by jobs that fit on one node but span several,
    # and by jobs that fit in one leaf but span several (placement quality).
    split_share: float = 0.0
    cross_leaf_share: float = 0.0
    # GPU-hours the jobs held, restarts included: what a schedule spends for its JCTs. On a
    # full cluster, more of it pushes the makespan, and with it the longest jobs, later.
    gpu_hours: float = 0.0
    layout_speed: str = "actual"  # what job speed followed (voda.sim.backend.LAYOUT_SPEEDS)
    params: dict[str, Any] = field(default_factory=dict)  # the algorithm's knobs
    timeline: tuple[tuple[float, str, int], ...] = field(default=(), repr=False)
    queue: tuple[tuple[float, int, int], ...] = field(default=(), repr=False)

    @property
    def finished_jcts(self) -> list[float]:
        """The JCTs of the jobs that finished, in the workload's order."""
        return [float(j.jct) for j in self.jobs if j.jct is not None]

    @property
    def warning(self) -> str | None:
        """What the figures leave out, said plainly (None when every job finished)."""
        if not self.unfinished:
            return None
        return (f"{self.unfinished} of {len(self.jobs)} jobs did not finish: JCTs and "
                "makespan cover the finished jobs only")

    def to_dict(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "params": dict(self.params),
            "workload": self.workload,
            "avg_jct": self.avg_jct,
            "p50_jct": self.p50_jct,
            "p99_jct": self.p99_jct,
            "makespan": self.makespan,
            "utilization": self.utilization,
            "gpu_hours": self.gpu_hours,
            "rescales": self.rescales,
            "migrations": self.migrations,
            "preemptions": self.preemptions,
            "unfinished": self.unfinished,
            "complete": self.unfinished == 0,
            "warning": self.warning,
            "split_share": self.split_share,
            "cross_leaf_share": self.cross_leaf_share,
            "layout_speed": self.layout_speed,
            "jobs": [
                {"name": j.name, "submit": j.submit, "finish": j.finish, "jct": j.jct}
                for j in self.jobs
            ],
        }


def _capacity_seconds(changes: list[tuple[float, int]], start: float, end: float) -> float:
    total = 0.0
    for i, (t, capacity) in enumerate(changes):
        t_next = changes[i + 1][0] if i + 1 < len(changes) else end
        lo, hi = max(t, start), min(t_next, end)
        if hi > lo:
            total += (hi - lo) * capacity
    return total


def _share(gpu_seconds: dict[str, float], part: str) -> float:
    total = gpu_seconds["total"]
    return gpu_seconds[part] / total if total > 0 else 0.0


def build_result(
    algorithm: str,
    workload: Workload,
    backend: SimBackend,
    scheduler: Scheduler,
    queue: list[tuple[float, int, int]],
    end: float,
    params: Mapping[str, Any] | None = None,
) -> SimResult:
    jobs = []
    for spec in workload.jobs:
        sim = backend.jobs.get(spec.name)
        finish = sim.finished if sim is not None else None
        jobs.append(JobResult(spec.name, spec.submit, finish,
                              None if finish is None else finish - spec.submit))
    jcts = np.array([j.jct for j in jobs if j.jct is not None], dtype=float)
    finishes = [j.finish for j in jobs if j.finish is not None]
    first = min(j.submit for j in jobs)
    last = max(finishes) if finishes else end
    capacity = _capacity_seconds(backend.capacity_changes, first, last)
    records = scheduler.jobs.values()
    return SimResult(
        algorithm=algorithm,
        params=dict(params or {}),
        workload=workload.source,
        jobs=tuple(jobs),
        avg_jct=float(jcts.mean()) if len(jcts) else float("nan"),
        p50_jct=float(np.percentile(jcts, 50)) if len(jcts) else float("nan"),
        p99_jct=p99(jcts),
        makespan=(last - first) if finishes else float("nan"),
        utilization=backend.busy_gpu_seconds / capacity if capacity > 0 else 0.0,
        gpu_hours=backend.busy_gpu_seconds / 3600.0,
        rescales=sum(r.rescales for r in records),
        migrations=sum(r.migrations for r in records),
        preemptions=sum(r.preemptions for r in records),
        unfinished=len(jobs) - len(finishes),
        split_share=_share(backend.layout_gpu_seconds, "split"),
        cross_leaf_share=_share(backend.layout_gpu_seconds, "cross_leaf"),
        layout_speed=backend.layout_speed,
        timeline=tuple(backend.timeline),
        queue=tuple(queue),
    )
