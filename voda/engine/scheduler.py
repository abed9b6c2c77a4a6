"""The scheduler loop.

The Scheduler owns job state and time; the decision itself is voda.core.plan.decide,
a pure function of a snapshot. Callers (the simulator runner, the service's
asyncio task, tests) feed it events and call `step(now)`; it never sleeps.

Per step:
1. account attained service up to `now`;
2. drain the backend's events (completions, failures, epoch reports, nodes) and
   take in the jobs whose submit time has come;
3. apply due promotions and note priority-queue changes (Tiresias);
4. if something changed (or a refused decision is due for a retry) and the rate
   limit allows, decide on a snapshot and apply the actions through the
   backend, frees before takes: the backend acts first, the records follow.

A GPU type whose decision is refused keeps its plan in force and is retried
after the rate limit, with a backoff that doubles on each refusal in a row;
the other types go on. A backend that fails an action ends the application of
the plan: what runs is read back from it and a new decision follows.

Two clocks. `now` is the engine's clock (wall seconds in the service): timestamps
(submit, first start, finish, queue entry) and the rate limit are in its seconds. A job's
counters (running, waiting, attained GPU-seconds, in total and since a start, an epoch or
a promotion) are in the backend's seconds, `time_scale` of them per engine second
(`backend_time_scale`): the unit of the epoch times the backend reports, so a policy that
compares them (Voda's credit for the epoch under way, Tiresias's queues, Pollux's age)
decides the same on an emulated cluster at any speed. A policy's wake-up
(`seconds_until_class_change`) is in job seconds too.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from itertools import compress, repeat
from operator import ne
from typing import Any

from voda.core.allocation import registry
from voda.core.allocation.base import AllocationAlgorithm
from voda.core.allocation.hetero import DEFAULT_HETERO_POLICY
from voda.core.allocation.reasons import Reason, ReasonCode
from voda.core.goodput import has_gradient
from voda.core.hetero_plan import decide_hetero
from voda.core.model import (
    Action,
    ActionKind,
    Cluster,
    Job,
    JobPlacement,
    JobStatus,
    Placement,
    Plan,
    transition,
    validate_job,
)
from voda.core.placement.base import Placer
from voda.core.placement.registry import DEFAULT_PLACER, get_placer
from voda.core.plan import decide
from voda.core.quotas import QueueSet, with_queues
from voda.core.quotas.algorithm import Observer
from voda.engine.backend import Backend, SupportsAdoption, SupportsDelete, SupportsReasons
from voda.engine.events import PROGRESS_EVENTS, RESCHEDULING_EVENTS, Event, EventKind
from voda.engine.hetero import EarlyGradients, adopt_types, fill_type_models
from voda.engine.snapshots import KeptSnapshots, snapshot_of, snapshot_with

log = logging.getLogger(__name__)
# The logger of a scheduler that only plays the future (voda.engine.forecast): its
# refusals are the live engine's, already said once.
_quiet_log = logging.getLogger(f"{__name__}.quiet")
_quiet_log.disabled = True
_quiet_log.propagate = False

# How much a new epoch measurement counts against what was known (exponential average).
EPOCH_TIME_SMOOTHING = 0.5
# A refused decision is retried after the rate limit (at least RETRY_MIN_SECONDS),
# doubled on each refusal in a row, up to RETRY_MAX_SECONDS.
RETRY_MIN_SECONDS = 1.0
RETRY_MAX_SECONDS = 600.0
# A replay of the engine on virtual time (the simulator, a forecast) stops after this many
# refused decisions with nothing left to change them: the retries would go on for ever.
REFUSALS_TO_GIVE_UP = 3
ALL_GPU_TYPES = "*"  # the key of an error that is not one GPU type's

# Speed and layout history are kept per (job category, GPU type): an A100
# measurement says nothing of a V100.
HistoryKey = tuple[str, str]


@dataclass
class SchedulerSettings:
    algorithm: str = registry.DEFAULT_ALGORITHM
    algorithm_params: dict[str, Any] = field(default_factory=dict)
    # Per-GPU-type overrides: {gpu_type: (name, params)}.
    algorithm_by_gpu_type: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    rate_limit_seconds: float = 30.0
    # How jobs that accept several GPU types get one (voda.core.allocation.hetero), and the
    # restart a move between types costs in its judgement.
    hetero_policy: str = DEFAULT_HETERO_POLICY
    restart_penalty: float = 30.0
    # Team queues (voda.core.quotas): every algorithm runs under them; None: no queues.
    queues: QueueSet | None = None
    # Told every quota decision, per GPU type (the simulator counts reclaims with it).
    queue_observer: Observer | None = None
    # Per job category, its speed on one GPU of each type as profiled beforehand
    # ({category: {gpu_type: speed}}; the simulator gives its profiles' figures, as Sia's
    # artifact gives its Sia): Sia (ours) and Voda's policy project a job's model onto the
    # types it has no model of with them.
    type_speeds: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(slots=True)
class JobRecord:
    """The engine's mutable view of a job; `snapshot()` gives the frozen Job."""

    name: str
    min_workers: int = 1
    max_workers: int = 1
    preferred_workers: int | None = None
    priority: int = 0
    submit_time: float = 0.0
    epochs: int = 1
    completed_epochs: float = 0.0
    category: str = ""
    gpu_type: str = "default"
    queue: str = "default"  # its team queue (voda.core.quotas)
    status: JobStatus = JobStatus.SUBMITTED
    current_workers: int = 0
    attained_gpu_seconds: float = 0.0
    attained_gpu_seconds_since_start: float = 0.0
    running_seconds: float = 0.0
    running_seconds_since_start: float = 0.0
    running_seconds_since_epoch: float = 0.0
    attained_gpu_seconds_since_epoch: float = 0.0
    waiting_seconds: float = 0.0
    waiting_seconds_since_start: float = 0.0
    attained_gpu_seconds_since_promotion: float = 0.0
    running_seconds_since_promotion: float = 0.0
    waiting_seconds_since_promotion: float = 0.0
    first_start_time: float | None = None
    queue_since: float | None = None
    epoch_time_by_workers: dict[int, float] = field(default_factory=dict)
    placement_strategy: str = "consolidated"
    preferred_domain: str | None = None
    network_bandwidth: float | None = None
    latency_sensitive: bool = False
    # Shared by the jobs of one category and GPU type (see Scheduler.layout_history).
    layout_throughput: dict[tuple[int, int], float] = field(default_factory=dict)
    restarts: int = 0
    goodput: Any = None  # voda.core.goodput.GoodputModel, as last reported
    category_goodput: Any = None  # the category's best-measured one (Scheduler.goodput_history)
    oracle: Any = None  # voda.core.oracle.StepOracle (simulator-only truth)
    rescale_delay: float = 0.0  # the backend's extra cost of a change (backend_rescale_delay)
    restart_cost: float = 0.0  # a restart's whole cost there, where known (restart_costs)
    restoring_seconds: float = 0.0  # of a restart still under way (restart_costs)
    nodes: frozenset[str] | None = None  # set by each decision (backend_job_nodes)
    gpu_types: tuple[str, ...] = ()  # the GPU types it accepts (empty: only gpu_type)
    goodput_by_type: dict[str, Any] = field(default_factory=dict)  # set by each decision
    category_early_gradient: tuple[float, float] | None = None  # set by each decision
    category_model_types: tuple[str, ...] = ()  # set by each decision
    category_type_speeds: tuple[tuple[str, float], ...] = ()  # set by each decision
    # Engine-only fields (not part of Job):
    placement: JobPlacement = ()
    finish_time: float | None = None
    rescales: int = 0
    migrations: int = 0
    preemptions: int = 0
    promotions: int = 0
    failure_reason: str | None = None
    # The epoch that includes restoring the checkpoint after the last (re)start, resize or
    # move (the first one run there): progress, but not a measure of speed.
    restore_epoch: int | None = None
    # The size it was last (re)started at, until it reports an epoch there. An epoch the
    # old size still reports after the change was decided (a process stopping gracefully
    # finishes its epoch) moves restore_epoch past it.
    restore_workers: int | None = None
    restore_epoch_before: int | None = None  # the restore epoch of the size before the change
    # When its last (re)start was done (engine time), and what a (re)start costs it as
    # measured here (job seconds; 0: not yet): its restore epoch's time from the
    # (re)start less its steady epoch time at that size (`_measure_restart`).
    restarted_at: float | None = None
    measured_restart_cost: float = 0.0
    reported_by_type: dict[str, Any] = field(default_factory=dict)  # its goodput per GPU type
    type_reason: str | None = None  # why the heterogeneity policy chose its GPU type
    extra: dict[str, Any] = field(default_factory=dict)
    # The frozen copies of its maps the last snapshot handed out (voda.engine.snapshots).
    frozen_maps: dict[str, tuple[dict[Any, Any], Mapping[Any, Any]]] = field(
        default_factory=dict, repr=False, compare=False)

    def snapshot(self) -> Job:
        return snapshot_of(self)

    @classmethod
    def from_job(cls, job: Job) -> JobRecord:
        values = {name: getattr(job, name) for name in _JOB_FIELDS}
        values["epoch_time_by_workers"] = dict(job.epoch_time_by_workers)
        values["layout_throughput"] = dict(job.layout_throughput)
        values["goodput_by_type"] = dict(job.goodput_by_type)
        return cls(**values)


@dataclass(slots=True)
class JobReason:
    """Why a job holds fewer GPUs than its max, as of the last decision, and since when
    (engine clock) its code has been this one."""

    reason: Reason
    since: float

    @property
    def code(self) -> ReasonCode:
        return self.reason.code

    @property
    def message(self) -> str:
        return self.reason.message


def backend_time_scale(backend: object) -> float:
    """The backend's seconds per engine second (its optional `time_scale`; 1 without one)."""
    scale = getattr(backend, "time_scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not (
        math.isfinite(scale) and scale > 0
    ):
        raise ValueError(f"time_scale: the backend's must be a positive number, got {scale!r}")
    return float(scale)


def rescale_delays(backend: object) -> Callable[[str], float] | None:
    """The backend's optional `rescale_delay(job) -> seconds`: what a change of a job's
    workers costs it there beyond the restart the policies charge (None: nothing)."""
    delay = getattr(backend, "rescale_delay", None)
    return delay if callable(delay) else None


def restart_costs(backend: object) -> tuple[Callable[[str], float], Callable[[str], float]] | None:
    """The backend's optional `restart_cost(job)` (seconds one restart costs the job there)
    and `restoring_seconds(job)` (seconds of a restart still under way); None without."""
    cost, restoring = (getattr(backend, n, None) for n in ("restart_cost", "restoring_seconds"))
    return (cost, restoring) if callable(cost) and callable(restoring) else None


def charges_restarts(backend: object) -> bool:
    """Whether any job's `restart_cost` or `restoring_seconds` may be non-zero there: the
    backend's optional `charges_restarts()`, True without one. False lets the engine skip
    asking per job at every decision."""
    charges = getattr(backend, "charges_restarts", None)
    return bool(charges()) if callable(charges) else True


def backend_job_nodes(backend: object, names: list[str]) -> dict[str, frozenset[str]]:
    """The nodes each job may use, where the backend confines it (its optional
    `job_nodes(names)`; a job it leaves out may use every node of its GPU type)."""
    job_nodes = getattr(backend, "job_nodes", None)
    if not callable(job_nodes):
        return {}
    return {name: frozenset(nodes) for name, nodes in job_nodes(names).items()
            if nodes is not None}


def history_key(job: Job | JobRecord) -> HistoryKey:
    """The key of the speed and layout history a job learns from and adds to."""
    return (job.category, job.gpu_type)


def account(record: JobRecord, dt: float) -> None:
    """Add `dt` seconds to a job's counters, running or waiting as it is now."""
    account_all((record,), dt)


def account_all(records: Iterable[JobRecord], dt: float) -> None:
    """`account(record, dt)` of each record, in one loop (no call per job per step)."""
    for record in records:
        workers = record.current_workers
        if workers > 0:
            record.running_seconds += dt
            record.running_seconds_since_start += dt
            record.running_seconds_since_promotion += dt
            gpu_seconds = dt * workers
            record.attained_gpu_seconds += gpu_seconds
            record.attained_gpu_seconds_since_start += gpu_seconds
            record.attained_gpu_seconds_since_promotion += gpu_seconds
            # account_epoch(record, dt), written out: this runs per running job per step.
            record.running_seconds_since_epoch += dt
            record.attained_gpu_seconds_since_epoch += gpu_seconds
        else:
            record.waiting_seconds += dt
            record.waiting_seconds_since_start += dt
            if record.running_seconds_since_promotion > 0:
                record.waiting_seconds_since_promotion += dt


def account_steps(records: Iterable[JobRecord], steps: list[float]) -> None:
    """`account_all(records, dt)` for each `dt` of `steps` in turn, in one pass over the
    records: each counter gets the same additions in the same order (the same floats),
    held in locals between them."""
    if len(steps) == 1:
        account_all(records, steps[0])
        return
    for record in records:
        workers = record.current_workers
        if workers > 0:
            running, since_start = record.running_seconds, record.running_seconds_since_start
            since_promotion = record.running_seconds_since_promotion
            attained = record.attained_gpu_seconds
            attained_since_start = record.attained_gpu_seconds_since_start
            attained_since_promotion = record.attained_gpu_seconds_since_promotion
            since_epoch = record.running_seconds_since_epoch
            attained_since_epoch = record.attained_gpu_seconds_since_epoch
            for dt in steps:
                running += dt
                since_start += dt
                since_promotion += dt
                gpu_seconds = dt * workers
                attained += gpu_seconds
                attained_since_start += gpu_seconds
                attained_since_promotion += gpu_seconds
                since_epoch += dt
                attained_since_epoch += gpu_seconds
            record.running_seconds, record.running_seconds_since_start = running, since_start
            record.running_seconds_since_promotion = since_promotion
            record.attained_gpu_seconds = attained
            record.attained_gpu_seconds_since_start = attained_since_start
            record.attained_gpu_seconds_since_promotion = attained_since_promotion
            record.running_seconds_since_epoch = since_epoch
            record.attained_gpu_seconds_since_epoch = attained_since_epoch
        else:
            waiting, since_start = record.waiting_seconds, record.waiting_seconds_since_start
            for dt in steps:
                waiting += dt
                since_start += dt
            record.waiting_seconds, record.waiting_seconds_since_start = waiting, since_start
            if record.running_seconds_since_promotion > 0:  # unchanged while it waits
                since_promotion = record.waiting_seconds_since_promotion
                for dt in steps:
                    since_promotion += dt
                record.waiting_seconds_since_promotion = since_promotion


def epoch_starts(record: JobRecord) -> None:
    """An epoch ended, or the job goes on from the last one's end: nothing of the next done."""
    record.running_seconds_since_epoch = 0.0
    record.attained_gpu_seconds_since_epoch = 0.0


def account_epoch(record: JobRecord, dt: float) -> None:
    """`dt` seconds run into the epoch under way (the counters since the epoch's start)."""
    record.running_seconds_since_epoch += dt
    record.attained_gpu_seconds_since_epoch += dt * record.current_workers


def promote(record: JobRecord) -> None:
    """The algorithm promoted the job (starvation rule): its queue counters start over."""
    record.attained_gpu_seconds_since_promotion = 0.0
    record.running_seconds_since_promotion = 0.0
    record.waiting_seconds_since_promotion = 0.0
    record.promotions += 1


def layout_key(placement: JobPlacement) -> tuple[int, int]:
    """(workers, nodes spanned) of a placement: the key of Job.layout_throughput."""
    workers = nodes = 0  # (an epoch report reads it: a loop, no list, sum or len)
    for _, count in placement:
        if count > 0:
            workers += count
            nodes += 1
    return workers, nodes


def _smoothed(old: float | None, new: float) -> float:
    """A new measurement folded into what was known (exponential average)."""
    return new if old is None else old + EPOCH_TIME_SMOOTHING * (new - old)


_JOB_FIELDS = tuple(f.name for f in fields(Job))
_ABSENT = object()  # a job with no class noted yet


class _ByKey(dict[str, tuple[Any, ...]]):
    """A dict whose missing value is worked out from its key, once."""

    def __init__(self, make: Callable[[str], tuple[Any, ...]]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key: str) -> tuple[Any, ...]:
        value = self[key] = self.make(key)
        return value


class SchedulerObserver:
    """Hooks for persistence and metrics; override what you need."""

    def on_status(self, record: JobRecord, old: JobStatus, new: JobStatus, now: float) -> None:
        pass

    def on_plan(self, plan: Plan, now: float, seconds: float, allocation_seconds: float) -> None:
        pass

    def on_error(self, error: Exception, now: float, gpu_type: str = ALL_GPU_TYPES) -> None:
        """A decision was refused for `gpu_type` (ALL_GPU_TYPES: for every type)."""

    def on_recovered(self, gpu_type: str, now: float) -> None:
        """`gpu_type`, refused before, was decided again."""

    def on_epoch(self, record: JobRecord, epoch: int, seconds: float, workers: int) -> None:
        pass

    def on_promoted(self, record: JobRecord, now: float) -> None:
        """The algorithm promoted a waiting job (its queue counters started over)."""

    def on_goodput(self, record: JobRecord, category_learned: bool) -> None:
        """A job reported its goodput model (`record.goodput`); `category_learned`: it is
        now its category's best-measured one (Scheduler.goodput_history)."""

    def on_reason(self, record: JobRecord, old: JobReason | None, new: JobReason | None,
                  now: float) -> None:
        """The code of the job's reason changed (None: it holds its max, or ended)."""

    def on_event_failed(self, event: Event, error: Exception, now: float) -> None:
        """Applying one of the backend's events raised; it was dropped, the others applied."""


class DecisionRefused(RuntimeError):
    """A decision for one GPU type (or all) was refused; its plan in force stays."""

    def __init__(self, gpu_type: str, reason: str) -> None:
        self.gpu_type = gpu_type
        self.reason = reason
        where = "every GPU type" if gpu_type == ALL_GPU_TYPES else f"GPU type {gpu_type!r}"
        super().__init__(f"rescheduling refused for {where}: {reason}")


class Scheduler:
    # Whether take_events may leave its step to add later, with the next ones in one pass
    # (_account's `defer`); False: each step is added at once (the reference).
    defers_accounting = True

    def __init__(
        self,
        backend: Backend,
        settings: SchedulerSettings | None = None,
        placer: Placer | None = None,
        observers: Iterable[SchedulerObserver] = (),
        category_history: Mapping[HistoryKey, Mapping[int, float]] | None = None,
        now: float = 0.0,
        layout_history: Mapping[HistoryKey, Mapping[tuple[int, int], float]] | None = None,
        goodput_history: Mapping[HistoryKey, Any] | None = None,
        quiet: bool = False,
        explain: bool = True,
    ) -> None:
        """`quiet`: log nothing; `explain`: keep each job's reason (job_reasons). A
        forecast's replay of the engine does neither."""
        self.backend = backend
        self.log = _quiet_log if quiet else log
        self.explain = explain
        # Job seconds per engine second: every per-job counter is kept in job seconds.
        self.time_scale = backend_time_scale(backend)
        self.settings = settings or SchedulerSettings()
        self.placer = placer if placer is not None else get_placer(DEFAULT_PLACER)
        self.observers = list(observers)
        self.jobs: dict[str, JobRecord] = {}
        self.active: dict[str, JobRecord] = {}  # not terminal
        # Seconds per epoch by workers, per (category, GPU type).
        self.category_history: dict[HistoryKey, dict[int, float]] = {
            k: dict(v) for k, v in (category_history or {}).items()
        }
        # Samples per second by (workers, nodes spanned) per (category, GPU type): every
        # job of the category on that type holds the same dict, so what one job runs,
        # the others learn.
        self.layout_history: dict[HistoryKey, dict[tuple[int, int], float]] = {
            k: dict(v) for k, v in (layout_history or {}).items()
        }
        # The throughput model (voda.core.goodput) measured on the most GPUs, per
        # (category, GPU type), from batch-adaptive jobs' reports (the service stores it).
        self.goodput_history: dict[HistoryKey, Any] = dict(goodput_history or {})
        # Per category, the gradient statistics of its jobs' first reports (hetero Voda).
        self.early_gradients = EarlyGradients()
        self.cluster = Cluster(tuple(backend.nodes()))
        self._algorithms: dict[str, AllocationAlgorithm] = {}
        self._build_algorithms(self.settings)
        self._dirty = True
        self._last_accounted = now
        self._last_reschedule: float | None = None
        self._priority_classes: dict[str, Hashable] = {}
        self._arrivals: list[tuple[float, str]] = []  # jobs submitted for a later time
        self._adopted_for_later = False  # a job adopted submitted for later than accounted
        self.last_plan: Plan | None = None
        # Refused decisions in force, by GPU type (ALL_GPU_TYPES when decide() raised).
        self.errors: dict[str, DecisionRefused] = {}
        self.last_error: DecisionRefused | None = None
        self._refusals_in_a_row = 0
        self._retry_at: float | None = None
        self.reschedules = 0
        self.failed_events = 0
        # What called for the next decision, and what called for the last one.
        self._reasons: set[EventKind] = set()
        self.last_reasons: tuple[EventKind, ...] = ()
        # Why each active job below its max holds what it holds (voda.core.allocation.reasons).
        self.job_reasons: dict[str, JobReason] = {}
        self._lost_on: dict[str, str] = {}  # jobs that lost workers with a node, and the node
        self._undecided: set[str] = set()  # submitted, not yet seen by a decision
        # Each job's snapshot kept between decisions when no reasons are worked out
        # (voda.engine.snapshots); dropped wherever a field other than its counters changes.
        self._kept = KeptSnapshots()
        # Whether a record may hold a restart cost or restore that a backend which charges
        # none must zero (_ask_backend_costs): a job taken in may bring one.
        self._costs_to_zero = True
        # Steps accounted up to `_last_accounted` but not yet added to the active jobs'
        # counters (_account with `defer`), and the jobs that hold the first n of them
        # already (taken in since, or brought up to date alone): see _add_unadded.
        self._unadded: list[float] = []
        self._unadded_from: dict[str, int] = {}

    # ----- configuration -------------------------------------------------
    def _under_queues(self, algorithm: AllocationAlgorithm) -> AllocationAlgorithm:
        return with_queues(algorithm, self.settings.queues, self.settings.queue_observer)

    def _build_algorithms(self, settings: SchedulerSettings) -> None:
        default = self._under_queues(registry.create(settings.algorithm,
                                                     settings.algorithm_params))
        by_type = {
            gpu_type: self._under_queues(registry.create(name, params))
            for gpu_type, (name, params) in settings.algorithm_by_gpu_type.items()
        }
        self._default_algorithm = default
        self._algorithms = by_type

    def _any_algorithm_has(self, hook: str) -> bool:
        """Whether any GPU type's algorithm has the optional hook (a per-job loop over the
        active jobs at every step is skipped when none has)."""
        return any(getattr(a, hook, None) is not None
                   for a in (self._default_algorithm, *self._algorithms.values()))

    def _hooks_by_type(self, *hooks: str) -> dict[str, tuple[Any, ...]]:
        """Each GPU type's algorithm's optional `hooks` (None where it has none), looked up
        once per type on first use rather than once per active job."""
        def of_type(gpu_type: str) -> tuple[Any, ...]:
            algorithm = self.algorithm_for(gpu_type)
            return tuple(getattr(algorithm, hook, None) for hook in hooks)

        return _ByKey(of_type)

    def algorithm_for(self, gpu_type: str) -> AllocationAlgorithm:
        return self._algorithms.get(gpu_type, self._default_algorithm)

    @property
    def default_algorithm(self) -> AllocationAlgorithm:
        """The algorithm of every GPU type that has none of its own."""
        return self._default_algorithm

    def set_algorithm(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        gpu_type: str | None = None,
    ) -> None:
        """Switch algorithm; an unknown name raises UnknownAlgorithm and changes nothing."""
        algorithm = self._under_queues(registry.create(name, params))  # raises first
        if gpu_type is None:
            self.settings.algorithm = name
            self.settings.algorithm_params = dict(params or {})
            self._default_algorithm = algorithm
        else:
            self.settings.algorithm_by_gpu_type[gpu_type] = (name, dict(params or {}))
            self._algorithms[gpu_type] = algorithm
        self._mark(EventKind.ALGORITHM_CHANGED)

    def set_queues(self, queues: QueueSet | None) -> None:
        """Put other team queues in force (the quota layer wraps every algorithm): the next
        decision runs under them."""
        self.settings.queues = queues or None
        self._build_algorithms(self.settings)
        self._mark(EventKind.ALGORITHM_CHANGED)

    def set_rate_limit(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"rate_limit_seconds: must not be negative, got {seconds}")
        self.settings.rate_limit_seconds = seconds

    # ----- job and node changes -------------------------------------------
    def submit(self, job: Job) -> JobRecord:
        problems = validate_job(job)
        if problems:
            raise ValueError(f"job {job.name!r}: " + "; ".join(problems))
        if job.name in self.jobs:
            raise ValueError(f"job {job.name!r}: name already in use")
        record = JobRecord.from_job(job)
        known = self.category_history.get(history_key(record))
        if not record.epoch_time_by_workers and known:
            record.epoch_time_by_workers = dict(known)
        self._share_category(record)  # (it drops a snapshot kept under the name)
        self._costs_to_zero = True
        self._taken_in(record.name)
        self.jobs[job.name] = record
        if not record.status.is_terminal:
            self.active[job.name] = record
            if record.status is JobStatus.SUBMITTED and record.submit_time > self._last_accounted:
                heapq.heappush(self._arrivals, (record.submit_time, record.name))
        self._mark(EventKind.JOB_SUBMITTED)
        if not record.status.is_terminal:
            self._undecided.add(record.name)
        return record

    def adopt(self, record: JobRecord) -> None:
        """Take back a job as it was (after a restart): status, service and placement kept.

        Running jobs are adopted, not restarted; the next rescheduling decides afresh.
        """
        self._share_category(record)  # (it drops a snapshot kept under the name)
        self._costs_to_zero = True
        self._taken_in(record.name)
        self.jobs[record.name] = record
        if not record.status.is_terminal:
            self.active[record.name] = record
            if record.status is JobStatus.SUBMITTED and record.submit_time > self._last_accounted:
                self._adopted_for_later = True  # (no arrival noted: each step looks at all)
        self._mark(EventKind.JOB_SUBMITTED)

    def _learn_goodput(self, record: JobRecord) -> bool:
        """Keep, per category and GPU type, the reported throughput model measured on the
        most GPUs, and show it to the category's active jobs (a new one starts from it).
        True when the job's model is now its category's."""
        model = record.goodput
        if not record.category or model is None or model.perf is None:
            return False
        key = history_key(record)
        held = self.goodput_history.get(key)
        if held is not None and model.max_profiled_replicas <= held.max_profiled_replicas:
            return False
        self.goodput_history[key] = model
        for other in self.active.values():
            if history_key(other) == key:
                other.category_goodput = model
                self._kept.forget(other.name)
        return True

    def _share_category(self, record: JobRecord) -> None:
        """Point the job at its category's layout history on its GPU type, adding what it
        brought, and show it the category's best-measured goodput model. A snapshot kept
        under its name is dropped (a job taken in, or its maps changed)."""
        self._kept.forget(record.name)
        if not record.category:
            return
        key = history_key(record)
        shared = self.layout_history.setdefault(key, {})
        for layout, seconds in record.layout_throughput.items():
            shared.setdefault(layout, seconds)
        record.layout_throughput = shared
        record.category_goodput = self.goodput_history.get(key)

    def delete(self, name: str, now: float) -> JobRecord:
        record = self.jobs[name]
        if record.status.is_terminal:
            return record
        self._account(now)
        if record.current_workers > 0 or record.placement:
            if isinstance(self.backend, SupportsDelete):
                self.backend.delete(name)
            else:
                self.backend.halt(record.snapshot())
        self._finish(record, JobStatus.CANCELED, now)
        self._mark(EventKind.JOB_DELETED)
        return record

    def set_priority(self, name: str, priority: int) -> None:
        if priority < 0:
            raise ValueError(f"priority: must not be negative (0 is highest), got {priority}")
        self.jobs[name].priority = priority
        self._kept.forget(name)
        self._mark(EventKind.PRIORITY_CHANGED)

    def handle(self, event: Event) -> None:
        """Apply one event to the state (accounting must be up to date)."""
        kind = event.kind
        record = self.jobs.get(event.job) if event.job else None
        if self._unadded:  # the counters this event reads or changes, up to date
            if record is not None:
                self._add_unadded_to(record)
            else:
                self._add_unadded()
        if kind is EventKind.EPOCH_REPORTED:  # by far the most frequent: tested first
            # (a progress event: it reschedules only for an algorithm that decides on it)
            if record:
                self._record_epoch(record, event)
                if getattr(self.algorithm_for(record.gpu_type), "decides_on_progress", False):
                    self._mark(kind)
            return
        if record is not None:
            self._kept.forget(record.name)
        if kind is EventKind.JOB_COMPLETED and record and not record.status.is_terminal:
            record.completed_epochs = float(record.epochs)
            self._finish(record, JobStatus.COMPLETED, event.time)
        elif kind is EventKind.JOB_FAILED and record and not record.status.is_terminal:
            record.failure_reason = str(event.data.get("reason", "failed"))
            self._finish(record, JobStatus.FAILED, event.time)
        elif kind is EventKind.GOODPUT_REPORTED and record:
            if not has_gradient(record.goodput) and record.category:
                self.early_gradients.add(record.category, event.data["goodput"])
            record.goodput = event.data["goodput"]
            record.reported_by_type[record.gpu_type] = record.goodput
            learned = self._learn_goodput(record)
            for observer in self.observers:
                observer.on_goodput(record, learned)
        elif kind is EventKind.NODE_ADDED and event.node is not None:
            nodes = [n for n in self.cluster.nodes if n.name != event.node.name]
            self.cluster = Cluster((*nodes, event.node))
        elif kind is EventKind.NODE_REMOVED and event.node is not None:
            self._drop_node(event.node.name)
        if kind in RESCHEDULING_EVENTS or (
            kind in PROGRESS_EVENTS and record is not None
            and getattr(self.algorithm_for(record.gpu_type), "decides_on_progress", False)
        ):
            self._mark(kind)

    def halt_jobs_on(self, node_name: str, now: float) -> list[str]:
        """Halt the jobs with workers on a node that is leaving (a drain): they keep their
        checkpoints and wait for the next decision, which places them elsewhere."""
        self._account(now)
        halted = []
        for record in list(self.active.values()):
            if any(node == node_name for node, _ in record.placement):
                halt = Action(ActionKind.HALT, record.name, record.placement, ())
                self._act(record, halt)  # as a decision's halt: backend first, then records
                self._record(record, halt, now)
                halted.append(record.name)
                self._node_lost(record, node_name, halt.workers_before, now)
        if halted:
            self._mark(EventKind.NODE_REMOVED)
        return halted

    def _drop_node(self, node_name: str) -> None:
        self.cluster = Cluster(tuple(n for n in self.cluster.nodes if n.name != node_name))
        for record in self.active.values():
            if any(node == node_name for node, _ in record.placement):
                lost = sum(c for n, c in record.placement if n == node_name)
                self._place(record, tuple((n, c) for n, c in record.placement if n != node_name))
                self._node_lost(record, node_name, lost, self._last_accounted)
                if record.current_workers == 0 and record.status is JobStatus.RUNNING:
                    self._set_status(record, JobStatus.WAITING, self._last_accounted)

    def _record_epoch(self, record: JobRecord, event: Event) -> None:
        data = event.data
        workers = int(data["workers"])
        seconds = float(data["epoch_seconds"])
        epoch = int(data.get("epoch", record.completed_epochs + 1))
        if workers < 1 or not seconds > 0:
            return
        completed = record.completed_epochs
        if epoch > completed:
            epoch_starts(record)
            # Accounting ran up to the step before the report was read: what ran since the
            # epoch ended belongs to the next one.
            since = (self._last_accounted - event.time) * self.time_scale
            if since > 0 and record.current_workers > 0:
                account_epoch(record, since)
            record.completed_epochs = float(epoch)  # max(completed, epoch)
        measured = record.restore_epoch is None or epoch > record.restore_epoch
        if record.restore_workers is not None and record.restore_epoch is not None:
            if workers == record.restore_workers:
                record.restore_workers = None  # the new size reports: the restore is behind
                if epoch == record.restore_epoch:
                    self._measure_restart(record, workers, event.time)
            elif epoch >= record.restore_epoch:
                # The old size still ran this epoch (stopping gracefully, it finishes the
                # one under way): a speed of the old size unless it held that size's own
                # restore; the new size's first epoch is the next one.
                record.restore_epoch = epoch + 1
                before = record.restore_epoch_before
                measured = before is None or epoch > before
        if measured:
            times = record.epoch_time_by_workers
            new = _smoothed(times.get(workers), seconds)
            times[workers] = new
            self._kept.map_changed(record, "epoch_time_by_workers")
            if record.category:
                self.category_history.setdefault(history_key(record), {})[workers] = new
            rate = data.get("samples_per_second")
            if rate is not None:
                self._record_layout(record, rate, workers)
        for observer in self.observers:
            observer.on_epoch(record, epoch, seconds, workers)

    def _measure_restart(self, record: JobRecord, workers: int, at: float) -> None:
        """The job's restore epoch at `workers` ended at `at`: the time since its (re)start
        beyond its steady epoch time there is what the (re)start cost it (processes
        started, rendezvous, checkpoint read). Unknown until that size's speed is."""
        steady = record.epoch_time_by_workers.get(workers)
        if record.restarted_at is None or steady is None:
            return
        cost = (at - record.restarted_at) * self.time_scale - steady
        record.restarted_at = None
        if cost >= 0 and math.isfinite(cost):
            record.measured_restart_cost = _smoothed(record.measured_restart_cost or None, cost)
            if restart_costs(self.backend) is None:  # else the backend's figure is used
                record.restart_cost = record.measured_restart_cost
                self._kept.forget(record.name)
                self._costs_to_zero = True

    @staticmethod
    def _record_layout(record: JobRecord, rate: Any, workers: int) -> None:
        """Note the throughput `rate` a report gave of the layout the job runs on."""
        rate = float(rate)
        if not rate > 0:
            return  # no throughput
        key = layout_key(record.placement)
        if key[0] != workers:
            return  # the job was resized since: another layout
        throughputs = record.layout_throughput
        throughputs[key] = _smoothed(throughputs.get(key), rate)

    # ----- time ------------------------------------------------------------
    def _account(self, now: float, defer: bool = False) -> None:
        """Count the time up to `now` into the active jobs' counters, with the steps left
        to add before. `defer`: where every active job counts the whole step, leave it to
        add too (_add_unadded, which every reader of the counters calls first)."""
        dt = now - self._last_accounted
        if dt <= 0:
            if not defer:
                self._add_unadded()
            return
        scale = self.time_scale  # the counters are in job seconds
        step = dt * scale
        last = self._last_accounted
        if not self._arrivals and not self._adopted_for_later and self.defers_accounting:
            # Every active job counts the whole step: with the steps left before, in one pass.
            self._unadded.append(step)
            self._last_accounted = now
            if not defer:
                self._add_unadded()
            return
        self._add_unadded()
        if not self._arrivals and not self._adopted_for_later:
            # No job is submitted for later than `last`: every one counts the whole step.
            account_all(self.active.values(), step)
            self._last_accounted = now
            return
        submitted = JobStatus.SUBMITTED
        # Jobs that arrived in between are counted from their arrival; one submitted for
        # later, not at all; every other job for the whole step, in one loop.
        counted = [r for r in self.active.values()
                   if r.status is not submitted or r.submit_time <= last]
        account_all(counted, step)
        if len(counted) < len(self.active):
            for record in self.active.values():
                if record.status is submitted and last < record.submit_time < now:
                    account(record, (now - record.submit_time) * scale)
        self._last_accounted = now

    def _add_unadded(self) -> None:
        """Add the steps `_account` deferred to every active job's counters, each job the
        ones it was active for, in order: what accounting each step at once would give."""
        steps = self._unadded
        if not steps:
            return
        joined = self._unadded_from
        if not joined:
            account_steps(self.active.values(), steps)
        else:
            account_steps([r for r in self.active.values() if r.name not in joined], steps)
            for name, start in joined.items():
                record = self.active.get(name)
                if record is not None and start < len(steps):
                    account_steps((record,), steps[start:])
        self._unadded = []
        self._unadded_from = {}

    def _add_unadded_to(self, record: JobRecord) -> None:
        """`_add_unadded` for one record (an event's), if active."""
        name = record.name
        if self.active.get(name) is not record:
            return
        steps = self._unadded
        start = self._unadded_from.get(name, 0)
        if start < len(steps):
            account_steps((record,), steps[start:])
        self._unadded_from[name] = len(steps)

    def _taken_in(self, name: str) -> None:
        """A job taken in (submitted, adopted) counts none of the steps accounted before."""
        if self._unadded:
            self._unadded_from[name] = len(self._unadded)

    def settle_accounting(self) -> None:
        """Bring every active job's counters up to the accounted time (`take_events` may
        leave steps to add: see _account)."""
        self._add_unadded()

    def _take_arrivals(self, now: float) -> None:
        """Jobs submitted for a later time call for a decision when that time comes."""
        while self._arrivals and self._arrivals[0][0] <= now:
            _, name = heapq.heappop(self._arrivals)
            if name in self.active:
                self._mark(EventKind.JOB_SUBMITTED)

    def _sole_algorithm(self) -> AllocationAlgorithm | None:
        """The algorithm of every GPU type, where one serves them all; else None."""
        default = self._default_algorithm
        if all(a is default for a in self._algorithms.values()):
            return default
        return None

    def _counted_now(self, now: float) -> list[JobRecord]:
        """The active jobs other than those submitted for later than `now`."""
        if not self._arrivals and not self._adopted_for_later and now >= self._last_accounted:
            # (each job submitted for later than the last accounted time is an arrival)
            return list(self.active.values())
        submitted = JobStatus.SUBMITTED
        return [r for r in self.active.values()
                if r.status is not submitted or r.submit_time <= now]

    def _check_priority_classes(self, now: float) -> None:
        """Apply due promotions and note jobs whose priority class (e.g. Tiresias queue)
        changed; a change reschedules."""
        if not self._any_algorithm_has("priority_class"):  # FIFO and the like: no classes
            self._priority_classes = {}
            return
        sole = self._sole_algorithm()
        batch = getattr(sole, "promotions_and_classes", None)
        if batch is not None and getattr(sole, "priority_class", None) is not None:
            self._check_priority_classes_at_once(now, batch)
        else:
            self._check_priority_classes_per_job(now)

    def _check_priority_classes_at_once(
        self, now: float,
        batch: Callable[[list[JobRecord]], tuple[list[int], list[int]]],
    ) -> None:
        """`_check_priority_classes_per_job` where one algorithm serves every job and
        tells the due promotions and the classes of them all in one pass (its optional
        `promotions_and_classes(jobs)`); only the jobs whose class differs are visited."""
        records = self._counted_now(now)
        due, classes = batch(records)
        for i in due:
            record = records[i]
            promote(record)
            self._kept.forget(record.name)
            for observer in self.observers:
                observer.on_promoted(record, now)
        names = [r.name for r in records]
        before = list(map(self._priority_classes.get, names, repeat(_ABSENT)))
        changed = False
        if before != classes:
            for i in compress(range(len(classes)), map(ne, before, classes)):
                record = records[i]
                if before[i] is not _ABSENT:
                    changed = True
                elif record.queue_since is not None:
                    continue
                record.queue_since = now
                self._kept.forget(record.name)
        self._priority_classes = dict(zip(names, classes, strict=True))
        if changed:
            self._mark(EventKind.QUEUE_CHANGED)

    def _check_priority_classes_per_job(self, now: float) -> None:
        """`_check_priority_classes` asking each job's algorithm about it (the reference)."""
        changed = False
        classes: dict[str, Hashable] = {}
        hooks = self._hooks_by_type("priority_class", "promotion_due")
        submitted = JobStatus.SUBMITTED
        for name, record in self.active.items():
            priority_class, promotion_due = hooks[record.gpu_type]
            if priority_class is None:
                continue
            if record.status is submitted and record.submit_time > now:
                continue
            # The read-only hooks get the live record (it has every Job field): a frozen
            # copy per job per step was most of the cost of long simulations.
            if promotion_due is not None and promotion_due(record):
                promote(record)
                self._kept.forget(name)
                for observer in self.observers:
                    observer.on_promoted(record, now)
            cls = priority_class(record)
            classes[name] = cls
            if name not in self._priority_classes:
                if record.queue_since is None:
                    record.queue_since = now
                    self._kept.forget(name)
            elif self._priority_classes[name] != cls:
                record.queue_since = now
                self._kept.forget(name)
                changed = True
        self._priority_classes = classes
        if changed:
            self._mark(EventKind.QUEUE_CHANGED)

    def next_wakeup(self, now: float) -> float | None:
        """When `step` has work to do next without any new event, or None."""
        self._add_unadded()
        candidates = []
        if self._dirty:
            candidates.append(self._earliest_reschedule(now))
        if self._retry_at is not None:
            candidates.append(max(now, self._retry_at))
        if self._arrivals:
            candidates.append(max(now, self._arrivals[0][0]))
        timed = self._any_algorithm_has("seconds_until_class_change")
        earliest = getattr(self._sole_algorithm(), "earliest_class_change", None)
        if timed and earliest is not None:
            seconds = earliest(list(self.active.values()))
            if seconds is not None:  # the least wake-up of those the per-job loop adds
                candidates.append(now + max(seconds / self.time_scale, 1e-6))
            timed = False
        hooks = self._hooks_by_type("seconds_until_class_change") if timed else {}
        for record in self.active.values() if timed else ():
            until = hooks[record.gpu_type][0]
            if until is not None:
                seconds = until(record)  # read-only hook: the live record, as above
                if seconds is not None and seconds >= 0:  # job seconds: on the engine's clock
                    candidates.append(now + max(seconds / self.time_scale, 1e-6))
        return min(candidates) if candidates else None

    def _earliest_reschedule(self, now: float) -> float:
        if self._last_reschedule is None:
            return now
        return max(now, self._last_reschedule + self.settings.rate_limit_seconds)

    # ----- the step ----------------------------------------------------------
    def step(self, now: float, force: bool = False) -> Plan | None:
        """Advance to `now`, take in events and reschedule when due. Returns the applied plan.

        `force`: decide now even if nothing changed and the rate limit would wait (a
        fixed round: progress alone can change what an algorithm decides).
        """
        self._account(now)
        self._handle_events(now)
        self._take_arrivals(now)
        self._check_priority_classes(now)
        if self._retry_at is not None and now >= self._retry_at:
            self._retry_at = None
            self._dirty = True
        if not self._dirty and not force:
            return None
        if not force and self._earliest_reschedule(now) > now:
            self._rate_limited(now)
            return None
        return self.reschedule(now)

    def take_events(self, now: float) -> None:
        """Advance to `now` and take in what the backend reported, without deciding: a
        job submitted next starts from what its category measured up to then. The jobs'
        counters may be left behind the accounted time until `settle_accounting` (or
        anything else that reads them): a replay that takes events at every arrival adds
        its steps to every job once per decision, in one pass."""
        self._account(now, defer=True)
        self._handle_events(now)

    def _handle_events(self, now: float) -> None:
        for event in self.backend.events():
            self._handle_taken(event, now)

    def _handle_taken(self, event: Event, now: float) -> None:
        """Apply an event the backend has handed over. The backend will not hand it over
        again, so an error here must not cost the events after it (a completion among them
        would leave its job holding GPUs for ever): the one event is dropped, loudly."""
        try:
            self.handle(event)
        except Exception as error:
            self.log.exception("event %s (job %s, node %s) could not be applied; dropped",
                               event.kind, event.job, event.node.name if event.node else None)
            self.failed_events += 1
            for observer in self.observers:
                observer.on_event_failed(event, error, now)

    def reschedule(self, now: float) -> Plan | None:
        self._account(now)
        self._dirty = False
        self._retry_at = None
        self._last_reschedule = now
        self.last_reasons = tuple(sorted(self._reasons))
        self._reasons = set()
        self._ask_backend_costs()
        records = []
        arrived = []  # the jobs submitted by now and not yet started (see _apply)
        previous: Placement = {}
        submitted = JobStatus.SUBMITTED
        confines = callable(getattr(self.backend, "job_nodes", None))
        for r in self.active.values():
            if r.placement:
                previous[r.name] = r.placement
            if r.status is not submitted or r.submit_time <= now:
                records.append(r)
                if r.status is submitted:
                    arrived.append(r)
                if not confines and r.nodes is not None:
                    r.nodes = None  # the backend confines no job: each may use every node
                    self._kept.forget(r.name)
        if confines:
            confined = backend_job_nodes(self.backend, [r.name for r in records])
            for r in records:
                r.nodes = confined.get(r.name)
            self._kept.clear()
        if self.explain:  # the plan's reasons are worked out later, from its snapshots
            self._kept.clear()
            jobs = list(map(snapshot_of, records))
        else:
            jobs = self._kept.take(records)
        started = time.perf_counter()
        try:
            plan = self._decide(records, jobs, previous)
        except Exception as exc:  # decide() itself broke: nothing changes, retry later
            self.log.exception("rescheduling failed, the plan in force stays")
            self._refused({ALL_GPU_TYPES: f"{type(exc).__name__}: {exc}"}, now)
            self._all_refused(now)
            return None
        decided = time.perf_counter()
        failure = self._apply(plan, now, arrived)
        reasons = dict(plan.errors)
        if failure is not None:
            reasons[ALL_GPU_TYPES] = failure
        self._refused(reasons, now)
        if failure is not None:
            self._dirty = True  # decide again on what the backend says runs
            self._all_refused(now)
            return None
        if self.explain:
            self._note_reasons(plan, now)
        self.last_plan = plan
        self.reschedules += 1
        elapsed = time.perf_counter() - started
        for observer in self.observers:
            observer.on_plan(plan, now, elapsed, decided - started)
        return plan

    def _ask_backend_costs(self) -> None:
        """Each active job's rescale delay, restart cost and restore under way, where the
        backend tells them."""
        delay_of = rescale_delays(self.backend)
        if delay_of is not None:
            for r in self.active.values():
                r.rescale_delay = max(0.0, float(delay_of(r.name)))
            self._kept.clear()
        costs = restart_costs(self.backend)
        if costs is None:
            return
        cost_of, restoring_of = costs
        if charges_restarts(self.backend):
            for r in self.active.values():
                r.restart_cost = max(0.0, float(cost_of(r.name)))
                r.restoring_seconds = max(0.0, float(restoring_of(r.name)))
            self._kept.clear()
            self._costs_to_zero = True
            return
        if not self._costs_to_zero:
            return  # every record is at 0 since the last pass: no job taken in since
        for r in self.active.values():  # what asking would give every job
            if r.restart_cost or r.restoring_seconds:
                r.restart_cost = r.restoring_seconds = 0.0
                self._kept.forget(r.name)
        self._costs_to_zero = False

    def _decide(self, records: list[JobRecord], jobs: list[Job], previous: Placement) -> Plan:
        """decide(), after the heterogeneity policy chose a type for each job that accepts
        several (voda.core.hetero_plan); the chosen types become the jobs' own."""
        if not any(j.gpu_types for j in jobs):
            algorithms = {t: self.algorithm_for(t) for t in {j.gpu_type for j in jobs}}
            return decide(jobs, self.cluster, previous, algorithms, self.placer,
                          explain_reasons=self.explain)
        types = self.cluster.gpu_types()
        self._kept.clear()  # the types, models and maps chosen here change the records
        fill_type_models(records, self.goodput_history, types, self.early_gradients,
                         self.settings.type_speeds)
        jobs = [r.snapshot() for r in records]
        algorithms = {t: self.algorithm_for(t) for t in {*types, *(j.gpu_type for j in jobs)}}
        plan, choice, typed = decide_hetero(
            jobs, self.cluster, previous, algorithms, self.placer,
            policy=self.settings.hetero_policy, penalty=self.settings.restart_penalty,
            explain_reasons=self.explain)
        for name in adopt_types(self.active, typed, choice):
            self._share_category(self.active[name])
        self._kept.clear()
        for name, why in choice.why.items():
            if name in self.active:
                self.active[name].type_reason = why
        return plan

    def _refused(self, reasons: Mapping[str, str], now: float) -> None:
        """Note the refused GPU types (and the recovered ones); schedule a retry if any."""
        for gpu_type in sorted(set(self.errors) - set(reasons)):
            del self.errors[gpu_type]
            for observer in self.observers:
                observer.on_recovered(gpu_type, now)
        if not reasons:
            self._refusals_in_a_row = 0
            self.last_error = None
            return
        for gpu_type, reason in sorted(reasons.items()):
            before = self.errors.get(gpu_type)
            error = self.errors[gpu_type] = DecisionRefused(gpu_type, reason)
            self.last_error = error
            # Said once: each retry that is refused the same way is only a debug line.
            said = self.log.debug if before is not None and before.reason == reason \
                else self.log.error
            said("%s; the plan in force stays", error,
                 extra={"event": "error", "gpu_type": gpu_type, "reason": reason})
            for observer in self.observers:
                observer.on_error(error, now, gpu_type)
        self._refusals_in_a_row += 1
        delay = max(self.settings.rate_limit_seconds, RETRY_MIN_SECONDS)
        delay *= 2.0 ** min(self._refusals_in_a_row - 1, 30)
        self._retry_at = now + min(delay, RETRY_MAX_SECONDS)

    def _apply(self, plan: Plan, now: float, arrived: Iterable[JobRecord] | None = None
               ) -> str | None:
        """Carry the actions out: the backend acts first, the records follow; then the jobs
        submitted by now that were given no GPUs wait. `arrived`: the active jobs that may
        be among them (submitted, in the active jobs' order), where the caller has them.

        Returns why, when the backend failed an action: the rest is not tried and the
        records are made to say what the backend runs.
        """
        for action in plan.actions:
            record = self.jobs[action.job]
            try:
                self._act(record, action)
            except Exception as exc:  # any backend may fail in any way
                self.log.error("backend failed to %s %s: %s; rereading what runs",
                               action.kind, action.job, exc,
                               extra={"event": "error", "job": action.job})
                self._resync(now)
                return f"backend failed to {action.kind} {action.job}: {exc}"
            self._record(record, action, now)
        submitted, allocated = JobStatus.SUBMITTED, plan.allocation.get
        for record in self.active.values() if arrived is None else arrived:
            if record.status is submitted and allocated(record.name, 0) == 0 and (
                record.submit_time <= now
            ):
                self._set_status(record, JobStatus.WAITING, now)
        return None

    def _act(self, record: JobRecord, action: Action) -> None:
        """Tell the backend to carry out one action (the records are not touched)."""
        if action.kind is ActionKind.HALT:
            self.backend.halt(record.snapshot())
            return
        after = snapshot_with(record, current_workers=action.workers_after)
        if action.kind is ActionKind.START:
            self.backend.start(after, action.new)
        else:
            self.backend.scale(after, action.new)

    def _record(self, record: JobRecord, action: Action, now: float) -> None:
        """Note in the engine's records what the backend did."""
        self._kept.forget(record.name)
        if action.kind is ActionKind.HALT:
            record.preemptions += 1
            self._place(record, ())
            self._set_status(record, JobStatus.WAITING, now)
            return
        self._restarting(record, action.workers_after, now)
        if action.kind is ActionKind.START:
            if record.first_start_time is not None:
                record.restarts += 1
            self._place(record, action.new)
            record.attained_gpu_seconds_since_start = 0.0
            record.running_seconds_since_start = 0.0
            record.waiting_seconds_since_start = 0.0
            if record.first_start_time is None:
                record.first_start_time = now
            self._set_status(record, JobStatus.RUNNING, now)
            return
        self._place(record, action.new)
        if action.kind is ActionKind.MIGRATE:
            record.migrations += 1
        else:
            record.rescales += 1
        record.restarts += 1

    def _resync(self, now: float) -> None:
        """Make the records say what the backend runs, when it can tell (after a failure)."""
        if not isinstance(self.backend, SupportsAdoption) or not callable(self.backend.running):
            return  # the failed action is taken as not done; those before it stand
        running = self.backend.running()
        for name, record in self.active.items():
            actual = tuple(running.get(name, ()))
            if actual == record.placement:
                continue
            started = not record.placement and actual
            self._place(record, actual)
            if started:
                self._restarting(record, record.current_workers, now)
                if record.first_start_time is None:
                    record.first_start_time = now
                self._set_status(record, JobStatus.RUNNING, now)
            elif not actual and record.status is JobStatus.RUNNING:
                record.preemptions += 1
                self._set_status(record, JobStatus.WAITING, now)

    # ----- reasons ---------------------------------------------------------------
    def _set_reason(self, record: JobRecord, reason: Reason | None, now: float) -> None:
        """Keep the job's reason; `since` and the observers move only when its code does."""
        if not self.explain:
            return
        old = self.job_reasons.get(record.name)
        if reason is None:
            if old is not None:
                del self.job_reasons[record.name]
                for observer in self.observers:
                    observer.on_reason(record, old, None, now)
                self._tell_backend(record, None, now)
            return
        if old is not None and old.code == reason.code:
            old.reason = reason  # the facts may have moved on; the state has not
            return
        new = self.job_reasons[record.name] = JobReason(reason, now)
        for observer in self.observers:
            observer.on_reason(record, old, new, now)
        self._tell_backend(record, new, now)

    def _tell_backend(self, record: JobRecord, new: JobReason | None, now: float) -> None:
        """A backend that shows reasons on its cluster (SupportsReasons) hears of each
        change of code of a job not ended; nothing it does or raises reaches scheduling."""
        backend = self.backend
        if not isinstance(backend, SupportsReasons) or record.status.is_terminal:
            return
        try:
            if new is None:
                backend.note_reason(record.name, None, f"Holds its max of "
                                    f"{record.max_workers} GPUs.", now)
            else:
                backend.note_reason(record.name, str(new.code), new.message, now)
        except Exception:
            self.log.exception("job %s: the backend failed to take its reason; ignored",
                               record.name)

    def _note_reasons(self, plan: Plan, now: float) -> None:
        """The applied plan's reasons become the jobs' (a job that lost workers with a node
        says so until it holds GPUs again). decide() defers them (Deferred): they are
        worked out here, once the plan's actions are out."""
        try:
            given = dict(plan.reasons)
        except Exception:  # an explanation never stops the engine: the reasons stay
            self.log.exception("the decision's reasons could not be worked out; the jobs "
                               "keep the ones they had")
            return
        for name, record in self.active.items():
            reason = given.get(name)
            node = self._lost_on.get(name)
            if node is not None:
                if record.current_workers > 0 or reason is None:
                    del self._lost_on[name]
                else:
                    reason = _lost_reason(node, reason)
            self._set_reason(record, reason, now)
        self._undecided.clear()

    def _node_lost(self, record: JobRecord, node: str, workers: int, now: float) -> None:
        self._lost_on[record.name] = node
        self._set_reason(record, Reason(
            ReasonCode.NODE_LOST,
            f"Lost {workers} GPU{'s' if workers != 1 else ''} with node {node}, which left "
            f"the cluster; the next decision places it again."), now)

    def _rate_limited(self, now: float) -> None:
        """Jobs submitted since the last decision wait for the next, which the rate limit
        holds back."""
        if not self._undecided:
            return
        at = self._earliest_reschedule(now)
        for name in sorted(self._undecided):
            record = self.active.get(name)
            if record is None or name in self.job_reasons:
                continue
            self._set_reason(record, Reason(
                ReasonCode.RATE_LIMITED,
                f"Waits for the next decision at t={at:.0f}: decisions are at least "
                f"{self.settings.rate_limit_seconds:g} s apart (the rate limit)."), now)

    def _all_refused(self, now: float) -> None:
        """A decision refused as a whole (or a plan the backend failed): every job below
        max keeps what it holds until the retry."""
        retry = self._retry_at
        when = f" at t={retry:.0f}" if retry is not None else ""
        for record in self.active.values():
            if record.current_workers >= record.max_workers:
                continue
            self._set_reason(record, Reason(
                ReasonCode.PLAN_REFUSED,
                f"The last decision was refused (or the backend failed to apply it), so the "
                f"plan in force stays: it holds {record.current_workers} of its max "
                f"{record.max_workers} GPUs until the retry{when}."), now)

    # ----- helpers ---------------------------------------------------------------
    def _restarting(self, record: JobRecord, workers: int, now: float) -> None:
        """The job (re)starts on `workers` from its checkpoint: its next epoch there holds
        the restore (see _record_epoch). Unless the backend resumes it where it stopped
        within an epoch, the epoch under way starts over."""
        resumes = self._resumes_within_epoch(record.name)
        record.restarted_at = None if resumes else now  # a part-epoch tells no cost
        if not resumes:
            epoch_starts(record)
        record.restore_epoch_before = record.restore_epoch
        record.restore_epoch = int(record.completed_epochs) + 1
        record.restore_workers = workers

    def _resumes_within_epoch(self, name: str) -> bool:
        per_job = getattr(self.backend, "job_resumes_within_epoch", None)
        if callable(per_job):
            return bool(per_job(name))
        return bool(getattr(self.backend, "resumes_within_epoch", False))

    def _place(self, record: JobRecord, placement: JobPlacement) -> None:
        self._kept.forget(record.name)
        record.placement = placement
        record.current_workers = sum(c for _, c in placement)

    def _finish(self, record: JobRecord, status: JobStatus, now: float) -> None:
        record.finish_time = now
        self._place(record, ())
        self._set_status(record, status, now)
        self.active.pop(record.name, None)
        self._priority_classes.pop(record.name, None)
        self._lost_on.pop(record.name, None)
        self._undecided.discard(record.name)
        self._set_reason(record, None, now)

    def _set_status(self, record: JobRecord, status: JobStatus, now: float) -> None:
        old = record.status
        if old == status:
            return
        record.status = transition(old, status)
        self._kept.forget(record.name)
        for observer in self.observers:
            observer.on_status(record, old, status, now)

    def _mark(self, kind: EventKind) -> None:
        self._dirty = True
        self._reasons.add(kind)

    @property
    def dirty(self) -> bool:
        return self._dirty

    @property
    def accounted_until(self) -> float:
        """The time up to which attained service has been counted (every active job's
        counters brought up to it)."""
        self._add_unadded()
        return self._last_accounted

    @property
    def last_reschedule(self) -> float | None:
        return self._last_reschedule

    def placement(self) -> dict[str, JobPlacement]:
        return {name: r.placement for name, r in self.active.items() if r.placement}


def _lost_reason(node: str, reason: Reason) -> Reason:
    def render() -> str:
        message = reason.message
        return (f"Lost its GPUs with node {node}, which left the cluster; since then: "
                f"{message[:1].lower()}{message[1:]}")
    return Reason(ReasonCode.NODE_LOST, render=render)
