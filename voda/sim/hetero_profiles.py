"""Which profile a job's speed follows on a GPU type.

A job of application `<model>` placed on nodes of GPU type `<type>` runs at the profile
`<model>@<type>` when that type was measured for it (voda.sim.profiles), and at `<model>`
otherwise: a cluster whose nodes name no measured type runs exactly as before.
"""

from __future__ import annotations

import functools

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
