"""Heterogeneity policies: the GPU type each job that accepts several runs on.

A job that names several acceptable GPU types (`Job.gpu_types`; ANY_GPU_TYPE: every type)
runs on one type at a time. Before the per-type decision (voda.core.plan.decide, one
sub-scheduler per type, unchanged) a policy gives each such job a type, and for Sia and
Pollux also its GPU count. Jobs that name one type are left as they are, so with no
flexible job the decision is today's, exactly.

- `voda` (default): each job's type and count are chosen together, from its goodput
  curve on every type it accepts (voda.core.allocation.hetero_models), by pricing each
  type's GPUs: a job takes the (type, count) whose value less its GPUs' price is largest,
  and the prices rise until no type is asked for more GPUs than it has (a Lagrangian
  relaxation of the joint problem; exact when the prices clear, near-exact otherwise, and
  a few hundred vectorised passes at 1,000 jobs). A job's value on n GPUs of type t is
  the share of its remaining work done per second there, goodput_t(n) / remaining work:
  the jobs that gain most from a fast type, relative to their length, get it. Moving a
  running job to another type is a restart: its value there counts for
  (1 - penalty / T), T its remaining time there, so a job is moved only for more than a
  restart costs it (its own restart cost where the backend knows it, Job.restart_cost).
  A job whose restart is under way (Job.restoring_seconds) stays on its type and count
  until it is done. A job priced out everywhere waits on the type where it comes closest
  to being worth a GPU. The type's own algorithm (Voda's, usually) then gives the counts.
- `isolated`: today's behaviour: a job keeps the first type it was given (the accepted
  type with the most GPUs not yet spoken for when it first came), and never moves.
- `sia`: Sia (SOSP'23) as its artifact decides (voda.core.allocation.sia).
- `pollux`: Pollux unaware of types, then "most GPUs of one type": Pollux's counts over the
  whole cluster, each job (largest first) on the accepted type with the most GPUs free,
  at what fits there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from voda.core.allocation.counts import packs
from voda.core.allocation.hetero_models import (
    TypeShape,
    accepted,
    goodput_curve,
    mean_type_speed,
    type_ratios,
    type_shapes,
)
from voda.core.allocation.voda import RestartCharge, restart_charge
from voda.core.model import Cluster, Job

HETERO_POLICIES = ("voda", "isolated", "sia", "pollux")
DEFAULT_HETERO_POLICY = "voda"
PRICE_ROUNDS = 4  # Gauss-Seidel rounds over the types' prices
PRICE_STEPS = 40  # bisection steps per price (a 2^-40 relative precision)
VODA_HORIZON = 240.0  # Voda's default restart horizon (Voda.horizon)
UNKNOWN_EPOCH_SECONDS = 3600.0  # remaining time per epoch assumed for a job that says nothing


@dataclass(frozen=True)
class TypeChoice:
    """A policy's choice: each flexible job's type, the counts where the policy sets them
    (Sia, Pollux; None: the type's algorithm does), and why each type was chosen."""

    types: Mapping[str, str] = field(default_factory=dict)
    counts: Mapping[str, int] | None = None
    why: Mapping[str, str] = field(default_factory=dict)


def check_policy(policy: str) -> str:
    if policy not in HETERO_POLICIES:
        raise ValueError(
            f"hetero_policy: must be one of {', '.join(HETERO_POLICIES)}, got {policy!r}")
    return policy


def flexible_jobs(jobs: Sequence[Job]) -> list[Job]:
    return [j for j in jobs if j.gpu_types]


def choose_types(policy: str, jobs: Sequence[Job], cluster: Cluster, penalty: float = 30.0
                 ) -> TypeChoice:
    """The `policy`'s choice for the flexible jobs among `jobs` (in submit order)."""
    check_policy(policy)
    flexible = sorted(flexible_jobs(jobs), key=lambda j: j.sort_key)
    shapes = type_shapes(cluster)
    if not flexible or not shapes:
        return TypeChoice()
    free = _free_for_flexible(jobs, shapes)
    if policy == "isolated":
        return _isolated(flexible, shapes, free)
    if policy == "sia":
        from voda.core.allocation.sia import sia_choice

        return sia_choice(flexible, shapes, free, penalty)
    if policy == "pollux":
        from voda.core.allocation.hetero_pollux import pollux_choice

        return pollux_choice(flexible, shapes, free, penalty)
    return voda_choice(flexible, shapes, free, penalty)


def _free_for_flexible(jobs: Sequence[Job], shapes: Mapping[str, TypeShape]) -> dict[str, int]:
    """Each type's GPUs less the minimum of every job that names only that type."""
    free = {t: s.capacity for t, s in shapes.items()}
    for job in jobs:
        if not job.gpu_types and job.gpu_type in free:
            free[job.gpu_type] = max(0, free[job.gpu_type] - job.min_workers)
    return free


def _isolated(flexible: Sequence[Job], shapes: Mapping[str, TypeShape],
              free: Mapping[str, int]) -> TypeChoice:
    left = dict(free)
    types: dict[str, str] = {}
    why: dict[str, str] = {}
    for job in flexible:
        options = accepted(job, shapes)
        if not options:
            continue
        if job.gpu_type in options:
            chosen = job.gpu_type
            why[job.name] = f"on {chosen}: types isolated, it stays on the type it was given"
        else:
            chosen = max(options, key=lambda t: (left[t], t))
            why[job.name] = (f"on {chosen}: types isolated, the accepted type with the most "
                             f"GPUs not spoken for ({left[chosen]}) when it came")
        left[chosen] = max(0, left[chosen] - job.min_workers)
        types[job.name] = chosen
    return TypeChoice(types, None, why)


# ----- Voda: type and count together, by pricing each type's GPUs ---------------------------
@dataclass(frozen=True)
class _Options:
    """Every flexible job's (type, count) options: value and GPUs, -inf where not allowed."""

    names: list[str]
    types: list[str]
    counts: np.ndarray  # (K,) the count grid
    value: np.ndarray  # (J, T, K)
    speed: np.ndarray  # (J, T) goodput on one GPU (0: not accepted)


def remaining_work(job: Job, best_one_gpu: float) -> float:
    """Samples (M0-equivalent) the job has left, from its epochs and epoch length; an hour
    per epoch at its best one-GPU goodput when it reports no epoch length."""
    epochs = max(job.remaining_epochs, 1e-3)
    samples = job.goodput.epoch_samples if job.goodput is not None else None
    if samples:
        return epochs * samples
    return epochs * UNKNOWN_EPOCH_SECONDS * max(best_one_gpu, 1e-9)


def _options(flexible: Sequence[Job], shapes: Mapping[str, TypeShape], penalty: float
             ) -> _Options:
    types = sorted(shapes)
    ratios = type_ratios(flexible)
    unknown = mean_type_speed(ratios, types)
    curves = [{t: goodput_curve(j, t, shapes[t], ratios, unknown[t])
               for t in accepted(j, types)} for j in flexible]
    top = max([len(c) - 1 for per_job in curves for c in per_job.values()] + [1])
    grid = sorted({n for t in types for n in np.flatnonzero(packs(top, shapes[t].per_node))
                   if n > 0} | {j.current_workers for j in flexible if j.current_workers > 0}
                  | {j.min_workers for j in flexible})
    counts = np.array([n for n in grid if n <= top] or [1])
    value = np.full((len(flexible), len(types), len(counts)), -np.inf)
    speed = np.zeros((len(flexible), len(types)))
    for i, (job, per_type) in enumerate(zip(flexible, curves, strict=True)):
        best = max((float(c[1]) for c in per_type.values() if len(c) > 1), default=0.0)
        work = remaining_work(job, best)
        running = job.current_workers > 0
        charge = move_charge(job, penalty)
        held = running and job.restoring_seconds > 0  # mid-restart: it stays as it is
        for ti, t in enumerate(types):
            curve = per_type.get(t)
            if curve is None or len(curve) < 2:
                continue
            speed[i, ti] = curve[1]
            cap = len(curve) - 1
            allowed = packs(cap, shapes[t].per_node)
            if running and t == job.gpu_type and job.current_workers <= cap:
                allowed[job.current_workers] = True
            for k, n in enumerate(counts):
                if n > cap or n < job.min_workers or not allowed[n] or not curve[n] > 0:
                    continue
                if held and (t, n) != (job.gpu_type, job.current_workers):
                    continue
                v = curve[n] / work
                if running and t != job.gpu_type:  # a move is a restart
                    v *= max(0.0, 1.0 - float(charge.share(np.array(1.0 / v))))
                value[i, ti, k] = v
    return _Options([j.name for j in flexible], types, counts, value, speed)


def move_charge(job: Job, penalty: float) -> RestartCharge:
    """What moving a running job to another type costs it: `penalty` (and the backend's
    rescale delay) over its remaining time there; where its own restart cost is known,
    Voda's charge for that cost (voda.core.allocation.voda.restart_charge: a horizon
    grown with the cost, and the share of its life already lost to restarts)."""
    if job.restart_cost <= 0:
        return RestartCharge(penalty + job.rescale_delay, math.inf)
    return restart_charge(job, penalty, VODA_HORIZON)


def _pick(opts: _Options, prices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each job's best (type, count index) at `prices` and its surplus (value - price)."""
    surplus = opts.value - prices[None, :, None] * opts.counts[None, None, :]
    flat = surplus.reshape(len(opts.names), -1)
    best = np.argmax(flat, axis=1)
    t, k = np.divmod(best, len(opts.counts))
    return t, k, flat[np.arange(len(best)), best]


def _demand(opts: _Options, prices: np.ndarray) -> np.ndarray:
    t, k, s = _pick(opts, prices)
    taken = s > 0
    return np.bincount(t[taken], weights=opts.counts[k[taken]], minlength=len(opts.types))


def clearing_prices(opts: _Options, capacity: np.ndarray) -> np.ndarray:
    """Per-GPU prices at which no type is asked for more than `capacity` GPUs: each price in
    turn, the lowest that clears its type given the others (bisection), for a few rounds."""
    prices = np.zeros(len(opts.types))
    finite = opts.value[np.isfinite(opts.value)]
    if finite.size == 0:
        return prices
    high = float(finite.max()) * 2 + 1e-12
    for _ in range(PRICE_ROUNDS):
        changed = False
        for ti in range(len(opts.types)):
            trial = prices.copy()
            trial[ti] = 0.0
            if _demand(opts, trial)[ti] <= capacity[ti]:
                new = 0.0
            else:
                lo, hi = 0.0, high
                for _ in range(PRICE_STEPS):
                    mid = (lo + hi) / 2
                    trial[ti] = mid
                    if _demand(opts, trial)[ti] <= capacity[ti]:
                        hi = mid
                    else:
                        lo = mid
                new = hi
            if not math.isclose(new, prices[ti], rel_tol=1e-6, abs_tol=1e-15):
                changed = True
            prices[ti] = new
        if not changed:
            break
    return prices


def voda_choice(flexible: Sequence[Job], shapes: Mapping[str, TypeShape],
                free: Mapping[str, int], penalty: float) -> TypeChoice:
    opts = _options(flexible, shapes, penalty)
    capacity = np.array([free[t] for t in opts.types], dtype=float)
    prices = clearing_prices(opts, capacity)
    t_idx, _, _ = _pick(opts, prices)
    types: dict[str, str] = {}
    for i, job in enumerate(flexible):
        if not np.isfinite(opts.value[i]).any():
            continue  # accepts no type the cluster has: it keeps its own and waits
        types[job.name] = opts.types[int(t_idx[i])]
    why = {name: _why(name, i, opts, types, prices) for i, name in enumerate(opts.names)
           if name in types}
    return TypeChoice(types, None, why)


def _why(name: str, i: int, opts: _Options, types: Mapping[str, str], prices: np.ndarray
         ) -> str:
    """"on t4: a100 is in demand and this job gains 1.3x there, less than resnet-7's 3.1x"."""
    chosen = opts.types.index(types[name])
    speed = opts.speed[i]
    fastest = int(np.argmax(speed))
    if fastest == chosen or not speed[chosen] > 0:
        others = [speed[chosen] / s for ti, s in enumerate(speed) if ti != chosen and s > 0]
        gain = f", {min(others):.1f}x its speed on the next best" if others else ""
        return f"on {opts.types[chosen]}: its fastest type{gain}"
    gain = speed[fastest] / speed[chosen]
    rivals = [(opts.speed[j, fastest] / opts.speed[j, chosen], opts.names[j])
              for j in range(len(opts.names))
              if types.get(opts.names[j]) == opts.types[fastest] and opts.speed[j, chosen] > 0]
    rival = (f", less than {max(rivals)[1]}'s {max(rivals)[0]:.1f}x" if rivals else "")
    busy = "is full" if prices[fastest] > 0 else "is not worth a restart"
    return (f"on {opts.types[chosen]}: {opts.types[fastest]} {busy} and this job gains "
            f"{gain:.1f}x there{rival}")
