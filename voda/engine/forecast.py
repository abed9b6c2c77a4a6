"""A forecast for every job: when it starts and when it finishes, assuming no new arrivals.

The forecast runs the engine itself forward in virtual time: a fresh `Scheduler` (the same
`decide()`, the same algorithm and knobs, the same placer, the same rate limit) seeded
with the jobs as they are now, on a `ForecastBackend` whose jobs progress at the speed the
engine measured for them (`Job.epoch_time_by_workers`, as the allocation's estimates read
it: voda.core.estimate.epoch_time_at) or at a speed given by the caller (the simulator's
truth, in tests and benches). Nothing new arrives, so the only events are completions
and the scheduler's own wake-ups (Tiresias's queue changes); time jumps from one to the
next and `decide()` runs only at those instants, never on every epoch.

A change of a job's workers costs `penalty` seconds (of the backend's time) during which
it holds its GPUs and makes no progress, as in the simulator (002-simulator.md).

To stay fast on large queues, decisions come at most every `resolution` seconds: the
engine's rate limit, or the time the whole queue needs at the least (its GPU-seconds over
the capacity) over `max_decisions`, whichever is longer. By default `max_decisions` is
JOB_DECISIONS over the number of jobs (at least MIN_DECISIONS): a decision costs about
linearly in the jobs, so a forecast costs about the same at any size. A completion between two
decisions still ends its job at its own instant; only the next starts wait for the
decision. See docs/design/011-forecast.md.

Pure: no I/O and no threads; voda.engine.forecasting runs it off the decision path.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from voda.core.estimate import epoch_time_at
from voda.core.model import Cluster, Job, JobPlacement, JobStatus, Node, Placement
from voda.core.placement.base import Placer
from voda.engine.events import Event, EventKind
from voda.engine.scheduler import REFUSALS_TO_GIVE_UP, JobRecord, Scheduler, SchedulerSettings

BASIS = "assuming no new arrivals"
DEFAULT_PENALTY = 30.0  # seconds a change of workers costs, as in the simulator
# Decisions a forecast may take, by default: about JOB_DECISIONS / jobs (decide() costs
# about linear in the jobs), at least MIN_DECISIONS: 1,000 jobs on 4,096 GPUs take
# under 1 s (bench/forecast.py).
DEFAULT_MAX_DECISIONS = 0  # 0: that budget
JOB_DECISIONS = 30_000
MIN_DECISIONS = 30

# seconds per epoch of `job` on `placement` (the backend's seconds)
Speed = Callable[[Job, JobPlacement], float]


def measured_speed(job: Job, placement: JobPlacement) -> float:
    """Seconds per epoch as the engine estimates them from what the job measured."""
    return epoch_time_at(job, sum(c for _, c in placement))


@dataclass(frozen=True, slots=True)
class JobForecast:
    """When a job starts (None: it runs already) and finishes; None: never, as things are
    (it cannot fit, or the forecast stopped at its horizon)."""

    start: float | None
    finish: float | None
    running: bool = False


@dataclass(frozen=True, slots=True)
class ForecastInput:
    """A snapshot of what the forecast needs, taken on the decision path (cheap)."""

    jobs: tuple[Job, ...]
    nodes: tuple[Node, ...]
    placement: Placement
    settings: SchedulerSettings
    placer: Placer | None
    now: float
    time_scale: float = 1.0
    # When the engine last decided (its rate limit counts from it); None: decide at once.
    last_decision: float | None = None
    penalty: float = DEFAULT_PENALTY
    category_history: Mapping[Any, Mapping[int, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Forecast:
    jobs: Mapping[str, JobForecast]
    computed_at: float  # the engine's clock when the forecast was made
    decisions: int = 0
    resolution: float = 0.0
    basis: str = BASIS


@dataclass(slots=True)
class _Run:
    remaining: float  # epochs
    epoch_seconds: float  # backend seconds per epoch on the current placement
    countdown: float  # backend seconds of restart left
    t: float  # engine time the above hold at
    version: int = 0


class ForecastBackend:
    """The Backend protocol on virtual time: jobs progress at `speed`, in backend seconds,
    `time_scale` of them per engine second."""

    def __init__(self, nodes: Sequence[Node], speed: Speed, penalty: float, now: float,
                 time_scale: float = 1.0) -> None:
        self._nodes = list(nodes)
        self.speed = speed
        self.penalty = penalty
        self.time_scale = time_scale
        self.now = now
        self.runs: dict[str, _Run] = {}
        self.finished: dict[str, float] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._pending: list[Event] = []

    # ----- Backend protocol -------------------------------------------------------
    def start(self, job: Job, placement: JobPlacement) -> None:
        self._set(job, placement, self.penalty)

    def scale(self, job: Job, placement: JobPlacement) -> None:
        self._set(job, placement, self.penalty)

    def halt(self, job: Job) -> None:
        run = self.runs.get(job.name)
        if run is not None:
            self._catch_up(run)
            run.version += 1
            run.epoch_seconds = math.inf

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def events(self) -> list[Event]:
        out, self._pending = self._pending, []
        return out

    # ----- the forecast's own ---------------------------------------------------------
    def seed(self, job: Job, placement: JobPlacement, countdown: float) -> None:
        """A job as it is now: its remaining epochs, and on `placement` if it runs."""
        done = job.completed_epochs
        if placement:
            seconds = self.speed(job, placement)
            if seconds > 0 and math.isfinite(seconds):  # the epoch under way, partly done
                done += min(job.running_seconds_since_epoch / seconds, 0.999)
        self.runs[job.name] = _Run(max(job.epochs - done, 0.0), math.inf, 0.0, self.now)
        if placement:
            self._set(job, placement, countdown)

    def _set(self, job: Job, placement: JobPlacement, countdown: float) -> None:
        run = self.runs.get(job.name)
        if run is None:
            run = self.runs[job.name] = _Run(job.remaining_epochs, math.inf, 0.0, self.now)
        self._catch_up(run)
        run.version += 1
        run.epoch_seconds = self.speed(job, placement) if placement else math.inf
        run.countdown = countdown
        if math.isfinite(run.epoch_seconds) and run.epoch_seconds >= 0:
            heapq.heappush(self._heap, (self._finish_time(run), run.version, job.name))

    def _finish_time(self, run: _Run) -> float:
        return run.t + (run.countdown + run.remaining * run.epoch_seconds) / self.time_scale

    def _catch_up(self, run: _Run) -> None:
        seconds = (self.now - run.t) * self.time_scale
        if seconds > 0 and math.isfinite(run.epoch_seconds):
            delay = min(run.countdown, seconds)
            run.countdown -= delay
            if run.epoch_seconds > 0:
                run.remaining = max(run.remaining - (seconds - delay) / run.epoch_seconds, 0.0)
        run.t = self.now

    def remaining(self, name: str) -> float:
        run = self.runs[name]
        self._catch_up(run)
        return run.remaining

    def next_completion(self) -> float | None:
        heap = self._heap
        while heap and (heap[0][2] in self.finished
                        or heap[0][1] != self.runs[heap[0][2]].version):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def advance(self, to: float) -> None:
        """Move to `to`: jobs due by then complete (an event each, at its own time)."""
        while True:
            due = self.next_completion()
            if due is None or due > to:
                break
            _, _, name = heapq.heappop(self._heap)
            self.finished[name] = due
            self._pending.append(Event(EventKind.JOB_COMPLETED, due, job=name))
        self.now = max(self.now, to)


def horizon_lower_bound(jobs: Sequence[Job], capacity: int, speed: Speed) -> float:
    """Seconds (backend) the queue needs at the least: its GPU-seconds at each job's
    minimum over the capacity, or the longest job alone at its maximum."""
    if capacity <= 0:
        return 0.0
    work, longest = 0.0, 0.0
    for job in jobs:
        low = job.min_workers
        epoch_low = speed(job, (("*", low),))
        epoch_high = speed(job, (("*", job.max_workers),))
        remaining = job.remaining_epochs
        if math.isfinite(epoch_low):
            work += remaining * epoch_low * low
        if math.isfinite(epoch_high):
            longest = max(longest, remaining * epoch_high)
    return max(work / capacity, longest)


def forecast(
    given: ForecastInput,
    speed: Speed = measured_speed,
    extra: Sequence[Job] = (),
    max_decisions: int | None = DEFAULT_MAX_DECISIONS,
    horizon: float | None = None,
    stop: Callable[[], bool] | None = None,
) -> Forecast:
    """Run the engine forward from `given`, no new arrivals, until every job has finished
    (or cannot run, or `horizon` engine seconds have passed, or `stop()` says so: a
    deadline, a closing service). `extra`: jobs submitted now ("what if"), decided at
    once. A job whose decisions are refused, over and over with nothing to change them,
    cannot run as things are: its start and finish are None."""
    now = given.now
    backend = ForecastBackend(given.nodes, speed, given.penalty, now, given.time_scale)
    jobs = [*given.jobs, *extra]
    capacity = sum(n.gpus for n in given.nodes)
    rate_limit = given.settings.rate_limit_seconds
    resolution = rate_limit
    if max_decisions == DEFAULT_MAX_DECISIONS:
        max_decisions = max(MIN_DECISIONS, JOB_DECISIONS // max(len(jobs), 1))
    if max_decisions:
        bound = horizon_lower_bound(jobs, capacity, speed) / given.time_scale
        resolution = max(rate_limit, bound / max_decisions)
    settings = SchedulerSettings(
        algorithm=given.settings.algorithm,
        algorithm_params=dict(given.settings.algorithm_params),
        algorithm_by_gpu_type={t: (n, dict(p)) for t, (n, p)
                               in given.settings.algorithm_by_gpu_type.items()},
        rate_limit_seconds=resolution,
        queues=given.settings.queues,  # the team queues, without the live one's observer
    )
    scheduler = Scheduler(backend, settings, placer=given.placer, now=now,
                          category_history=given.category_history, quiet=True,
                          explain=False)
    starts: dict[str, float] = {}
    running: set[str] = set()
    for job in given.jobs:
        placement = tuple(given.placement.get(job.name, ()))
        record = JobRecord.from_job(job)
        record.placement = placement
        record.current_workers = sum(c for _, c in placement)
        if placement:
            running.add(job.name)
            if record.status is not JobStatus.RUNNING:
                record.status = JobStatus.RUNNING
            countdown = max(given.penalty - job.running_seconds_since_start, 0.0)
        else:
            countdown = 0.0
            if record.status is JobStatus.RUNNING:
                record.status = JobStatus.WAITING
        backend.seed(job, placement, countdown)
        scheduler.adopt(record)
    for job in extra:
        scheduler.submit(replace(job, submit_time=min(job.submit_time, now),
                                 status=JobStatus.SUBMITTED))
        backend.seed(job, (), 0.0)
    if given.last_decision is not None:
        # The engine has just decided on these jobs: the plan in force stands until
        # something happens (its rate limit counted from that decision); a job submitted
        # now calls for a decision once the rate limit allows.
        scheduler._dirty = bool(extra)
        scheduler._last_reschedule = given.last_decision
    decisions = _run(scheduler, backend, now, horizon, starts, stop)
    out: dict[str, JobForecast] = {}
    for job in jobs:
        name = job.name
        out[name] = JobForecast(
            start=None if name in running else starts.get(name),
            finish=backend.finished.get(name),
            running=name in running,
        )
    return Forecast(out, computed_at=now, decisions=decisions, resolution=resolution)


def _run(scheduler: Scheduler, backend: ForecastBackend, now: float, horizon: float | None,
         starts: dict[str, float], stop: Callable[[], bool] | None = None) -> int:
    """The simulator's event loop (voda.sim.runner) without arrivals or node events."""
    interval = scheduler.settings.rate_limit_seconds
    end = None if horizon is None else now + horizon
    pending: float | None = now if scheduler.dirty else None
    last: float | None = scheduler.last_reschedule
    wake = scheduler.next_wakeup(now)
    decisions = 0
    stalled = 0
    refused = 0  # refused decisions since the last completion
    t = now
    while scheduler.active:
        if stop is not None and stop():
            break
        if refused >= REFUSALS_TO_GIVE_UP and backend.next_completion() is None:
            break  # only retries of a refused decision are left: nothing will change it
        due = None
        if pending is not None:
            due = pending if last is None else max(pending, last + interval)
        candidates = [c for c in (due, wake, backend.next_completion()) if c is not None]
        if not candidates:
            break  # jobs left that can never run
        t = max(min(candidates), now)
        if end is not None and t > end:
            break
        stalled = stalled + 1 if t == now else 0
        if stalled > 10_000:
            break
        backend.advance(t)
        if backend._pending:
            refused = 0
            if pending is None:
                pending = t
                due = t if last is None else max(t, last + interval)
        if (due is not None and t >= due) or (wake is not None and t >= wake):
            for name, record in scheduler.active.items():
                if record.current_workers > 0 and name in backend.runs:
                    _report_epochs(record, backend, name)
            before = scheduler.reschedules
            refusals_before = scheduler.last_error
            plan = scheduler.step(t)
            if scheduler.reschedules != before:
                last = t
                decisions += 1
            if scheduler.errors and scheduler.last_error is not refusals_before:
                refused += 1
            if plan is not None:
                for name, p in plan.placement.items():
                    if p and name not in starts:
                        starts[name] = t
            pending = None
            wake = scheduler.next_wakeup(t)
        now = t
    return decisions


def _report_epochs(record: JobRecord, backend: ForecastBackend, name: str) -> None:
    """The progress the policies read, as the engine would know it: whole epochs reported
    (Job.completed_epochs), and the time into the epoch under way once one more ended."""
    done = max(record.epochs - backend.remaining(name), 0.0)
    whole = float(math.floor(done + 1e-9))
    if whole > record.completed_epochs:
        record.completed_epochs = min(whole, float(record.epochs))
        seconds = backend.runs[name].epoch_seconds
        into = (done - whole) * seconds if math.isfinite(seconds) else 0.0
        record.running_seconds_since_epoch = max(into, 0.0)
        record.attained_gpu_seconds_since_epoch = max(into, 0.0) * record.current_workers


def snapshot(scheduler: Scheduler, now: float, penalty: float = DEFAULT_PENALTY,
             placer: Placer | None = None) -> ForecastInput:
    """What the forecast needs of a live scheduler (on its thread: copies only).
    `placer`: the one to forecast with, when the scheduler's is wrapped (timed)."""
    jobs = tuple(
        r.snapshot() for r in scheduler.active.values()
        if r.status is not JobStatus.SUBMITTED or r.submit_time <= now
    )
    s = scheduler.settings
    return ForecastInput(
        jobs=jobs,
        nodes=tuple(scheduler.cluster.nodes),
        placement={name: r.placement for name, r in scheduler.active.items() if r.placement},
        settings=SchedulerSettings(
            algorithm=s.algorithm, algorithm_params=dict(s.algorithm_params),
            algorithm_by_gpu_type=dict(s.algorithm_by_gpu_type),
            rate_limit_seconds=s.rate_limit_seconds, queues=s.queues),
        placer=placer if placer is not None else scheduler.placer,
        now=now,
        time_scale=scheduler.time_scale,
        last_decision=scheduler.last_reschedule,
        penalty=penalty,
        category_history={k: dict(v) for k, v in scheduler.category_history.items()},
    )


def cluster_of(given: ForecastInput) -> Cluster:
    return Cluster(tuple(given.nodes))
