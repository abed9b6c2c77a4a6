"""Which profile a job's speed follows on a GPU type.

A job of application `<model>` placed on nodes of GPU type `<type>` runs at the profile
`<model>@<type>` when that type was measured for it (voda.sim.profiles), and at `<model>`
otherwise: a cluster whose nodes name no measured type runs exactly as before.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from voda.sim.profiles import Profile, load_profile, typed_dir


@functools.cache
def typed_profile_name(model: str, gpu_type: str) -> str:
    """`<model>@<gpu_type>` when that type was measured for `model`, else `model`."""
    base = model.partition("@")[0]
    return f"{base}@{gpu_type}" if typed_dir(base, gpu_type) is not None else model


def typed_profile(model: str, gpu_type: str) -> Profile:
    return load_profile(typed_profile_name(model, gpu_type))


def measured_types(model: str, gpu_types: list[str]) -> list[str]:
    """The types among `gpu_types` that `model` was measured on."""
    return [t for t in gpu_types if typed_profile_name(model, t) != model]


def one_gpu_speed(model: str, gpu_type: str) -> float | None:
    """`model`'s speed on one GPU of `gpu_type` as Sia's artifact ranks types with it: the
    largest per-GPU batch over the largest step time among its one-GPU profile rows
    (samples per second at the edges of what was measured); None where the type was not
    measured for it."""
    if not measured_types(model, [gpu_type]):
        return None
    rows = [r for r in typed_profile(model, gpu_type).placements if r.num_replicas == 1]
    if not rows:
        return None
    return max(r.local_bsz for r in rows) / max(r.step_time for r in rows)


def profiled_type_speeds(models: Mapping[str, str], gpu_types: list[str]
                         ) -> dict[str, dict[str, float]]:
    """{category: {type: one_gpu_speed}} for each category's profile (`models`: category ->
    profile name) on the types among `gpu_types` measured for it."""
    out: dict[str, dict[str, float]] = {}
    for category, model in models.items():
        speeds = {t: v for t in gpu_types if (v := one_gpu_speed(model, t)) is not None}
        if speeds:
            out[category] = speeds
    return out
