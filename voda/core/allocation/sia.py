"""Sia (Jayaram Subramanya et al., SOSP'23) as a baseline: every job's GPU type and count
in one mixed-integer program, as the paper and its artifact (siasosp23/artifacts,
`sia-simulator/sia.py`) describe it; written from them, not copied.

Each round, for every job and every configuration (type t, n GPUs) of the artifact's
sets (1, 2, 4 GPUs within a node, then whole nodes: multiples of 4 on 4-GPU nodes, of 8 on
8-GPU nodes, up to 64), the job's goodput there, normalised to its smallest goodput on any
configuration (its 1-GPU goodput on its slowest type). A job is judged only by what it
measured itself, as in the artifact (its category's models, which Voda's policy borrows,
are not used: `Job.category_model_types`); a job measured nowhere has goodput 1 on one GPU
of every type and no other configuration; a type it has not run on is projected from the
types it has (`--project_throughput`), by its category's profiled speeds where given
(`Job.category_type_speeds`: the artifact's per-model ratios, from its profiles), else
the ratio its category, else other jobs, measured; every type shares the largest replica
limit (`--share_max_replicas`). A configuration
other than the job's current one is scaled by its restart factor (what a restart leaves
of its age, as in Pollux; 1 while the job is younger than one restart), its restart being
the job's own cost where the backend knows it (Job.restart_cost: imagenet 250 s, bert
120 s under the `sia` preset), else the policies' penalty. A job whose restart is under
way (Job.restoring_seconds) keeps its configuration, a hard constraint, as in the
artifact (`preserve_ckpt_allocs`). The program

    minimise   sum_jc x_jc A_jc - lambda_n sum_jc x_jc,    A = min(round(G^p, 2), clip)
    subject to sum_c x_jc <= 1 (one configuration per job),
               sum_jc n_c x_jc <= GPUs of type t, for each type t,  x binary,

with p = -0.5 (the fairness power) and lambda_n = 1.1 (the penalty for a job left
without GPUs), is solved by HiGHS (SciPy's milp) to a 1e-4 relative gap, as the artifact runs CBC.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence

import numpy as np

from voda.core.allocation.hetero import TypeChoice
from voda.core.allocation.hetero_models import (
    MAX_HETERO_GPUS,
    TypeShape,
    accepted,
    at_statistics,
    category_speeds,
    goodput_curve,
    job_cap,
    mean_ratios,
    mean_type_speed,
    type_model,
)
from voda.core.allocation.hetero_program import solve_rows
from voda.core.allocation.pollux import restart_factor
from voda.core.goodput import has_gradient
from voda.core.model import Job

SIA_P = -0.5
SIA_LAMBDA_N = 1.1
SIA_CLIP = 3000.0  # the largest A (the artifact's sia_goodput_clip_val)
SIA_GAP = 1e-4  # the artifact's sia_solver_thresh
SIA_TIME_LIMIT = 30.0  # seconds for one solve


@functools.lru_cache(maxsize=256)
def sia_configs(shape: TypeShape) -> tuple[int, ...]:
    """The artifact's GPU counts on a type: 1, 2, 4 (and 8 on 8-GPU nodes) within a node,
    then whole nodes, up to 64 GPUs and the type's nodes."""
    within = [n for n in (1, 2, 4, 8) if n <= shape.per_node]
    top = min(MAX_HETERO_GPUS, shape.capacity)
    whole = [shape.per_node * k for k in range(2, min(shape.nodes, top // shape.per_node) + 1)]
    return tuple(n for n in within + whole if n <= top)


def sia_choice(flexible: Sequence[Job], shapes: Mapping[str, TypeShape],
               free: Mapping[str, int], penalty: float) -> TypeChoice:
    types = sorted(shapes)
    speeds = category_speeds(flexible)
    ratios = mean_ratios(speeds.values())
    by_category = {key: mean_ratios([group]) for key, group in speeds.items()}
    unknown = mean_type_speed(ratios, types)
    rows: list[tuple[int, str, int, float]] = []  # (job index, type, count, A)
    fixed: set[int] = set()  # jobs restarting: their one row is taken
    for i, job in enumerate(flexible):
        options = accepted(job, types)
        job = own_models(job)
        mine = {**ratios, **by_category.get(job.category, {})} if job.category else ratios
        known = {t: type_model(job, t, mine) for t in options}
        shared = max((job_cap(job, m, shapes[t]) for t, m in known.items()), default=0)
        goodput: list[tuple[str, int, float]] = []
        for t in options:
            if known[t] is None:
                if all(m is None for m in known.values()):
                    goodput.append((t, 1, 1.0))  # measured nowhere: one GPU anywhere
                continue
            curve = goodput_curve(job, t, shapes[t], mine, unknown[t], cap=shared)
            for n in sia_configs(shapes[t]):
                if job.min_workers <= n < len(curve) and curve[n] > 0:
                    goodput.append((t, n, float(curve[n])))
        if not goodput:
            continue
        smallest = min(g for _, _, g in goodput)
        restart = job.restart_cost or penalty + job.rescale_delay
        factor = restart_factor(job, restart) if job.running_seconds + job.waiting_seconds \
            >= restart else 1.0
        current = (job.gpu_type, job.current_workers)
        if restoring(job):  # held where it is until its restart is done
            held = [(t, n, g) for t, n, g in goodput if (t, n) == current]
            goodput = held or [(*current, smallest)]
            fixed.add(i)
        for t, n, g in goodput:
            normalised = g / smallest
            if job.current_workers and (t, n) != current:
                normalised *= factor
            a = min(round(max(normalised, 1e-4) ** SIA_P, 2), SIA_CLIP)
            rows.append((i, t, n, a))
    if not rows:
        return TypeChoice({}, {}, {})
    cost = np.array([a - SIA_LAMBDA_N for _, _, _, a in rows])
    x = solve_rows([(i, t, n) for i, t, n, _ in rows], cost, len(flexible), types, free, fixed,
                   SIA_GAP, SIA_TIME_LIMIT)
    chosen = {flexible[i].name: (t, n) for (i, t, n, _), on in zip(rows, x, strict=True) if on}
    choice_types: dict[str, str] = {}
    counts: dict[str, int] = {}
    why: dict[str, str] = {}
    for job in flexible:
        if job.name in chosen:
            t, n = chosen[job.name]
            choice_types[job.name], counts[job.name] = t, n
            why[job.name] = f"on {t}: Sia's program gives it {n} GPUs there"
        else:
            options = accepted(job, types)
            if not options:
                continue
            stay = job.gpu_type if job.gpu_type in options else options[0]
            choice_types[job.name], counts[job.name] = stay, 0
            why[job.name] = f"on {stay}: Sia's program leaves it without GPUs this round"
    return TypeChoice(choice_types, counts, why)


def restoring(job: Job) -> bool:
    """A job in the middle of a restart (checkpoint-restore under way) that holds GPUs of one
    of its types: Sia's artifact keeps its allocation until the restart is done."""
    return job.restoring_seconds > 0 and job.current_workers > 0


def own_models(job: Job) -> Job:
    """`job` with only the models it reported itself (none of its category's), each at the
    gradient statistics of its latest report: as in the artifact, where a job keeps a
    step-time fit per type but one set of statistics, the latest it measured. (A report
    from a type it left holds the statistics of that time: early in training, a small
    noise scale priced that type's larger counts as worth little, and the job was never
    moved back to grow there.)"""
    if job.category_model_types:
        own = {t: m for t, m in job.goodput_by_type.items()
               if t not in job.category_model_types}
        job = dataclasses.replace(job, goodput_by_type=own)
    latest = job.goodput
    if latest is None or not has_gradient(latest):
        return job
    return at_statistics(job, (latest.grad_sqr, latest.grad_var))
