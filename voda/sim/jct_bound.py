"""A lower bound on the average JCT any scheduler can reach on a workload and cluster.

How far is a policy from the best possible? `mean_jct_bound` answers with a linear
program over time slots (a time-indexed relaxation, solved by HiGHS through SciPy). In
every slot each job may run, for any fractions of the slot adding up to at most the part
of the slot after its arrival, any of its configurations: g GPUs of one type, packed.
A configuration's progress rate is the fastest the simulator's own model of the job ever
runs on it alone (`peak_rates`: the best of its epochs, measured on a fresh SimBackend
with no restart penalty). Per type, the GPUs in use in a slot never exceed the type's.

Everything a real schedule must also respect is kept: arrivals, each type's GPUs, each
job's GPU counts and speeds; everything else is given away, so the bound is below what
any schedule of the simulator reaches: restarts and moves cost nothing, a job may
time-share configurations within a slot, placement is always packed, and the program
knows every arrival in advance. Optionally the schedule's GPU-seconds are capped
(`gpu_seconds`: e.g. those another policy used), for "no more GPU-hours than ...".

A job's completion time C_j is bounded twice: C_j >= r_j + T_j (its fastest time alone
after its arrival r_j) and C_j >= M_j + T_j / 2, where M_j is the mean time of its
progress (progress weighted) and T_j its fastest time: at a rate of at most 1/T_j, the
last part of the job runs no later than C_j, so its mean time is at most C_j - T_j / 2.
M_j is bounded below by the starts of the slots it progresses in (the bound loses up to
one slot per job; a shorter slot tightens it and costs time).

The one thing it does not give away: a batch-adaptive job's batch, as the simulated job
chooses it on each configuration (voda.sim.adaptive), not the best batch there is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from voda.core.model import ANY_GPU_TYPE, Job, Node
from voda.sim.backend import SimBackend
from voda.sim.cluster_file import SimCluster
from voda.sim.isolated import packed_on
from voda.sim.workloads import JobSpec, Workload, accepting_any_type

MAX_BOUND_SLOTS = 20_000  # time slots in one program: beyond, a longer slot is needed
ALONE = "alone"


class BoundError(ValueError):
    """A bound that cannot be worked out (the message names the cause)."""


@dataclass(frozen=True)
class Config:
    """g GPUs of one type, and the fastest share of the job done per second on them."""

    gpu_type: str
    gpus: int
    rate: float  # fraction of the whole job per second (job_configs: peak or mean)


@dataclass(frozen=True)
class JobBound:
    name: str
    submit: float
    fastest: float  # seconds alone at its fastest configuration, at the rates given
    completion: float  # the program's lower bound on its completion time


@dataclass(frozen=True)
class BoundResult:
    jobs: tuple[JobBound, ...]
    slot_seconds: float
    gpu_seconds: float  # what the program's schedule uses (at most the cap, if one)

    @property
    def mean_jct(self) -> float:
        return sum(j.completion - j.submit for j in self.jobs) / max(len(self.jobs), 1)

    @property
    def mean_fastest(self) -> float:
        """Each job alone at its fastest: the bound without any contention."""
        return sum(j.fastest for j in self.jobs) / max(len(self.jobs), 1)


@dataclass(frozen=True)
class AloneRates:
    """Shares of the job done per second on one configuration, run alone from its start
    with no restart penalty: over the whole run, and at its fastest moment."""

    mean: float  # 1 / its run time
    peak: float  # its fastest epoch (and batch, as it chose it there)


def alone_rates(spec: JobSpec, nodes: Sequence[Node], gpus: int, *,
                calibration: Mapping[str, float], spine: float = 1.0,
                layout_speed: str = "actual") -> AloneRates:
    """The job alone on `gpus` packed GPUs of `nodes` (0 rates: it never finishes)."""
    core = replace(spec, name=ALONE, submit=0.0, order=0, priority=0, category="")
    backend = SimBackend(list(nodes), {ALONE: core}, penalty=0.0, report_epochs=False,
                         spine_oversubscription=spine, layout_speed=layout_speed,
                         calibration=calibration)
    backend.start(Job(name=ALONE, min_workers=core.min_workers,
                      max_workers=core.max_workers, gpu_type=nodes[0].gpu_type),
                  packed_on(nodes, gpus))
    sim = backend.jobs[ALONE]
    total = sim.boundaries[-1] if sim.boundaries else 0.0
    peak = 0.0
    while sim.finished is None:
        peak = max(peak, sim.rate())
        times = [x for x in (backend.next_boundary(), backend.next_completion()) if x is not None]
        if not times or math.isinf(min(times)):
            return AloneRates(0.0, 0.0)
        backend.advance(max(min(times), backend.now + 1e-9))
        backend.events()
    if total <= 0 or sim.finished <= 0:
        return AloneRates(0.0, 0.0)
    return AloneRates(1.0 / sim.finished, peak / total)


def upper_hull(points: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """The points on the upper concave hull of (0, 0) and `points` (GPUs, rate): any other
    point is slower than sharing the slot between its two neighbours on the hull."""
    hull: list[tuple[int, float]] = [(0, 0.0)]
    for point in sorted(points):
        while len(hull) >= 2 and ((hull[-1][1] - hull[-2][1]) * (point[0] - hull[-2][0])
                                  <= (point[1] - hull[-2][1]) * (hull[-1][0] - hull[-2][0])):
            hull.pop()
        hull.append(point)
    return [p for p in hull if p[0] > 0]


RATES = ("peak", "mean")  # job_configs: a bound for certain, or each run's average


def job_configs(spec: JobSpec, cluster: SimCluster, calibration: Mapping[str, float],
                rates: str = "peak", layout_speed: str = "actual") -> list[Config]:
    """The configurations worth running the job on: per type it accepts, the counts on the
    upper hull of its rates (`rates`: AloneRates.peak or .mean), from 1 GPU to min(its
    max, the type's GPUs)."""
    if rates not in RATES:
        raise BoundError(f"rates: must be one of {', '.join(RATES)}, got {rates!r}")
    accepted = set(spec.gpu_types) if spec.gpu_types else {spec.gpu_type}
    configs = []
    for gpu_type in cluster.cluster.gpu_types():
        if ANY_GPU_TYPE not in accepted and gpu_type not in accepted:
            continue
        nodes = cluster.cluster.of_type(gpu_type).nodes
        top = min(spec.max_workers, sum(n.gpus for n in nodes))
        points = []
        for g in range(1, top + 1):
            alone = alone_rates(spec, nodes, g, calibration=calibration,
                                spine=cluster.spine_oversubscription,
                                layout_speed=layout_speed)
            points.append((g, getattr(alone, rates)))
        configs += [Config(gpu_type, g, rate)
                    for g, rate in upper_hull([(g, r) for g, r in points if r > 0])]
    if not configs:
        raise BoundError(f"{spec.name}: no GPU type of the cluster runs it")
    return configs


def mean_jct_bound(workload: Workload, cluster: SimCluster, *, slot_seconds: float,
                   horizon: float, calibration: Mapping[str, float] | None = None,
                   gpu_seconds: float | None = None, rates: str = "peak",
                   layout_speed: str = "actual",
                   configs: Mapping[str, Sequence[Config]] | None = None) -> BoundResult:
    """The program's bound (see the module's docstring). `horizon`: the last time any job
    may progress; it must reach past every job's completion under some schedule (the
    program is infeasible otherwise). `configs` by job name: worked out if not given."""
    if not slot_seconds > 0:
        raise BoundError(f"slot_seconds: must be positive, got {slot_seconds}")
    if cluster.events:
        raise BoundError("cluster: nodes that join or leave are not modelled by the bound")
    slots = math.ceil(horizon / slot_seconds)
    if slots > MAX_BOUND_SLOTS:
        raise BoundError(f"slot_seconds: {slot_seconds:g} s makes {slots} slots over "
                         f"{horizon:g} s; at most {MAX_BOUND_SLOTS}")
    capacity = {t: cluster.cluster.capacity(t) for t in cluster.cluster.gpu_types()}
    if len(capacity) > 1:  # as the simulator runs it (voda.sim.runner)
        workload = accepting_any_type(workload)
    specs = list(workload.jobs)
    options = [list(configs[s.name]) if configs is not None else
               job_configs(s, cluster, calibration or {}, rates, layout_speed) for s in specs]
    fastest = [1.0 / max(c.rate for c in opts) for opts in options]
    program = _Program(slots, slot_seconds, capacity)
    for index, (spec, opts) in enumerate(zip(specs, options, strict=True)):
        program.add_job(index, spec.submit, opts)
    completions, used = program.solve([s.submit for s in specs], fastest, gpu_seconds)
    return BoundResult(
        jobs=tuple(JobBound(s.name, s.submit, f, c)
                   for s, f, c in zip(specs, fastest, completions, strict=True)),
        slot_seconds=slot_seconds, gpu_seconds=used)


class _Program:
    """The sparse rows of the program, one job at a time: x[j, c, slot] is the part of
    the slot job j runs configuration c; after them, one C_j per job."""

    def __init__(self, slots: int, slot_seconds: float, capacity: Mapping[str, int]) -> None:
        self.slots, self.dt = slots, slot_seconds
        self.type_index = {t: k for k, t in enumerate(sorted(capacity))}
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.bounds_ub: list[float] = [float(capacity[t]) for t in self.type_index
                                       for _ in range(slots)]  # one row per (type, slot)
        self.variables = 0
        self.per_job: list[tuple[list[int], list[float], list[float], list[float]]] = []

    def _capacity_row(self, gpu_type: str, slot: int) -> int:
        return self.type_index[gpu_type] * self.slots + slot

    def add_job(self, index: int, submit: float, configs: Sequence[Config]) -> None:
        columns, progress, when, gpus = [], [], [], []
        first = int(submit // self.dt)
        if first >= self.slots:
            raise BoundError(f"horizon: ends before job {index} arrives at {submit:g} s")
        for slot in range(first, self.slots):
            start = max(slot * self.dt, submit)
            usable = (slot + 1) * self.dt - start
            if usable <= 0:
                continue
            row = len(self.bounds_ub)
            self.bounds_ub.append(1.0)  # the job's configurations share the usable part
            for config in configs:
                column = self.variables
                self.variables += 1
                self.rows += [row, self._capacity_row(config.gpu_type, slot)]
                self.cols += [column, column]
                self.vals += [self.dt / usable, float(config.gpus)]
                columns.append(column)
                progress.append(self.dt * config.rate)
                when.append(start)
                gpus.append(self.dt * config.gpus)
        self.per_job.append((columns, progress, when, gpus))

    def solve(self, submits: Sequence[float], fastest: Sequence[float],
              gpu_seconds: float | None) -> tuple[list[float], float]:
        jobs = len(self.per_job)
        nx = self.variables
        rows, cols, vals = list(self.rows), list(self.cols), list(self.vals)
        b_ub = list(self.bounds_ub)
        eq_rows: list[int] = []
        eq_cols: list[int] = []
        eq_vals: list[float] = []
        for j, (columns, progress, when, _) in enumerate(self.per_job):
            eq_rows += [j] * len(columns)
            eq_cols += columns
            eq_vals += progress
            row = len(b_ub)  # sum of progress x slot start - C_j <= -T_j / 2
            rows += [row] * (len(columns) + 1)
            cols += [*columns, nx + j]
            vals += [p * w for p, w in zip(progress, when, strict=True)] + [-1.0]
            b_ub.append(-fastest[j] / 2)
        if gpu_seconds is not None:
            row = len(b_ub)
            for columns, _, _, gpus in self.per_job:
                rows += [row] * len(columns)
                cols += columns
                vals += gpus
            b_ub.append(gpu_seconds)
        a_ub = coo_matrix((vals, (rows, cols)), shape=(len(b_ub), nx + jobs)).tocsr()
        a_eq = coo_matrix((eq_vals, (eq_rows, eq_cols)), shape=(jobs, nx + jobs)).tocsr()
        cost = np.zeros(nx + jobs)
        cost[nx:] = 1.0
        bounds = [(0.0, None)] * nx + [(s + f, None) for s, f in zip(submits, fastest,
                                                                     strict=True)]
        result = linprog(cost, A_ub=a_ub, b_ub=np.array(b_ub), A_eq=a_eq, b_eq=np.ones(jobs),
                         bounds=bounds, method="highs")
        if result.status != 0:
            raise BoundError(f"the program found no schedule ({result.message}): a longer "
                             "horizon, or a larger GPU-seconds cap")
        x = result.x
        used = sum(float(np.dot(x[columns], gpus)) for columns, _, _, gpus in self.per_job)
        return [float(v) for v in x[nx:]], used
