"""Statistical efficiency and rate of progress (SIMULATION.md §3).

Progress is counted in "M0-equivalent iterations". The boundary of epoch k is
the same whatever batch a job uses (Profile.boundaries); a job at effective
batch B on placement P advances at r = gain / T progress units per second,
where gain = (var + sqr) / (var / s + sqr), s = B / M0, and T is the step time.
"""

from __future__ import annotations

import functools

from voda.sim.profiles import Profile, between, bracket, load_profile
from voda.sim.throughput import BatchSplit, step_time


@functools.cache
def grad_stats(profile_name: str, batch_size: int, epoch: int) -> tuple[float, float]:
    """(grad_sqr, grad_var) during `epoch`, linear in the batch between validated files."""
    profile = load_profile(profile_name)
    lower, upper = bracket(profile, batch_size)
    e = min(epoch, len(lower.grad_sqr) - 1, len(upper.grad_sqr) - 1)
    return (between(lower, upper, batch_size, lower.grad_sqr[e], upper.grad_sqr[e]),
            between(lower, upper, batch_size, lower.grad_var[e], upper.grad_var[e]))


def gain(profile: Profile, batch_size: int, epoch: int) -> float:
    return _gain(profile.name, profile.init_batch_size, batch_size, epoch)


def _gain(profile_name: str, init_batch_size: int, batch_size: int, epoch: int) -> float:
    sqr, var = grad_stats(profile_name, batch_size, epoch)
    scale = batch_size / init_batch_size
    return (var + sqr) / (var / scale + sqr)


@functools.cache
def gains(profile_name: str, init_batch_size: int, batch_size: int, epochs: int
          ) -> tuple[float, ...]:
    """`gain` at epochs 0 .. epochs - 1: a job's statistical efficiency for as long as its
    batch stays (shared by every job of the profile at that batch)."""
    return tuple(_gain(profile_name, init_batch_size, batch_size, e) for e in range(epochs))


def rate(profile: Profile, placement: tuple[int, ...], split: BatchSplit, epoch: int) -> float:
    """Progress units per second."""
    g = gain(profile, split.effective_batch, epoch)
    return g / step_time(profile, placement, split)
