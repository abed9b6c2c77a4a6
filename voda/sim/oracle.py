"""The simulator's truth about a fixed-batch job, for oracle baselines (voda.core.oracle).

Step times come from the same profiles the simulated jobs run on, at the split
the Pollux artifact's Optimus+Oracle predicts with (GPUs packed 4 per node, at
least one accumulation step on one GPU); step counts from the `iteration` column
of the validation files, linear in the batch between validated sizes
(SIMULATION.md §6).
"""

from __future__ import annotations

import functools

from voda.core.oracle import StepOracle
from voda.sim.profiles import Profile, between, bracket, ceil_div, load_profile
from voda.sim.throughput import BatchSplit, packed_placement, step_time
from voda.sim.workloads import MAX_PROFILED_GPUS, JobSpec


def step_oracle(spec: JobSpec) -> StepOracle | None:
    """The oracle of a profiled job with a fixed global batch; None for any other job."""
    if spec.profile is None or spec.batch_size is None or spec.adaptive:
        return None
    gpus = min(spec.max_workers, MAX_PROFILED_GPUS)
    return _oracle(spec.profile, spec.batch_size, gpus, spec.epochs)


@functools.cache
def _oracle(profile_name: str, batch: int, gpus: int, epochs: int) -> StepOracle:
    profile = load_profile(profile_name)
    steps = tuple(step_time(profile, packed_placement(n), predicted_split(profile, batch, n))
                  for n in range(1, gpus + 1))
    return StepOracle(steps, tuple(iterations(profile, batch, k) for k in range(epochs)))


def predicted_split(profile: Profile, batch: int, replicas: int) -> BatchSplit:
    """The split of SIMULATION.md §2, with an accumulation step forced on one GPU."""
    local = ceil_div(batch, replicas)
    accum = ceil_div(local, profile.max_local_bsz) - 1
    if replicas == 1:
        accum = max(1, accum)
    atomic = ceil_div(local, accum + 1)
    atomic = min(atomic, int(profile.max_batch_size / (replicas * (accum + 1))))
    return BatchSplit(atomic, accum, replicas)


def iterations(profile: Profile, batch: int, epoch: int) -> float:
    """Optimiser steps by the end of `epoch` (0-based) at global batch `batch`."""
    lower, upper = bracket(profile, batch)
    return between(lower, upper, batch, lower.iteration[epoch], upper.iteration[epoch])
