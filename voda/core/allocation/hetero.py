"""Heterogeneity policies: the GPU type each job that accepts several runs on.

A job that names several acceptable GPU types (`Job.gpu_types`; ANY_GPU_TYPE: every type)
runs on one type at a time. Before the per-type decision (voda.core.plan.decide, one
sub-scheduler per type, unchanged) a policy gives each such job a type, and for Sia and
Pollux also its GPU count. Jobs that name one type are left as they are, so with no
flexible job the decision is today's, exactly.

- `voda` (default): each job's type and count chosen together in one program
  (voda.core.allocation.hetero_voda): over Sia's configurations, the (type, count) per job
  that maximises the sum of each job's speed-up times heSRPT's weight for its rank by
  remaining time (shorter jobs weigh more, none nothing), a change of type or count, or
  a stop, costing Voda's restart charge; a job whose restart is under way keeps its
  configuration. Where the per-type algorithm is not Voda, that
  algorithm sets the counts on the types chosen.
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

from voda.core.allocation.hetero_models import (
    TypeShape,
    accepted,
    type_shapes,
)
from voda.core.allocation.voda import RestartCharge, restart_charge
from voda.core.model import Cluster, Job

HETERO_POLICIES = ("voda", "isolated", "sia", "pollux")
DEFAULT_HETERO_POLICY = "voda"
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
    from voda.core.allocation.hetero_voda import voda_choice

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


# ----- Voda's inputs: a job's remaining work and what moving it costs -----------------------
def remaining_work(job: Job, best_one_gpu: float) -> float:
    """Samples (M0-equivalent) the job has left, from its epochs and epoch length; an hour
    per epoch at its best one-GPU goodput when it reports no epoch length."""
    epochs = max(job.remaining_epochs, 1e-3)
    samples = job.goodput.epoch_samples if job.goodput is not None else None
    if samples:
        return epochs * samples
    return epochs * UNKNOWN_EPOCH_SECONDS * max(best_one_gpu, 1e-9)


def move_charge(job: Job, penalty: float, calm: float = 0.0) -> RestartCharge:
    """What moving a running job to another type costs it: `penalty` (and the backend's
    rescale delay) over its remaining time there; where its own restart cost is known,
    Voda's charge for that cost (voda.core.allocation.voda.restart_charge: a horizon
    grown with the cost, and the share of its life already lost to restarts). A `calm`
    horizon longer than that cost's (hetero_voda.calm_horizon: while no job waits for
    GPUs that sit idle) spreads the cost over it instead."""
    if job.restart_cost <= 0:
        return RestartCharge(penalty + job.rescale_delay, math.inf)
    charge = restart_charge(job, penalty, VODA_HORIZON)
    if calm > charge.horizon:
        return RestartCharge(charge.penalty, calm, charge.lost)
    return charge
