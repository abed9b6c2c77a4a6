"""Replay a trace through a running `voda serve --backend emulated` and simulate the same jobs.

1. Start the real service on loopback (its own SQLite file, an administrator's token) with an
   emulated cluster `time_scale` times faster than the trace.
2. Submit every job over HTTP at its arrival time / `time_scale`, wait until every job has
   ended, and read its submit and finish times, allocation changes and counts from the API.
3. Simulate the same jobs (`voda.sim.workloads.as_emulated`: the emulated backend's job model)
   arriving when the service took them in, on the same clock: the rate limit and the
   arrivals in wall seconds, no restart charge (the emulated backend charges none), the same
   algorithm, knobs and placer.

With `job_model="adaptive"` the service runs the Pollux workload's own jobs instead
(batch-adaptive: `adaptive: true` in the job document; the emulated cluster runs the
simulator's job model in emulated time and the jobs report their goodput models), and the
twin is the simulator's adaptive job model on the trace's own clock (the service's job
counters are in emulated seconds, which are trace seconds).

Both sides then speak in trace seconds (wall seconds x `time_scale`). What differs and why:
docs/design/002-simulator.md, "Replayed through the service".
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from voda.core.allocation import registry
from voda.sim.cluster_file import parse_cluster
from voda.sim.report import JobResult, SimResult
from voda.sim.runner import SimSettings, simulate
from voda.sim.workloads import JobSpec, Workload, as_emulated, load_workload
from voda_testing.serve import ServeProcess, free_port

log = logging.getLogger(__name__)

MAX_JOBS = 320  # the largest built-in workload
MAX_GPUS = 256
MAX_TIME_SCALE = 10_000.0
MAX_TIMEOUT = 3600.0
ENDED = {"Completed", "Failed", "Canceled"}
ALLOCATION_CHANGES = {"start", "scale-in", "scale-out", "migrate", "halt"}
# The jobs the service is given: the emulated backend's epoch jobs (`as_emulated`), or the
# Pollux workloads' batch-adaptive jobs (voda.sim.workloads "adaptive").
REPLAY_JOB_MODELS = ("emulated", "adaptive")


class ReplayError(RuntimeError):
    pass


@dataclass(frozen=True)
class ReplaySettings:
    workload: str = "workload-1"
    jobs: int = 10  # the first N jobs of the workload
    cluster: str = "4x4"
    algorithm: str = "ElasticFIFO"
    params: Mapping[str, Any] = field(default_factory=dict)
    # The service runs this one instead (None: `algorithm`); the comparison must then fail.
    service_algorithm: str | None = None
    rigid: bool = False
    time_scale: float = 100.0  # trace seconds per wall second
    rate_limit: float = 60.0  # trace seconds between decisions (the simulator's --interval)
    step_interval: float = 0.05  # wall seconds between the service's scheduling steps
    placement: str = "topology"
    timeout: float = 600.0  # wall seconds for the whole run
    # The simulator decides on epoch reports too, as the service does (SimSettings).
    progress_decisions: bool = True
    job_model: str = "emulated"  # one of REPLAY_JOB_MODELS

    def check(self) -> None:
        """Bounds on everything a caller gives; ValueError naming the field."""
        if not 1 <= self.jobs <= MAX_JOBS:
            raise ValueError(f"jobs: must be 1..{MAX_JOBS}, got {self.jobs}")
        if not (math.isfinite(self.time_scale) and 0 < self.time_scale <= MAX_TIME_SCALE):
            raise ValueError(f"time_scale: must be in (0, {MAX_TIME_SCALE:g}], got "
                             f"{self.time_scale}")
        if not (math.isfinite(self.rate_limit) and 0 < self.rate_limit <= 86_400):
            raise ValueError(f"rate_limit: must be in (0, 86400] seconds, got {self.rate_limit}")
        if not (math.isfinite(self.step_interval) and 0.01 <= self.step_interval <= 5):
            raise ValueError(f"step_interval: must be in [0.01, 5] seconds, got "
                             f"{self.step_interval}")
        if not (math.isfinite(self.timeout) and 0 < self.timeout <= MAX_TIMEOUT):
            raise ValueError(f"timeout: must be in (0, {MAX_TIMEOUT:g}] seconds, got "
                             f"{self.timeout}")
        gpus = sum(n.gpus for n in parse_cluster(self.cluster).nodes)
        if gpus > MAX_GPUS:
            raise ValueError(f"cluster: at most {MAX_GPUS} GPUs, got {gpus}")
        for name in (self.algorithm, self.service_algorithm):
            if name is not None and not registry.is_known(name):
                raise ValueError(f"algorithm: unknown {name!r}; valid: "
                                 f"{', '.join(registry.available())}")
        registry.create(self.algorithm, dict(self.params))  # validates the knobs
        if self.job_model not in REPLAY_JOB_MODELS:
            raise ValueError(f"job_model: must be one of {', '.join(REPLAY_JOB_MODELS)}, got "
                             f"{self.job_model!r}")
        if self.rigid and self.job_model != "emulated":
            raise ValueError("rigid: only with the emulated job model (adaptive jobs size "
                             "themselves)")
        as_emulated(replay_workload(self))  # a known workload of profiled jobs, enough of them


@dataclass(frozen=True)
class ServiceJob:
    """One job as the service ran it; times in trace seconds from the replay's origin."""

    name: str
    submit: float
    finish: float | None
    status: str
    min_workers: int
    max_workers: int
    rescales: int
    migrations: int
    preemptions: int
    starts: int  # allocation changes from 0 workers
    completions: int  # transitions to Completed
    worker_counts: tuple[int, ...]  # every non-zero count it was given

    @property
    def jct(self) -> float | None:
        return None if self.finish is None else self.finish - self.submit


@dataclass(frozen=True)
class Replay:
    settings: ReplaySettings
    service: dict[str, ServiceJob]  # by trace name
    simulated: SimResult  # the matching simulation, in trace seconds
    wall_seconds: float
    # The longest the service went between two scheduling steps, in wall seconds (the upper
    # bound of its step-period histogram's highest bucket in use; 0: none measured).
    step_period: float = 0.0

    def simulated_jcts(self) -> dict[str, float | None]:
        return {j.name: j.jct for j in self.simulated.jobs}

    def relative_differences(self) -> dict[str, float]:
        """|service JCT - simulated JCT| / simulated JCT, per job both finished."""
        sim = self.simulated_jcts()
        out = {}
        for name, job in self.service.items():
            expected = sim.get(name)
            if job.jct is not None and expected:
                out[name] = abs(job.jct - expected) / expected
        return out

    def figures(self) -> dict[str, Any]:
        service = [j.jct for j in self.service.values() if j.jct is not None]
        sim_jcts = self.simulated_jcts()
        sim = [v for v in sim_jcts.values() if v is not None]
        by_job = self.relative_differences()
        diffs = sorted(by_job.values())
        worst = max(by_job, key=by_job.__getitem__, default=None)
        avg_service, avg_sim = _mean(service), _mean(sim)
        return {
            "algorithm": self.settings.algorithm,
            "jobs": len(self.service),
            "finished": len(service),
            "service_avg_jct": avg_service,
            "service_p99_jct": _p99(service),
            "sim_avg_jct": avg_sim,
            "sim_p99_jct": _p99(sim),
            "avg_ratio": avg_service / avg_sim if avg_sim else math.nan,
            "p99_ratio": _p99(service) / _p99(sim) if sim and _p99(sim) else math.nan,
            "median_rel_diff": statistics.median(diffs) if diffs else math.nan,
            "worst_rel_diff": diffs[-1] if diffs else math.nan,
            # The job furthest from its twin, and its JCT in the service and the simulator.
            "worst_job": worst,
            "worst_job_jct": ([self.service[worst].jct, sim_jcts[worst]]
                              if worst is not None else []),
            "service_rescales": sum(j.rescales for j in self.service.values()),
            "sim_rescales": self.simulated.rescales,
            "service_migrations": sum(j.migrations for j in self.service.values()),
            "sim_migrations": self.simulated.migrations,
            "service_preemptions": sum(j.preemptions for j in self.service.values()),
            "sim_preemptions": self.simulated.preemptions,
            "wall_seconds": self.wall_seconds,
            "longest_step_period": self.step_period,
        }


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def _p99(values: list[float]) -> float:
    return float(np.percentile(values, 99)) if values else math.nan


def replay_workload(settings: ReplaySettings) -> Workload:
    """The first `jobs` jobs of the workload (elastic, rigid or adaptive), in trace seconds."""
    model = "adaptive" if settings.job_model == "adaptive" else None
    loaded = load_workload(settings.workload, rigid=settings.rigid, job_model=model)
    if settings.jobs > len(loaded.jobs):
        raise ValueError(f"jobs: {settings.workload} has {len(loaded.jobs)} jobs, "
                         f"asked for {settings.jobs}")
    # The service refuses a job that could never run whole (max over the cluster's GPUs);
    # no decision can give a job more than the cluster has, so both sides get the cap.
    capacity = sum(n.gpus for n in parse_cluster(settings.cluster).nodes)
    jobs = tuple(replace(s, max_workers=min(s.max_workers, capacity),
                         preferred_workers=None if s.preferred_workers is None else min(
                             s.preferred_workers, capacity))
                 for s in loaded.jobs[:settings.jobs])
    return Workload(loaded.source, jobs)


def job_document(spec: JobSpec) -> dict[str, Any]:
    """The compact Voda spec the service is given for a trace job."""
    assert spec.profile is not None
    document: dict[str, Any] = {
        "name": spec.name, "command": f"train {spec.profile}", "profile": spec.profile,
        "epochs": spec.epochs, "min": spec.min_workers, "max": spec.max_workers,
        "preferred": spec.preferred_workers or spec.min_workers, "priority": spec.priority,
        "gpu_type": spec.gpu_type}
    if spec.adaptive:
        document["adaptive"] = True
        if spec.batch_size is not None:
            document["batch_size"] = spec.batch_size
    return document


def simulate_twin(workload: Workload, settings: ReplaySettings,
                  arrivals: Mapping[str, float] | None = None,
                  time_scale: float | None = None) -> SimResult:
    """The simulation matching the emulated service, JCTs in trace seconds.

    `arrivals` (trace seconds) replace the workload's own; `time_scale` is the clock the
    scheduler runs on (default: the service's; 1 is the trace's own seconds). Adaptive
    jobs run on the trace's own clock: their backend is the simulator's."""
    scale = settings.time_scale if time_scale is None else time_scale
    if arrivals is not None:
        jobs = sorted((arrivals[s.name], s.order, s) for s in workload.jobs)
        workload = Workload(workload.source, tuple(
            replace(s, submit=t, order=i) for i, (t, _, s) in enumerate(jobs)))
    if settings.job_model == "adaptive":
        scale = 1.0
    else:
        workload = as_emulated(workload, scale)
    result = simulate(
        workload, parse_cluster(settings.cluster),
        SimSettings(algorithm=settings.algorithm, algorithm_params=dict(settings.params),
                    placement=settings.placement, penalty=0.0,
                    interval=settings.rate_limit / scale, record_queue=False,
                    progress_decisions=settings.progress_decisions))
    return _in_trace_seconds(result, scale)


def _in_trace_seconds(result: SimResult, scale: float) -> SimResult:
    jobs = tuple(JobResult(j.name, j.submit * scale,
                           None if j.finish is None else j.finish * scale,
                           None if j.jct is None else j.jct * scale) for j in result.jobs)
    return replace(result, jobs=jobs, avg_jct=result.avg_jct * scale,
                   p50_jct=result.p50_jct * scale, p99_jct=result.p99_jct * scale,
                   makespan=result.makespan * scale, timeline=(), queue=())


def start_service(settings: ReplaySettings, folder: Path) -> ServeProcess:
    """`voda serve --backend emulated` on loopback, its store in `folder`, with one
    administrator (`replay`) whose token is new."""
    token = secrets.token_urlsafe(24)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
    env["VODA_CONFIG"] = str(folder / "no-config.toml")
    env["VODA_TOKEN_FILE"] = str(folder / "token")
    env["VODA_TOKENS"] = f"replay:{token}:admin"
    port = free_port()
    algorithm = settings.service_algorithm or settings.algorithm
    process = ServeProcess(
        url=f"http://127.0.0.1:{port}", port=port, env=env, log_path=folder / "serve.log",
        args=["--backend", "emulated", "--db", f"sqlite:///{folder / 'replay.db'}",
              "--cluster", settings.cluster, "--time-scale", repr(settings.time_scale),
              "--algorithm", algorithm,
              "--rate-limit", repr(settings.rate_limit / settings.time_scale),
              "--step-interval", repr(settings.step_interval),
              "--placement", settings.placement],
        tokens={"replay": token})
    return process.start()


def run_replay(settings: ReplaySettings, folder: Path) -> Replay:
    """Run the replay in `folder` (the service's store and log) and simulate its twin."""
    settings.check()
    workload = replay_workload(settings)
    began = time.monotonic()
    process = start_service(settings, folder)
    try:
        with process.client("replay") as client:
            if settings.params and settings.service_algorithm is None:
                _put(client, "/v1/schedulers/default",
                     {"algorithm": settings.algorithm, "params": dict(settings.params)})
            deadline = began + settings.timeout
            origin, names = _submit_all(client, workload, settings.time_scale,
                                        settings.rate_limit / settings.time_scale, deadline)
            _wait_until_ended(client, list(names.values()), deadline, settings.step_interval)
            service = {trace: _read_job(client, name, origin, settings.time_scale)
                       for trace, name in names.items()}
            period = longest_step_period(client.get("/metrics").text)
    finally:
        process.stop()
    wall = time.monotonic() - began
    arrivals = {name: job.submit for name, job in service.items()}
    simulated = simulate_twin(workload, settings, arrivals)
    return Replay(settings, service, simulated, wall, period)


def comparable_replay(settings: ReplaySettings, folders: Callable[[], Path],
                      latency: float, tries: int = 3) -> Replay:
    """`run_replay`, once more (up to `tries` in all) while its JCTs disagree with the
    simulator's and the service met the events in another order (`event_order_flip`): on
    a busy machine that is timing, not a fault, and the next replay is compared instead. A
    disagreement in the same order is returned at once, for the test to fail on."""
    replay = run_replay(settings, folders())
    for _ in range(tries - 1):
        flip = event_order_flip(replay) if disagreements(replay, latency) else None
        if flip is None:
            break
        log.warning("replayed again, the service's events out of the simulator's order: %s",
                    flip)
        replay = run_replay(settings, folders())
    return replay


def longest_step_period(metrics: str) -> float:
    """From the service's /metrics, an upper bound on the longest time between two of its
    scheduling steps: the smallest bucket bound of voda_scheduler_step_period_seconds that
    holds every step (inf if the last, open bucket holds some; 0 if none was counted)."""
    buckets: list[tuple[float, float]] = []
    for family in text_string_to_metric_families(metrics):
        if family.name == "voda_scheduler_step_period_seconds":
            buckets = [(float(s.labels["le"]), s.value) for s in family.samples
                       if s.name.endswith("_bucket")]
    if not buckets:
        raise ReplayError("/metrics: no voda_scheduler_step_period_seconds histogram")
    buckets.sort()
    total = buckets[-1][1]
    if total == 0:
        return 0.0
    return next(bound for bound, count in buckets if count >= total)


def _put(client: httpx.Client, path: str, body: dict[str, Any]) -> None:
    response = client.put(path, json=body)
    if response.status_code != 200:
        raise ReplayError(f"PUT {path}: {response.status_code} {response.text[:500]}")


def _submit_all(client: httpx.Client, workload: Workload, scale: float, rate_limit_wall: float,
                deadline: float) -> tuple[float, dict[str, str]]:
    """Submit each job at its arrival / scale (wall seconds after the origin); the origin
    (wall clock, seconds) and trace name -> service name."""
    # The service decides once as it starts (on the empty cluster), and the rate limit runs
    # from there; the simulator makes no such decision. The first job comes after it.
    first = workload.jobs[0].submit
    origin = time.time() + rate_limit_wall + 0.5 - first / scale
    names: dict[str, str] = {}
    for spec in workload.jobs:
        wait = origin + spec.submit / scale - time.time()
        if time.monotonic() + max(wait, 0.0) > deadline:
            raise ReplayError("timeout: the arrivals outlast the replay's timeout")
        if wait > 0:
            time.sleep(wait)
        response = client.post("/v1/jobs", json=job_document(spec))
        if response.status_code not in (200, 201):
            raise ReplayError(f"submitting {spec.name}: {response.status_code} "
                              f"{response.text[:500]}")
        names[spec.name] = response.json()["name"]
    return origin, names


def _wait_until_ended(client: httpx.Client, names: list[str], deadline: float,
                      poll: float) -> None:
    pending = set(names)
    while pending:
        if time.monotonic() > deadline:
            raise ReplayError(f"timeout: {len(pending)} jobs had not ended")
        for name in sorted(pending):
            response = client.get(f"/v1/jobs/{name}")
            if response.status_code == 200 and response.json()["status"] in ENDED:
                pending.discard(name)
        if pending:
            time.sleep(max(poll, 0.2))


def _read_job(client: httpx.Client, name: str, origin: float, scale: float) -> ServiceJob:
    detail = client.get(f"/v1/jobs/{name}")
    history = client.get(f"/v1/jobs/{name}/history")
    if detail.status_code != 200 or history.status_code != 200:
        raise ReplayError(f"reading {name}: {detail.status_code}, {history.status_code}")
    job, events = detail.json(), history.json()
    starts = sum(1 for e in events if e["field"] in ALLOCATION_CHANGES
                 and (e["old"] in (None, "0")) and e["new"] not in ("0",))
    completions = sum(1 for e in events if e["field"] == "status" and e["new"] == "Completed")
    counts = tuple(int(e["new"]) for e in events
                   if e["field"] in ALLOCATION_CHANGES and e["new"].isdigit() and e["new"] != "0")
    finish = job["finish_time"] if job["status"] == "Completed" else None
    return ServiceJob(
        name=name, submit=(job["submit_time"] - origin) * scale,
        finish=None if finish is None else (finish - origin) * scale, status=job["status"],
        min_workers=job["min_workers"], max_workers=job["max_workers"],
        rescales=job["rescales"], migrations=job["migrations"],
        preemptions=job["preemptions"], starts=starts, completions=completions,
        worker_counts=counts)


# ----- checks ----------------------------------------------------------------------------------
def jct_tolerance(simulated_jct: float, changes: int, settings: ReplaySettings,
                  latency: float, step_period: float = 0.0) -> float:
    """How far a job's service JCT may be from the simulated one, in trace seconds.

    The service sees an arrival or a completion only at its next step, so each of its
    decisions comes up to `step_interval` + `latency` wall seconds after the simulator's,
    or up to the longest step period it measured where that is longer (a busy machine
    wakes its loop late). A job's JCT moves by the lag of its start, of each change of its
    workers (the speed changes later) and of the completion that freed its GPUs:
    (2 + changes) lags. On top, 3 % of the JCT for lags passed on through the jobs it
    waited behind.
    """
    lag = max(settings.step_interval + latency, step_period) * settings.time_scale
    return 0.03 * simulated_jct + (2 + changes) * lag


def disagreements(replay: Replay, latency: float, measured: bool = True) -> list[str]:
    """The jobs whose service JCT is outside `jct_tolerance` of the simulated one; with
    `measured`, the lag allowed is at least the service's longest step period."""
    sim = replay.simulated_jcts()
    period = replay.step_period if measured else 0.0
    out = []
    for name, job in sorted(replay.service.items()):
        expected = sim.get(name)
        if job.jct is None or expected is None:
            out.append(f"{name}: service JCT {job.jct}, simulated {expected}")
            continue
        changes = max(len(job.worker_counts) - 1, 0)
        tolerance = jct_tolerance(expected, changes, replay.settings, latency, period)
        if abs(job.jct - expected) > tolerance:
            out.append(f"{name}: service JCT {job.jct:.1f} s, simulated {expected:.1f} s "
                       f"(|diff| {abs(job.jct - expected):.1f} > {tolerance:.1f}); "
                       f"submitted at {job.submit:.1f} s, the service's worker counts "
                       f"{job.worker_counts}, {job.preemptions} preemptions, "
                       f"{job.migrations} migrations, longest step period "
                       f"{replay.step_period:.3f} s")
    return out


def event_order_flip(replay: Replay) -> str | None:
    """Where the service met the jobs' arrivals and completions in another order than the
    simulator did (None where the orders agree).

    A completion the service notices late (its loop woke late on a busy machine) can fall
    after an arrival the simulator decided on before it; the service then decides on both
    at once, and from there the two runs make different decisions by design, not by a
    fault, so their JCTs are no longer comparable."""
    sim = {j.name: j.finish for j in replay.simulated.jobs}
    service_events, sim_events = [], []
    for name, job in replay.service.items():
        service_events.append((job.submit, "arrival", name))
        sim_events.append((job.submit, "arrival", name))  # the twin's arrivals are the service's
        if job.finish is not None:
            service_events.append((job.finish, "completion", name))
        if sim.get(name) is not None:
            sim_events.append((sim[name], "completion", name))
    service_events.sort()
    sim_events.sort()
    for (t_service, kind, name), (t_sim, sim_kind, sim_name) in zip(service_events, sim_events,
                                                                     strict=False):
        if (kind, name) != (sim_kind, sim_name):
            return (f"the service met {name}'s {kind} ({t_service:.1f} s) where the simulator "
                    f"met {sim_name}'s {sim_kind} ({t_sim:.1f} s)")
    return None


def average_ratio_allowance(replay: Replay, latency: float, base: float = 0.03) -> float:
    """How far the service's average JCT over the simulator's may be from 1.

    `base` holds on a machine whose loop wakes on time; where the service measured longer
    step periods than its interval + latency (a loaded machine), each job's JCT may move
    by the extra lag at each of its decisions (as in `jct_tolerance`), and the average by
    the mean of that, over the simulator's average JCT.
    """
    sim = replay.simulated_jcts()
    extra = []
    for name, job in replay.service.items():
        expected = sim.get(name)
        if expected is None:
            continue
        changes = max(len(job.worker_counts) - 1, 0)
        extra.append(
            jct_tolerance(expected, changes, replay.settings, latency, replay.step_period)
            - jct_tolerance(expected, changes, replay.settings, latency))
    average = _mean([v for v in sim.values() if v is not None])
    if not extra or not average:
        return base
    return base + _mean(extra) / average


def run_once_problems(replay: Replay, workload: Workload) -> list[str]:
    """Jobs that did not complete exactly once, restarted without a preemption, or were
    given a worker count outside their min/max."""
    specs = {s.name: s for s in workload.jobs}
    out = []
    for name, job in sorted(replay.service.items()):
        spec = specs[name]
        if job.status != "Completed" or job.completions != 1:
            out.append(f"{name}: {job.status}, completed {job.completions} times")
        if job.starts != 1 + job.preemptions:
            out.append(f"{name}: started {job.starts} times with {job.preemptions} preemptions")
        outside = [n for n in job.worker_counts
                   if not spec.min_workers <= n <= spec.max_workers]
        if outside or (job.min_workers, job.max_workers) != (spec.min_workers,
                                                             spec.max_workers):
            out.append(f"{name}: workers {job.worker_counts} outside "
                       f"{spec.min_workers}..{spec.max_workers}")
    if set(replay.service) != set(specs):
        out.append(f"jobs: the service ran {sorted(replay.service)}, the trace has "
                   f"{sorted(specs)}")
    return out
