"""Run one workload under several algorithms, each in its own process."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from voda.core.allocation import registry
from voda.core.allocation.hetero import check_policy
from voda.core.model import DEFAULT_GPU_TYPE
from voda.sim.backend import check_layout_speed
from voda.sim.cluster_file import SimCluster, parse_cluster
from voda.sim.isolated import with_job_details
from voda.sim.presets import apply_preset
from voda.sim.queues import load_queue_file
from voda.sim.report import SimResult
from voda.sim.runner import SimSettings, simulate
from voda.sim.throughput import warm
from voda.sim.workloads import Workload, jitter_arrivals, load_workload, with_gpu_type

T = TypeVar("T")
MAX_RESTART_SCALE = 10.0  # RunRequest.restart_scale: ten times the restore time at most


@dataclass(frozen=True)
class RunRequest:
    """Everything one simulation needs, as plain values (so it crosses process boundaries)."""

    workload: str
    cluster: str
    algorithm: str
    rigid: bool = False
    preset: str | None = None
    placement: str | None = None
    penalty: float | None = None
    interval: float | None = None
    layout_speed: str = "actual"
    jitter: float = 0.0  # arrivals moved by up to this many seconds (see jitter_arrivals)
    seed: int = 0
    # Algorithm knobs, (name, value) pairs; they override the preset's.
    params: tuple[tuple[str, Any], ...] = ()
    gpu_type: str | None = None  # the GPU type of the jobs that name none
    until: float | None = None  # stop at this simulated time (jobs may be left unfinished)
    job_model: str | None = None  # voda.sim.workloads.JOB_MODELS; None: rigid or elastic
    progress_decisions: bool = False  # SimSettings.progress_decisions
    arrival_decisions: bool | None = None  # SimSettings.arrival_decisions (None: the policy's)
    hetero_policy: str | None = None  # SimSettings.hetero_policy (None: its default)
    queues: str | None = None  # a queue file (voda.sim.queues); None: no team queues
    # Every restart costs this times what the settings charge (and tell the policies): a
    # what-if for faster or slower checkpoint restores (MAX_RESTART_SCALE at most).
    restart_scale: float = 1.0


def settings_for(request: RunRequest) -> SimSettings:
    settings = apply_preset(
        request.preset, request.algorithm,
        placement=request.placement, penalty=request.penalty, interval=request.interval,
        params=dict(request.params),
    )
    settings.layout_speed = request.layout_speed
    if request.hetero_policy is not None:
        settings.hetero_policy = check_policy(request.hetero_policy)
    settings.until = request.until
    settings.progress_decisions = request.progress_decisions
    settings.arrival_decisions = request.arrival_decisions
    settings.queues = load_queue_file(request.queues) if request.queues else None
    return scaled_restarts(settings, request.restart_scale)


def scaled_restarts(settings: SimSettings, scale: float) -> SimSettings:
    """`settings` with every restart penalty, charged or told, `scale` times as long."""
    settings.penalty *= scale
    settings.penalties = {k: v * scale for k, v in settings.penalties.items()}
    settings.told_penalties = {k: v * scale for k, v in settings.told_penalties.items()}
    return settings


def workload_for(request: RunRequest) -> Workload:
    workload = load_workload(request.workload, rigid=request.rigid, job_model=request.job_model)
    if request.gpu_type is not None:
        workload = with_gpu_type(workload, request.gpu_type)
    return jitter_arrivals(workload, request.jitter, request.seed)


def run_one(request: RunRequest, progress: Callable[[float], None] | None = None) -> SimResult:
    cluster = parse_cluster(request.cluster)
    result = simulate(workload_for(request), cluster, settings_for(request), progress=progress)
    return replace(result, jitter=request.jitter, seed=request.seed)


def with_details(request: RunRequest, result: SimResult) -> SimResult:
    """`result` with its jobs' run times alone and fair shares (voda.sim.isolated). Run
    in one process for all results: the jobs' run times alone are cached there."""
    return with_job_details(result, workload_for(request), parse_cluster(request.cluster),
                            settings_for(request).penalty)


def check_gpu_types(workload: Workload, cluster: SimCluster) -> None:
    """Refuse jobs whose GPU type the cluster never has: they could never run."""
    types = {n.gpu_type for n in cluster.nodes} | {e.node.gpu_type for e in cluster.events}
    several = len({n.gpu_type for n in cluster.nodes}) > 1  # jobs naming none accept any
    named = {spec.gpu_type for spec in workload.jobs if not spec.gpu_types
             and not (several and spec.gpu_type == DEFAULT_GPU_TYPE)}
    missing = sorted(named - types)
    if missing:
        count = sum(1 for spec in workload.jobs if spec.gpu_type in missing)
        raise ValueError(
            f"{count} jobs ask for GPU type {', '.join(map(repr, missing))} but the cluster "
            f"has only {', '.join(map(repr, sorted(types)))}: give the jobs a gpu_type, or "
            "put the jobs that name none on one of the cluster's types with --gpu-type NAME"
        )


def check_request(request: RunRequest) -> None:
    """Fail early (ValueError and friends) on inputs every run would refuse."""
    workload = workload_for(request)
    check_gpu_types(workload, parse_cluster(request.cluster))
    if not registry.is_known(request.algorithm):
        raise registry.UnknownAlgorithm(request.algorithm, registry.available())
    settings = apply_preset(request.preset, request.algorithm, placement=request.placement,
                            penalty=request.penalty, interval=request.interval,
                            params=dict(request.params))
    registry.create(request.algorithm, settings.algorithm_params)  # validates the knobs
    if request.until is not None and not request.until > 0:
        raise ValueError(f"until: must be a positive number of seconds, got {request.until}")
    if request.placement is not None:
        from voda.core.placement.registry import get_placer

        get_placer(request.placement)
    check_layout_speed(request.layout_speed)
    if request.hetero_policy is not None:
        check_policy(request.hetero_policy)
    if not request.jitter >= 0:
        raise ValueError(f"jitter: must be a number of seconds >= 0, got {request.jitter}")
    if not 0 <= request.restart_scale <= MAX_RESTART_SCALE:
        raise ValueError(f"restart_scale: must be 0 to {MAX_RESTART_SCALE:g}, got "
                         f"{request.restart_scale}")
    if request.penalty is not None and request.penalty < 0:
        raise ValueError(f"penalty: must not be negative, got {request.penalty}")
    if request.interval is not None and request.interval <= 0:
        raise ValueError(f"interval: must be positive, got {request.interval}")


def run_many(
    requests: Sequence[RunRequest],
    workers: int | None = None,
    done: Callable[[RunRequest, SimResult], None] | None = None,
) -> list[SimResult]:
    """Run the requests in parallel processes; results come back in request order."""
    out: dict[int, SimResult] = {}
    for i, result in completed(run_one, requests, workers):
        out[i] = result
        if done is not None:
            done(requests[i], result)
    return [out[i] for i in range(len(requests))]


def completed(task: Callable[[RunRequest], T], requests: Sequence[RunRequest],
              workers: int | None = None) -> Iterator[tuple[int, T]]:
    """(index, task(request)) for each request as it finishes, on `workers` processes
    (default: one per core). One request or one worker: in this process, in order."""
    if len(requests) == 1 or workers == 1:
        for i, r in enumerate(requests):
            yield i, task(r)
        return
    seen = set()
    for r in requests:  # build the throughput tables once; forked workers inherit them
        kind = (r.workload, r.rigid, r.job_model, r.gpu_type)
        if kind not in seen:
            seen.add(kind)
            warm(workload_for(replace(r, jitter=0.0)))
    workers = workers or min(len(requests), os.cpu_count() or 1)
    # The objects made so far (modules, throughput tables) stay out of the collector's
    # passes while the workers run: a forked worker that walked them would write to, and
    # so copy, the memory pages it shares with this process.
    gc.freeze()
    try:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(task, r): i for i, r in enumerate(requests)}
            for future in as_completed(futures):
                yield futures[future], future.result()
    finally:
        gc.unfreeze()
