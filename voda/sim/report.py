"""What a simulation measured: JCTs, makespan, utilization and allocation changes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from voda.sim.queue_stats import finish_time_fairness
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
    start: float | None = None  # when it first held GPUs (None: never)
    gpu_seconds: float = 0.0  # GPU-seconds it held, restart penalties included
    rescales: int = 0  # the engine's counts for this job
    migrations: int = 0
    preemptions: int = 0
    # Filled in by voda.sim.isolated.with_job_details (None until then, or when unknown):
    # its run time alone on the cluster at its max GPUs, and alone on its fair share.
    alone: float | None = None
    fair_share: float | None = None  # GPUs: the type's GPUs / mean jobs present over its life
    fair_alone: float | None = None  # its run time alone on `fair_share` GPUs

    @property
    def wait(self) -> float | None:
        """Seconds from submission to its first GPU."""
        return None if self.start is None else max(self.start - self.submit, 0.0)

    @property
    def slowdown(self) -> float | None:
        """JCT over its run time alone at its max GPUs."""
        return _ratio(self.jct, self.alone)

    @property
    def rho(self) -> float | None:
        """Finish-time fairness (Themis): JCT over its run time alone on its fair share."""
        return _ratio(self.jct, self.fair_alone)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "submit": self.submit, "finish": self.finish,
                "jct": self.jct, "start": self.start, "wait": self.wait,
                "gpu_hours": self.gpu_seconds / 3600.0, "rescales": self.rescales,
                "migrations": self.migrations, "preemptions": self.preemptions,
                "alone": self.alone, "slowdown": self.slowdown,
                "fair_share": self.fair_share, "fair_alone": self.fair_alone,
                "rho": self.rho}


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None or not den > 0 else num / den


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
    # The arrival jittering it ran on (voda.sim.workloads.jitter_arrivals; 0: the trace).
    jitter: float = 0.0
    seed: int = 0
    # Per team queue (voda.sim.queue_stats.queue_report); empty without --queues.
    queues: tuple[dict[str, Any], ...] = ()

    @property
    def mean_slowdown(self) -> float:
        """Mean of the finished jobs' slowdowns (NaN when none is known)."""
        return _mean([j.slowdown for j in self.jobs])

    @property
    def rho_mean(self) -> float:
        """Mean finish-time fairness of the finished jobs (NaN when none is known)."""
        return _mean([j.rho for j in self.jobs])

    @property
    def rho_max(self) -> float:
        """The worst (largest) finish-time fairness of a finished job."""
        values = [j.rho for j in self.jobs if j.rho is not None]
        return max(values) if values else float("nan")

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
            "jitter": self.jitter,
            "seed": self.seed,
            # None until voda.sim.isolated.with_job_details has timed the jobs alone.
            "mean_slowdown": _known(self.mean_slowdown),
            "rho_mean": _known(self.rho_mean),
            "rho_max": _known(self.rho_max),
            **({"queues": list(self.queues)} if self.queues else {}),
            "finish_time_fairness": finish_time_fairness([j.rho for j in self.jobs]),
            "jobs": [j.to_dict() for j in self.jobs],
        }


def _known(x: float) -> float | None:
    return None if math.isnan(x) else x


def _mean(values: list[float | None]) -> float:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else float("nan")


def _per_job_holdings(timeline: Any, end: float) -> tuple[dict[str, float], dict[str, float]]:
    """From the backend's (time, job, GPUs held from then) changes: when each job first
    held GPUs, and the GPU-seconds it held up to `end`."""
    starts: dict[str, float] = {}
    held: dict[str, float] = {}
    last: dict[str, tuple[float, int]] = {}
    for t, name, gpus in timeline:
        if gpus and name not in starts:
            starts[name] = t
        if name in last:
            t0, g0 = last[name]
            held[name] = held.get(name, 0.0) + g0 * max(t - t0, 0.0)
        last[name] = (t, gpus)
    for name, (t0, g0) in last.items():
        if g0:
            held[name] = held.get(name, 0.0) + g0 * max(end - t0, 0.0)
    return starts, held


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
    starts, held = _per_job_holdings(backend.timeline, end)
    jobs = []
    for spec in workload.jobs:
        sim = backend.jobs.get(spec.name)
        finish = sim.finished if sim is not None else None
        record = scheduler.jobs.get(spec.name)
        jobs.append(JobResult(
            spec.name, spec.submit, finish, None if finish is None else finish - spec.submit,
            start=starts.get(spec.name), gpu_seconds=held.get(spec.name, 0.0),
            rescales=record.rescales if record is not None else 0,
            migrations=record.migrations if record is not None else 0,
            preemptions=record.preemptions if record is not None else 0))
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
