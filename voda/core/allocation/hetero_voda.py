"""Voda's heterogeneity policy: every flexible job's GPU type and count in one program.

Each round, for every job and every configuration (type t, n GPUs) it may take (Sia's
sets: 1, 2, 4 (and 8) GPUs within a node, then whole nodes; and the count it holds now),
the configuration's value is the job's speed-up there times its weight,

    v(t, n) = w_j x goodput_t(n) / goodput on one GPU of its fastest type,

with w_j = (r_j / M)^p, r_j the job's rank among the M flexible jobs by remaining time on
one GPU of its fastest type (1: the longest, M: the shortest) and p = 0.5. These are the
weights of heSRPT (Berg, Vesilo and Harchol-Balter, 2020): for speed-ups n^p, the share
of the cluster that minimises the mean completion time gives the i-th longest of M jobs
(i/M)^(1/(1-p)) - ((i-1)/M)^(1/(1-p)), which is what maximising sum w_i s(share_i)
gives with w_i ~ (i/M)^p. Shorter jobs weigh more, yet no job is worth nothing: the
longest weighs 1/sqrt(M) of the shortest, not (as with a value of goodput / remaining
work) its remaining work's share, which starved long jobs (imagenet) behind streams of
short ones, and spent GPUs on short jobs at little speed-up. A job whose remaining time
at its best configuration (remaining work over its largest goodput) is above the mean over
the flexible jobs weighs at least sqrt(0.5 x mean w^2) (`LONG_JOB_FLOOR`): for speed-ups
n^0.5 a weight's square is proportional to its share, so such a job is valued at no less
than half the equal share 1/M. Without it the longest jobs, ranked last, waited behind
every shorter one and made the p99; with it the p99 falls and the average rises a little.
Once such a job is older than its remaining time at its best configuration (it has waited
and run longer than it needs alone from now), it weighs at least sqrt(mean w^2), the
equal share: against a steady stream of short jobs it would otherwise stay on the few GPUs
they leave, moved and stopped as they come and go.

A configuration other than the job's current one is a restart and keeps 1 - Voda's
charge of its value (voda.core.allocation.hetero.move_charge: the job's restart cost
over its remaining time there, or the horizon its cost grows, plus the share of its life
already lost to restarts; while no job waits and GPUs are idle, the cost is spread over
the time since the last job came instead, if longer: `calm_horizon`); taking every GPU
from a running job costs it the same charge of its current value (it pays the restart
when it resumes), so a job changes type or count, or is stopped, only for more than the
restart costs it; a job shrunk on its type is charged the restart it pays when it grows
back as well. Each GPU a configuration holds costs GPU_PRICE (5 %) of one GPU's speed on
the job's fastest type, so no GPU goes to a job that gains less than that from it. A job
whose restart is under way keeps its configuration. The program, one configuration per
job, no type given more GPUs than it has, maximising the total value, is Sia's
(voda.core.allocation.hetero_program) with these values in place of Sia's fairness
power (docs/design/014-heterogeneous.md). A type the job has no model for (its own or its
category's) is projected from one it has by its category's profiled speeds where given
(`Job.category_type_speeds`, as Sia (ours) is given them: hetero_models.type_model), else
by the step times its categories measured on both types (`hardware_ratios`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from voda.core.allocation.hetero import TypeChoice, move_charge, remaining_work
from voda.core.allocation.hetero_models import (
    TypeShape,
    accepted,
    at_statistics,
    goodput_curve,
    hardware_ratios,
    type_speeds,
)
from voda.core.allocation.hetero_program import solve_rows
from voda.core.allocation.sia import restoring, sia_configs
from voda.core.allocation.voda import RestartCharge
from voda.core.goodput import GoodputModel, has_gradient
from voda.core.model import Job

# The program's relative optimality gap: its choice is proven within 0.5 % of the best
# value, far inside the error of the goodput estimates it weighs. Closing it to Sia's
# 1e-4 cost HiGHS cut rounds that took a decision at 1,000 jobs from 0.2 s to 0.3-1.2 s,
# varying with the instance; without presolve (which these one-row-per-configuration
# programs barely shrink) it is 0.18-0.20 s (docs/design/014-heterogeneous.md).
VODA_GAP = 5e-3
SPEEDUP_POWER = 0.5  # heSRPT's p: the weights (rank / M)^p
# The least weight of a job whose remaining time is above the mean, as a fraction of
# sqrt(mean w^2), the weight whose share is the equal one for speed-ups n^0.5: sqrt(0.5),
# half that share. heSRPT's weights alone left the longest jobs (imagenet) starved behind
# streams of shorter ones, and they made the p99; the whole equal share (1.0) cost the
# average more, a quarter of it lost the p99's gain. A long job older than its remaining
# time at its best configuration gets the whole equal share: on newTrace's 960-job
# workloads imagenet was otherwise kept on one or two GPUs for 40 hours and restarted
# over a hundred times (docs/design/014-heterogeneous.md).
LONG_JOB_FLOOR = 0.5 ** 0.5
# What holding a GPU costs, in one GPU's speed on the job's fastest type, weighted as the
# job's speed-up is: a configuration's value is w_j x (speed-up - GPU_PRICE x its GPUs), so
# a job takes a GPU only where it adds at least 5 % of one GPU's speed. Without it the
# program gave every idle GPU to whichever job gained anything from it, and Voda spent 5-12 %
# more GPU-hours per job than Sia for the same average JCT; 0.1 saved more GPU-hours and
# raised the average and the p99 (docs/design/014-heterogeneous.md, "A price per GPU").
GPU_PRICE = 0.05


def rank_weights_large_m(remaining: np.ndarray, power: float = SPEEDUP_POWER) -> np.ndarray:
    """heSRPT's weight of each job, by its `remaining` time, in its large-M form:
    (rank / M)^power, rank 1 the longest and M the shortest (ties in the order given).
    Voda's per-type algorithm uses the exact weights (voda.core.allocation.voda.
    rank_weights, the share to the power 1 - p); here they did worse on the saturn
    workloads the weights were chosen on (docs/design/014-heterogeneous.md)."""
    m = len(remaining)
    rank = np.empty(m)
    rank[np.argsort(-remaining, kind="stable")] = np.arange(1, m + 1)
    return (rank / max(m, 1)) ** power


def floored_weights(weights: np.ndarray, at_best: np.ndarray, ages: np.ndarray
                    ) -> np.ndarray:
    """`weights` with each job whose remaining time at its best configuration (`at_best`)
    is above the mean over the jobs raised to at least LONG_JOB_FLOOR x sqrt(mean w^2), or
    to sqrt(mean w^2) itself (the equal share) once its age (`ages`) is above that
    remaining time: it has already waited and run longer than it needs alone from now,
    and is being starved."""
    if not len(weights):
        return weights
    equal = float(np.sqrt(np.mean(weights ** 2)))
    floor = equal * np.where(ages > at_best, 1.0, LONG_JOB_FLOOR)
    return np.where(at_best > float(at_best.mean()), np.maximum(weights, floor), weights)


def _charged(values: np.ndarray, goodput: np.ndarray, work: float, changed: np.ndarray,
             charge: RestartCharge, shrunk: np.ndarray) -> np.ndarray:
    """A running job's `values`: each change keeps 1 - the restart charge at its remaining
    time there; every configuration, its current one included, gains the charge of the
    current value, which is what stopping the job (value 0) costs it when it resumes,
    except one with fewer GPUs of its type (`shrunk`): a job shrunk grows back, and pays
    that second restart then, as a stopped one does when it resumes."""
    keep = 1.0 - charge.share(work / goodput)
    out = np.where(changed, values * np.maximum(keep, 0.0), values)
    if not changed.all():
        at = int(np.argmin(changed))
        out = out + np.where(shrunk, 0.0, values[at] * min(1.0 - float(keep[at]), 1.0))
    return out


def gradient_source(job: Job) -> GoodputModel | None:
    """Whose gradient statistics price `job`'s batch sizes: its own once it has measured
    them (they belong to its training, not to a GPU type), else those of its model measured
    on the most GPUs (its category's); None when no model has any."""
    if has_gradient(job.goodput):
        return job.goodput
    known = [m for m in job.goodput_by_type.values() if has_gradient(m)]
    return max(known, key=lambda m: m.max_profiled_replicas, default=None)


def with_one_statistics(job: Job) -> Job:
    """`job` with every type's model at the same gradient statistics (`gradient_source`;
    where it has none of its own, its category's early ones when the engine has them:
    `Job.category_early_gradient`).
    A job's model on a type is its own report there, else its category's: without this, a
    young job's own statistics (an early, small noise scale: large batches gain little) on
    the type it ran on were compared with another job's later ones on the other types, and
    it moved type after its first restart for a gain that was no more than that difference."""
    source = gradient_source(job)
    if source is None:
        return job
    stats = (source.grad_sqr, source.grad_var)
    if not has_gradient(job.goodput) and job.category_early_gradient is not None:
        stats = job.category_early_gradient  # none of its own yet: early in its training
    return at_statistics(job, stats)


def voda_choice(flexible: Sequence[Job], shapes: Mapping[str, TypeShape],
                free: Mapping[str, int], penalty: float) -> TypeChoice:
    types = sorted(shapes)
    ratios = hardware_ratios(flexible)
    flexible = [with_one_statistics(job) for job in flexible]
    unknown = type_speeds(ratios, types)
    rows: list[tuple[int, str, int]] = []
    values: list[float] = []
    fixed: set[int] = set()
    speed = np.zeros((len(flexible), len(types)))  # goodput on one GPU of each type
    prepared: list[tuple[int, Job, list[tuple[str, int, float]], float]] = []
    at_best: list[float] = []  # each prepared job's remaining time at its best configuration
    for i, job in enumerate(flexible):
        options = _configurations(job, shapes, ratios, unknown, speed[i], types)
        if options:
            best = max(o[2] for o in options)
            work = remaining_work(job, best)
            prepared.append((i, job, options, work))
            at_best.append(work / max(best, 1e-12))
    fastest = np.maximum(speed.max(axis=1), 1e-12)  # its goodput on one GPU, best type
    weights = rank_weights_large_m(np.array([work / fastest[i] for i, _, _, work in prepared]))
    ages = np.array([job.running_seconds + job.waiting_seconds for _, job, _, _ in prepared])
    weights = floored_weights(weights, np.array(at_best), ages)
    calm = calm_horizon(flexible, free)
    for (i, job, options, work), weight in zip(prepared, weights.tolist(), strict=True):
        current = (job.gpu_type, job.current_workers)
        if restoring(job):  # held where it is until its restart is done
            held = [o for o in options if o[:2] == current]
            if held:
                options = held
                fixed.add(i)
        g = np.array([o[2] for o in options])
        gpus = np.array([o[1] for o in options])
        v = (g / fastest[i] - GPU_PRICE * gpus) * weight
        if job.current_workers > 0:  # a change, or a stop, is a restart
            same_type = np.array([o[0] == current[0] for o in options])
            v = _charged(v, g, work, np.array([o[:2] != current for o in options]),
                         move_charge(job, penalty, calm), same_type & (gpus < current[1]))
        for (t, n, _), value in zip(options, v.tolist(), strict=True):
            if value > 0:
                rows.append((i, t, n))
                values.append(value)
    if not rows:
        return TypeChoice({}, {}, {})
    cost = -np.array(values) / max(values)  # scaled to 1 for the solver's tolerances
    taken = solve_rows(rows, cost, len(flexible), types, free, fixed, VODA_GAP, presolve=False)
    chosen = {flexible[i].name: (t, n) for (i, t, n), on in zip(rows, taken, strict=True) if on}
    out_types: dict[str, str] = {}
    counts: dict[str, int] = {}
    for job in flexible:
        if job.name in chosen:
            out_types[job.name], counts[job.name] = chosen[job.name]
        elif options := accepted(job, types):
            out_types[job.name] = job.gpu_type if job.gpu_type in options else options[0]
            counts[job.name] = 0
    used = {t: sum(n for name, n in counts.items() if out_types[name] == t) for t in types}
    full = {t for t in types if used[t] >= free[t]}
    names = [j.name for j in flexible]
    rivals = _rivals(names, types, speed, out_types, counts)
    why = {name: _why(speed[i], types, types.index(out_types[name]), full, rivals)
           for i, name in enumerate(names) if name in out_types}
    return TypeChoice(out_types, counts, why)


def calm_horizon(flexible: Sequence[Job], free: Mapping[str, int]) -> float:
    """How long a change made now is likely to stand before another job contends for its
    GPUs: while no flexible job waits and some of their GPUs are idle, the time since the
    last of them came (the youngest one's age), as an estimate of the time until the next
    comes; 0 (the charge as before) while the cluster is contested."""
    if not flexible or any(job.current_workers <= 0 for job in flexible):
        return 0.0
    if sum(job.current_workers for job in flexible) >= sum(free.values()):
        return 0.0
    return min(job.running_seconds + job.waiting_seconds for job in flexible)


def _configurations(job: Job, shapes: Mapping[str, TypeShape],
                    ratios: Mapping[tuple[str, str], float], unknown: Mapping[str, float],
                    speed: np.ndarray, types: Sequence[str]) -> list[tuple[str, int, float]]:
    """(type, GPUs, goodput) of every configuration `job` may take; fills `speed` (its
    goodput on one GPU of each type it accepts)."""
    out = []
    for t in accepted(job, types):
        curve = goodput_curve(job, t, shapes[t], ratios, unknown[t])
        if len(curve) > 1:
            speed[types.index(t)] = curve[1]
        configs = set(sia_configs(shapes[t]))
        if t == job.gpu_type and job.current_workers > 0:
            configs.add(job.current_workers)
        out.extend((t, n, float(curve[n])) for n in sorted(configs)
                   if job.min_workers <= n < len(curve) and curve[n] > 0)
    return out


def _rivals(names: Sequence[str], types: Sequence[str], speed: np.ndarray,
            chosen: Mapping[str, str], counts: Mapping[str, int]
            ) -> dict[tuple[int, int], tuple[float, str]]:
    """For each pair of types (f, a): among the jobs given GPUs of f, the one that gains most
    there over a, with its gain."""
    on = np.array([types.index(chosen[n]) if counts.get(n) else -1 for n in names])
    out = {}
    for f in range(len(types)):
        for a in range(len(types)):
            mask = (on == f) & (speed[:, a] > 0)
            if f != a and mask.any():
                gains = np.where(mask, speed[:, f] / np.where(mask, speed[:, a], 1.0), -np.inf)
                j = int(np.argmax(gains))
                out[(f, a)] = (float(gains[j]), names[j])
    return out


def _why(own: np.ndarray, types: Sequence[str], at: int, full: set[str],
         rivals: Mapping[tuple[int, int], tuple[float, str]]) -> str:
    """"on t4: a100 is full and this job gains 1.3x there, less than resnet-7's 3.1x"."""
    fastest = int(np.argmax(own))
    if fastest == at or not own[at] > 0:
        others = [own[at] / s for ti, s in enumerate(own) if ti != at and s > 0]
        gain = f", {min(others):.1f}x its speed on the next best" if others else ""
        return f"on {types[at]}: its fastest type{gain}"
    gain = own[fastest] / own[at]
    rival = rivals.get((fastest, at))
    than = f", less than {rival[1]}'s {rival[0]:.1f}x" if rival else ""
    busy = "is full" if types[fastest] in full else "is not worth a restart"
    return (f"on {types[at]}: {types[fastest]} {busy} and this job gains {gain:.1f}x "
            f"there{than}")
