"""Named settings. `pollux` reproduces the Pollux OSDI'21 artifact's simulator; `sia` is
`pollux` with the Sia SOSP'23 artifact's calibration (each application's step times
slowed by its factor, its own restart penalty; the policies told the costs its scheduler
was told): SIA_CALIBRATION, SIA_PENALTIES, SIA_TOLD_PENALTIES.

pollux: 60 s fixed scheduling rounds (the first decision at t = 60; a job is
first considered at the first multiple of 60 at or after its submission; a policy
that decides on arrival, Voda, also at arrivals between rounds: voda.sim.runner), a
30 s restart penalty, epoch crossings rounded to whole seconds, most-free
placement of newly started jobs in the policy's queue order, and Tiresias
with the artifact's knobs: one threshold at 16 GPU-hours, no promotion, total
attained service (no promotion, so the service that places a job is its total),
queues ordered by entry (SIMULATION.md §4-5). Optimus places as the artifact's
Optimus does: a job whose count changes is placed afresh, fewest GPUs first
(§6). Pollux's jobs are packed, a job that grows (and restarts anyway) placed
afresh, every change at once (voda.core.placement.repack); a Pollux job left
spanning more nodes than it needs is gathered when its model says a restart pays
(the artifact's search scores each job at the nodes it really spans). Voda's jobs are
packed the same way, and when the jobs placed afresh need more whole nodes than are
free, one-node jobs kept on the emptiest nodes move into other nodes' free GPUs
(`free_whole_nodes`): Voda's own placement, not the artifact's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from voda.core.allocation import registry
from voda.core.allocation.pollux import Pollux
from voda.core.model import Job
from voda.core.placement.base import Placer
from voda.core.placement.most_free import make_most_free
from voda.core.placement.repack import make_repack
from voda.sim.runner import SimSettings

POLLUX_TIRESIAS_PARAMS: Mapping[str, Any] = {
    "queue_thresholds": (57600.0,),
    "starvation_knob": None,
    "queue_order": "queue_entry",
}

PRESETS = ("pollux", "sia")
# The Sia artifact's simulator (sia-simulator/simulator_config.py and applications.py):
# each application's step time times its calibration to the physical cluster, and its
# checkpoint-restore time as the restart penalty.
SIA_CALIBRATION: Mapping[str, float] = {
    "cifar10": 1.8, "imagenet": 1.2, "yolov3": 1.2, "bert": 1.2, "deepspeech2": 1.2, "ncf": 1.5}
SIA_PENALTIES: Mapping[str, float] = {
    "cifar10": 50.0, "deepspeech2": 25.0, "bert": 120.0, "yolov3": 80.0, "imagenet": 250.0,
    "ncf": 15.0}
# What the Sia artifact's scheduler is told a restart costs (sia-simulator/sia.py,
# get_restart_penalty: "measured on real physical cluster"), which the simulator hands the
# policies as each job's restart cost; the simulator charges SIA_PENALTIES.
SIA_TOLD_PENALTIES: Mapping[str, float] = {
    "cifar10": 30.0, "deepspeech2": 25.0, "bert": 120.0, "yolov3": 45.0, "imagenet": 250.0,
    "ncf": 30.0}


def algorithm_params(preset: str | None, algorithm: str) -> dict[str, Any]:
    if preset == "pollux" and algorithm == "Tiresias":
        return dict(POLLUX_TIRESIAS_PARAMS)
    return {}


def _policy_order(algorithm: str, params: Mapping[str, Any]):  # type: ignore[no-untyped-def]
    """New jobs are placed in the policy's serving order when it has one."""
    policy = registry.create(algorithm, params)
    order = getattr(policy, "order", None)
    if callable(order):
        def ordered(jobs: Sequence[Job]) -> list[Job]:
            return list(order(jobs))
        return ordered
    return None


def _pollux_placer(algorithm: str, params: Mapping[str, Any]) -> Placer:
    if algorithm == "Optimus":
        return make_most_free(keep_resized=False, fewest_first=True)
    if algorithm == "Pollux":
        policy = registry.create(algorithm, params)
        assert isinstance(policy, Pollux)
        return make_repack(simultaneous=True, consolidate_penalty=policy.restart_penalty)
    if algorithm == "Voda":
        return make_repack(simultaneous=True, free_whole_nodes=True)
    return make_most_free(_policy_order(algorithm, params))


def apply_preset(
    preset: str | None,
    algorithm: str,
    *,
    placement: str | None = None,
    penalty: float | None = None,
    interval: float | None = None,
    params: Mapping[str, Any] | None = None,
) -> SimSettings:
    """Settings for `algorithm` under `preset`; explicit options (and knobs) override it."""
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"preset: unknown {preset!r}; valid: {', '.join(PRESETS)}")
    params = {**algorithm_params(preset, algorithm), **(params or {})}
    settings = SimSettings(algorithm=algorithm, algorithm_params=params)
    if preset == "pollux":
        settings.fixed_rounds = True
        settings.integer_time = True
        settings.interval = 60.0
        settings.penalty = 30.0
        settings.placement = _pollux_placer(algorithm, params)
    if preset == "sia":  # the Pollux artifact's rounds and packing, Sia's calibration
        settings.fixed_rounds = True
        settings.integer_time = True
        settings.interval = 60.0
        settings.penalty = 30.0
        settings.calibration = dict(SIA_CALIBRATION)
        settings.penalties = dict(SIA_PENALTIES)
        settings.told_penalties = dict(SIA_TOLD_PENALTIES)
        settings.placement = _pollux_placer(algorithm, params)
    if placement is not None:
        settings.placement = placement
    if penalty is not None:
        settings.penalty = penalty
    if interval is not None:
        settings.interval = interval
    return settings
