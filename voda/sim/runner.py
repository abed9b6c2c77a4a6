"""The simulation loop: the real Scheduler on a SimBackend and a ManualClock.

Event-driven by default: the next instant is the earliest of the next job
arrival, the next completion, the scheduler's next wake-up (rate limit, queue
changes) and the next node event. With `fixed_rounds`, time moves in steps of
`interval` seconds and the scheduler is stepped at every multiple of it, as in
the Pollux artifact (SIMULATION.md §4).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from voda.blas import serial_blas
from voda.core.allocation import registry
from voda.core.allocation.hetero import DEFAULT_HETERO_POLICY, check_policy
from voda.core.model import Job
from voda.core.placement import registry as placers
from voda.core.placement.base import Placer
from voda.core.quotas import DEFAULT_QUEUE
from voda.engine.clock import ManualClock
from voda.engine.scheduler import (
    REFUSALS_TO_GIVE_UP,
    Scheduler,
    SchedulerObserver,
    SchedulerSettings,
)
from voda.sim.adaptive import initial_model
from voda.sim.backend import DEFAULT_PENALTY, SimBackend, check_layout_speed
from voda.sim.cluster_file import SimCluster
from voda.sim.hetero_profiles import profiled_type_speeds
from voda.sim.oracle import step_oracle
from voda.sim.profiles import load_profile
from voda.sim.queue_stats import QueueStats, queue_report
from voda.sim.queues import QueueFile
from voda.sim.report import SimResult, build_result
from voda.sim.workloads import JobSpec, Workload, accepting_any_type

DEFAULT_INTERVAL = 60.0
# Decisions at arrivals between fixed rounds come at most this often, as in the service.
ARRIVAL_RATE_LIMIT = SchedulerSettings().rate_limit_seconds
DEFAULT_PLACEMENT: str = getattr(placers, "DEFAULT_PLACER", "naive")  # what production uses


class SimulationStalled(RuntimeError):
    pass


@dataclass
class SimSettings:
    """How to simulate: algorithm, placement, penalty and the timing of decisions."""

    algorithm: str = registry.DEFAULT_ALGORITHM
    algorithm_params: Mapping[str, Any] = field(default_factory=dict)
    placement: str | Placer = DEFAULT_PLACEMENT
    penalty: float = DEFAULT_PENALTY
    interval: float = DEFAULT_INTERVAL  # rate limit, or the round length with fixed_rounds
    fixed_rounds: bool = False
    integer_time: bool = False  # round epoch crossings to whole seconds (the artifact's rule)
    report_epochs: bool = True
    record_queue: bool = True
    # What a job's speed follows: "actual" (its placement), "packed" (its GPU count on as
    # few nodes as possible) or "best" (the fastest layout: a bound on any placer).
    layout_speed: str = "actual"
    until: float | None = None  # stop at this simulated time, jobs finished or not
    # Event-driven: decide again on epoch and goodput reports (rate-limited), as the service
    # does for a policy that decides on progress (Voda, Pollux, Optimus). Off: only on
    # arrivals, completions, node events and the scheduler's wake-ups.
    progress_decisions: bool = False
    # With fixed rounds: also decide when a job arrives between two rounds, as the service
    # decides on a submission (at most every ARRIVAL_RATE_LIMIT seconds). None: as the
    # algorithm says (`decides_on_arrival`: Voda); the artifact's policies decide in its
    # rounds only.
    arrival_decisions: bool | None = None
    # How jobs that accept several GPU types get one (voda.core.allocation.hetero):
    # "voda", "isolated", "sia" or "pollux". On a cluster of several types, jobs that
    # name no type accept any (`accepting_any_type`).
    hetero_policy: str = DEFAULT_HETERO_POLICY
    # Per application: a factor on its step times, and its restart penalty instead of
    # `penalty` (the Sia artifact's calibration: voda.sim.presets, preset "sia").
    calibration: Mapping[str, float] = field(default_factory=dict)
    penalties: Mapping[str, float] = field(default_factory=dict)
    # Per application: the restart cost the backend tells the policies (Job.restart_cost)
    # where it differs from `penalties` (the Sia artifact's scheduler was told its own
    # table); empty: `penalties`.
    told_penalties: Mapping[str, float] = field(default_factory=dict)
    # Team queues (voda.sim.queues): jobs join them by their workload columns; None: none.
    queues: QueueFile | None = None


def effective_layout_speed(layout_speed: str, placer: Placer) -> str:
    """A placer that ignores topology (`--placement off`) runs jobs at packed speed."""
    check_layout_speed(layout_speed)
    if layout_speed == "actual" and getattr(placer, "ignores_topology", False):
        return "packed"
    return layout_speed


def to_job(spec: JobSpec, workload: Workload, queues: QueueFile | None = None) -> Job:
    """The job the scheduler is given. A batch-adaptive job declares its batch limits
    (`Job.goodput` with nothing measured yet); fixed-batch profiled jobs carry the
    simulator's truth about them (`Job.oracle`), which only oracle baselines read."""
    declared = None
    if spec.adaptive and spec.profile is not None:
        declared = initial_model(load_profile(spec.profile), spec.batch_size)
    return Job(
        name=spec.name,
        min_workers=spec.min_workers,
        max_workers=spec.max_workers,
        preferred_workers=spec.preferred_workers,
        priority=spec.priority,
        submit_time=workload.engine_submit(spec),
        epochs=spec.epochs,
        category=spec.category,
        gpu_type=spec.gpu_type,
        gpu_types=spec.gpu_types,
        queue=queues.queue_of(spec.columns) if queues is not None else DEFAULT_QUEUE,
        goodput=declared,
        oracle=step_oracle(spec),
    )


def simulate(
    workload: Workload,
    cluster: SimCluster,
    settings: SimSettings | None = None,
    progress: Callable[[float], None] | None = None,
    observe: Callable[[Scheduler], SchedulerObserver] | None = None,
) -> SimResult:
    """Run `workload` on `cluster` to the end and return the result.

    `progress`, if given, is called now and then with the fraction of jobs done.
    `observe`, if given, makes an observer of the scheduler (bench/forecast.py forecasts
    at each decision).
    """
    s = settings or SimSettings()
    if s.interval <= 0:
        raise ValueError(f"interval: must be positive, got {s.interval}")
    if s.until is not None and not s.until > 0:
        raise ValueError(f"until: must be a positive number of seconds, got {s.until}")
    placer = placers.get_placer(s.placement) if isinstance(s.placement, str) else s.placement
    layout_speed = effective_layout_speed(s.layout_speed, placer)
    if len(cluster.cluster.gpu_types()) > 1:
        workload = accepting_any_type(workload)
    specs = {j.name: j for j in workload.jobs}
    start = min(0.0, workload.jobs[0].submit)
    clock = ManualClock(start)
    backend = SimBackend(list(cluster.nodes), specs, penalty=s.penalty,
                         integer_time=s.integer_time, start=start,
                         report_epochs=s.report_epochs,
                         spine_oversubscription=cluster.spine_oversubscription,
                         layout_speed=layout_speed, calibration=s.calibration,
                         penalties=s.penalties, told_penalties=s.told_penalties)
    stats = QueueStats(clock.now, s.penalty) if s.queues is not None else None
    scheduler = Scheduler(
        backend,
        SchedulerSettings(algorithm=s.algorithm, algorithm_params=dict(s.algorithm_params),
                          rate_limit_seconds=0.0 if s.fixed_rounds else s.interval,
                          hetero_policy=check_policy(s.hetero_policy), restart_penalty=s.penalty,
                          queues=s.queues.queues if s.queues is not None else None,
                          queue_observer=stats, type_speeds=profiled_speeds(workload, cluster)),
        placer=placer,
        now=start,
        # No one reads the jobs' reasons in a simulation: working them out at every
        # decision was a tenth of a long run (they never change what is decided).
        explain=False,
    )
    if observe is not None:
        scheduler.observers.append(observe(scheduler))
    loop = _Loop(workload, cluster, s, clock, backend, scheduler, progress,
                 arrivals_decided=s.fixed_rounds and decides_on_arrival(s, scheduler))
    with serial_blas():  # tiny linear algebra (goodput fits): threads only slow it down
        loop.run()
    scheduler.settle_accounting()  # (the loop may end on an arrival's take_events)
    result = build_result(
        algorithm=s.algorithm, workload=workload, backend=backend, scheduler=scheduler,
        queue=loop.queue, end=clock.now(), params=s.algorithm_params,
    )
    if stats is None or s.queues is None:
        return result
    jcts: dict[str, list[float]] = {}
    for spec, job in zip(workload.jobs, result.jobs, strict=True):
        if job.jct is not None:
            jcts.setdefault(s.queues.queue_of(spec.columns), []).append(float(job.jct))
    return replace(result, queues=tuple(queue_report(stats, jcts)))


def profiled_speeds(workload: Workload, cluster: SimCluster) -> dict[str, dict[str, float]]:
    """Each job category's profiled speed on one GPU of each of the cluster's types (none
    on a cluster of one type): what Sia's artifact gives its Sia to project with."""
    types = cluster.cluster.gpu_types()
    if len(types) < 2:
        return {}
    models = {spec.category: spec.profile for spec in workload.jobs
              if spec.category and spec.profile}
    return profiled_type_speeds(models, types)


def decides_on_arrival(s: SimSettings, scheduler: Scheduler) -> bool:
    """Whether the fixed rounds also step the scheduler at arrivals between them."""
    if s.arrival_decisions is not None:
        return s.arrival_decisions
    return bool(getattr(scheduler.default_algorithm, "decides_on_arrival", False))


class _Loop:
    def __init__(self, workload: Workload, cluster: SimCluster, s: SimSettings,
                 clock: ManualClock, backend: SimBackend, scheduler: Scheduler,
                 progress: Callable[[float], None] | None, arrivals_decided: bool = False
                 ) -> None:
        self.workload = workload
        self.jobs = workload.jobs
        self.node_events = list(cluster.events)
        self.s = s
        self.clock = clock
        self.backend = backend
        self.scheduler = scheduler
        self.progress = progress
        self.arrivals_decided = arrivals_decided
        self.last_decision: float | None = None  # the last forced step, in fixed rounds
        self.next_arrival = 0
        self.next_node_event = 0
        self.queue: list[tuple[float, int, int]] = []  # (time, waiting jobs, running jobs)
        self._reported = -1.0

    @property
    def finished(self) -> bool:
        return self.next_arrival >= len(self.jobs) and not self.scheduler.active

    def _move_to(self, t: float) -> bool:
        """Advance to `t`; True when something happened that calls for a decision."""
        self.backend.advance(t)
        changed = self.backend.take_changed()
        if self.s.progress_decisions and self.backend.take_progressed():
            changed = True
        self.clock.set(t)
        while (self.next_node_event < len(self.node_events)
               and self.node_events[self.next_node_event].time <= t):
            event = self.node_events[self.next_node_event]
            if event.kind == "fail":
                if event.node.name in {n.name for n in self.backend.nodes()}:
                    self.backend.fail_node(event.node.name)
            else:
                self.backend.join_node(event.node)
            self.next_node_event += 1
            changed = True
        if self.next_arrival < len(self.jobs) and self.jobs[self.next_arrival].submit <= t:
            # As the service does: reports that came before an arrival are taken in first.
            self.scheduler.take_events(t)
        while self.next_arrival < len(self.jobs) and self.jobs[self.next_arrival].submit <= t:
            self.scheduler.submit(to_job(self.jobs[self.next_arrival], self.workload,
                                         self.s.queues))
            self.next_arrival += 1
            changed = True
        return changed

    def _after_step(self, t: float) -> None:
        if self.s.record_queue:
            running = len(self.backend.running)
            waiting = len(self.scheduler.active) - running
            if not self.queue or self.queue[-1][1:] != (waiting, running):
                self.queue.append((t, waiting, running))
        if self.progress is not None:
            done = (self.next_arrival - len(self.scheduler.active)) / len(self.jobs)
            if done - self._reported >= 0.01 or self.finished:
                self._reported = done
                self.progress(done)

    def run(self) -> None:
        if self.s.fixed_rounds:
            self._run_rounds()
        else:
            self._run_events()

    def _run_rounds(self) -> None:
        interval = self.s.interval
        t = self.clock.now()
        while not self.finished:
            if self.s.until is not None and t + interval > self.s.until:
                self._move_to(max(t, self.s.until))
                break
            if not self.scheduler.active and self.next_arrival < len(self.jobs):
                # Nothing runs: jump to the round at or after the next arrival (or node event).
                upcoming = self.jobs[self.next_arrival].submit
                if self.next_node_event < len(self.node_events):
                    upcoming = min(upcoming, self.node_events[self.next_node_event].time)
                t = max(t, math.ceil(upcoming / interval) * interval - interval)
            if self.arrivals_decided:
                self._decide_arrivals_before(t + interval)
            t += interval
            self._move_to(t)
            self.scheduler.step(t, force=True)
            self._after_step(t)
            self.last_decision = t
            if (not self.backend.running and self.next_arrival >= len(self.jobs)
                    and self.next_node_event >= len(self.node_events)):
                break  # jobs left that can never run (e.g. larger than the cluster)

    def _decide_arrivals_before(self, end: float) -> None:
        """Between rounds: step the scheduler when a job arrives before `end`, at most once
        per the service's rate limit after the last decision (the round's included)."""
        while self.next_arrival < len(self.jobs):
            t = self.jobs[self.next_arrival].submit
            if self.last_decision is not None:
                t = max(t, self.last_decision + ARRIVAL_RATE_LIMIT)
            if not t < end:
                break
            self._move_to(t)
            self.scheduler.step(t, force=True)
            self._after_step(t)
            self.last_decision = t

    def _run_events(self) -> None:
        """Step the scheduler only when something is due: a change (arrival, completion,
        node event) once the rate limit allows, or the scheduler's own next wake-up."""
        interval = self.s.interval
        now = self.clock.now()
        pending: float | None = None  # earliest change the scheduler has not seen
        last_reschedule: float | None = None
        wake: float | None = None
        stalled = 0
        refused = 0  # refused decisions since the last change the scheduler saw
        while not self.finished:
            if (refused >= REFUSALS_TO_GIVE_UP and self.next_arrival >= len(self.jobs)
                    and self.next_node_event >= len(self.node_events)
                    and self.backend.next_completion() is None):
                raise SimulationStalled(
                    f"every decision is refused at t = {now}: {self.scheduler.last_error}")
            due = None
            if pending is not None:
                due = pending if last_reschedule is None else max(pending,
                                                                  last_reschedule + interval)
            candidates = [c for c in (due, wake) if c is not None]
            if self.next_arrival < len(self.jobs):
                candidates.append(self.jobs[self.next_arrival].submit)
            if self.next_node_event < len(self.node_events):
                candidates.append(self.node_events[self.next_node_event].time)
            completion = self.backend.next_completion()
            if completion is not None:
                candidates.append(completion)
            if self.s.progress_decisions:
                boundary = self.backend.next_boundary()
                if boundary is not None:
                    candidates.append(boundary)
            if not candidates:
                break  # jobs left that can never run (e.g. larger than the cluster)
            t = max(min(candidates), now)
            if self.s.until is not None and t > self.s.until:
                self._move_to(max(now, self.s.until))
                break
            stalled = stalled + 1 if t == now else 0
            if stalled > 10_000:
                raise SimulationStalled(f"the simulation makes no progress at t = {now}")
            if self._move_to(t):
                refused = 0
                if pending is None:
                    pending = t
                    due = t if last_reschedule is None else max(t, last_reschedule + interval)
            if (due is not None and t >= due) or (wake is not None and t >= wake):
                before = (self.scheduler.reschedules, self.scheduler.last_error)
                self.scheduler.step(t)
                if (self.scheduler.reschedules, self.scheduler.last_error) != before:
                    last_reschedule = t
                if self.scheduler.errors and self.scheduler.last_error is not before[1]:
                    refused += 1
                pending = None
                wake = self.scheduler.next_wakeup(t)
                self._after_step(t)
            now = t
