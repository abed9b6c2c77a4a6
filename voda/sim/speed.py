"""Seconds per epoch of a profiled application on a placement, for emulated backends.

The default batch is the profile's initial batch M0 per GPU, capped at the
profile's maximum global batch, split as in SIMULATION.md §2. An epoch is
M0 x P_1 samples (the implied dataset size), so

    epoch_seconds = samples per epoch / throughput (samples per second).
"""

from __future__ import annotations

from voda.sim import profiles
from voda.sim.throughput import throughput


def profile_names() -> list[str]:
    """Names of the available application profiles."""
    return profiles.profile_names()


def default_batch(profile: profiles.Profile, replicas: int) -> int:
    """Global batch at the default per-GPU batch M0, capped at the maximum batch."""
    return min(profile.init_batch_size * replicas, profile.max_batch_size)


def epoch_seconds(profile: str, gpus_per_node: tuple[int, ...]) -> float:
    """Seconds per epoch of `profile` on `gpus_per_node` (e.g. (4, 2): 2 nodes, 6 GPUs).

    Raises ValueError naming the profile when it is unknown, or when the
    placement holds no GPU.
    """
    try:
        p = profiles.load_profile(profile)
    except profiles.ProfileError as exc:
        raise ValueError(str(exc)) from None
    placement = tuple(int(c) for c in gpus_per_node if c)
    if not placement or any(c < 0 for c in gpus_per_node):
        raise ValueError(
            f"profile {profile!r}: placement {tuple(gpus_per_node)} must hold at least one GPU"
        )
    replicas = sum(placement)
    return p.samples_per_epoch / throughput(p, placement, default_batch(p, replicas))
