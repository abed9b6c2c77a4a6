"""The scheduler loop.

The Scheduler owns job state and time; the decision itself is voda.core.plan.decide,
a pure function of a snapshot. Callers (the simulator runner, the service's
asyncio task, tests) feed it events and call `step(now)`; it never sleeps.

Per step:
1. account attained service up to `now`;
2. drain the backend's events (completions, failures, epoch reports, nodes);
3. note priority-queue changes (Tiresias follows attained service);
4. if something changed and the rate limit allows, decide on a snapshot and
   apply the actions through the backend, frees before takes.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from voda.backends.base import Backend, SupportsDelete
from voda.core.allocation import registry
from voda.core.allocation.base import AllocationAlgorithm, AllocationRejected
from voda.core.model import (
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
from voda.core.plan import PlacementFailed, decide
from voda.engine.events import RESCHEDULING_EVENTS, Event, EventKind

log = logging.getLogger(__name__)

# How much a new epoch measurement counts against what was known (exponential average).
EPOCH_TIME_SMOOTHING = 0.5


@dataclass
class SchedulerSettings:
    algorithm: str = registry.DEFAULT_ALGORITHM
    algorithm_params: dict[str, Any] = field(default_factory=dict)
    # Per-GPU-type overrides: {gpu_type: (name, params)}.
    algorithm_by_gpu_type: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    rate_limit_seconds: float = 30.0


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
    status: JobStatus = JobStatus.SUBMITTED
    current_workers: int = 0
    attained_gpu_seconds: float = 0.0
    attained_gpu_seconds_since_start: float = 0.0
    running_seconds: float = 0.0
    running_seconds_since_start: float = 0.0
    waiting_seconds: float = 0.0
    waiting_seconds_since_start: float = 0.0
    first_start_time: float | None = None
    queue_since: float | None = None
    epoch_time_by_workers: dict[int, float] = field(default_factory=dict)
    placement_strategy: str = "consolidated"
    preferred_domain: str | None = None
    network_bandwidth: float | None = None
    latency_sensitive: bool = False
    # Shared by the jobs of one category (see Scheduler.layout_history).
    layout_throughput: dict[tuple[int, int], float] = field(default_factory=dict)
    # Engine-only fields (not part of Job):
    placement: JobPlacement = ()
    finish_time: float | None = None
    rescales: int = 0
    migrations: int = 0
    preemptions: int = 0
    failure_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def snapshot(self) -> Job:
        return Job(*_JOB_VALUES(self))

    @classmethod
    def from_job(cls, job: Job) -> JobRecord:
        values = {name: getattr(job, name) for name in _JOB_FIELDS}
        values["epoch_time_by_workers"] = dict(job.epoch_time_by_workers)
        values["layout_throughput"] = dict(job.layout_throughput)
        return cls(**values)


def layout_key(placement: JobPlacement) -> tuple[int, int]:
    """(workers, nodes spanned) of a placement: the key of Job.layout_throughput."""
    counts = [c for _, c in placement if c > 0]
    return sum(counts), len(counts)


def _smoothed(old: float | None, new: float) -> float:
    """A new measurement folded into what was known (exponential average)."""
    return new if old is None else old + EPOCH_TIME_SMOOTHING * (new - old)


_JOB_FIELDS = tuple(f.name for f in fields(Job))
_JOB_VALUES = operator.attrgetter(*_JOB_FIELDS)  # positional, in Job's field order


class SchedulerObserver:
    """Hooks for persistence and metrics; override what you need."""

    def on_status(self, record: JobRecord, old: JobStatus, new: JobStatus, now: float) -> None:
        pass

    def on_plan(self, plan: Plan, now: float, seconds: float, allocation_seconds: float) -> None:
        pass

    def on_error(self, error: Exception, now: float) -> None:
        pass

    def on_epoch(self, record: JobRecord, epoch: int, seconds: float, workers: int) -> None:
        pass


class Scheduler:
    def __init__(
        self,
        backend: Backend,
        settings: SchedulerSettings | None = None,
        placer: Placer | None = None,
        observers: Iterable[SchedulerObserver] = (),
        category_history: Mapping[str, Mapping[int, float]] | None = None,
        now: float = 0.0,
        layout_history: Mapping[str, Mapping[tuple[int, int], float]] | None = None,
    ) -> None:
        self.backend = backend
        self.settings = settings or SchedulerSettings()
        self.placer = placer if placer is not None else get_placer(DEFAULT_PLACER)
        self.observers = list(observers)
        self.jobs: dict[str, JobRecord] = {}
        self.active: dict[str, JobRecord] = {}  # not terminal
        self.category_history: dict[str, dict[int, float]] = {
            k: dict(v) for k, v in (category_history or {}).items()
        }
        # Samples per second by (workers, nodes spanned) per category: every job of
        # the category holds the same dict, so what one job runs, the others learn.
        self.layout_history: dict[str, dict[tuple[int, int], float]] = {
            k: dict(v) for k, v in (layout_history or {}).items()
        }
        self.cluster = Cluster(tuple(backend.nodes()))
        self._algorithms: dict[str, AllocationAlgorithm] = {}
        self._build_algorithms(self.settings)
        self._dirty = True
        self._last_accounted = now
        self._last_reschedule: float | None = None
        self._priority_classes: dict[str, Hashable] = {}
        self.last_plan: Plan | None = None
        self.last_error: Exception | None = None
        self.reschedules = 0

    # ----- configuration -------------------------------------------------
    def _build_algorithms(self, settings: SchedulerSettings) -> None:
        default = registry.create(settings.algorithm, settings.algorithm_params)
        by_type = {
            gpu_type: registry.create(name, params)
            for gpu_type, (name, params) in settings.algorithm_by_gpu_type.items()
        }
        self._default_algorithm = default
        self._algorithms = by_type

    def algorithm_for(self, gpu_type: str) -> AllocationAlgorithm:
        return self._algorithms.get(gpu_type, self._default_algorithm)

    def set_algorithm(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        gpu_type: str | None = None,
    ) -> None:
        """Switch algorithm; an unknown name raises UnknownAlgorithm and changes nothing."""
        algorithm = registry.create(name, params)  # raises before anything changes
        if gpu_type is None:
            self.settings.algorithm = name
            self.settings.algorithm_params = dict(params or {})
            self._default_algorithm = algorithm
        else:
            self.settings.algorithm_by_gpu_type[gpu_type] = (name, dict(params or {}))
            self._algorithms[gpu_type] = algorithm
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
        if not record.epoch_time_by_workers and record.category in self.category_history:
            record.epoch_time_by_workers = dict(self.category_history[record.category])
        self._share_layouts(record)
        self.jobs[job.name] = record
        if not record.status.is_terminal:
            self.active[job.name] = record
        self._mark(EventKind.JOB_SUBMITTED)
        return record

    def adopt(self, record: JobRecord) -> None:
        """Take back a job as it was (after a restart): status, service and placement kept.

        Running jobs are adopted, not restarted; the next rescheduling decides afresh.
        """
        self._share_layouts(record)
        self.jobs[record.name] = record
        if not record.status.is_terminal:
            self.active[record.name] = record
        self._mark(EventKind.JOB_SUBMITTED)

    def _share_layouts(self, record: JobRecord) -> None:
        """Point the job at its category's layout history, adding what it brought."""
        if not record.category:
            return
        shared = self.layout_history.setdefault(record.category, {})
        for key, seconds in record.layout_throughput.items():
            shared.setdefault(key, seconds)
        record.layout_throughput = shared

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
        self._mark(EventKind.PRIORITY_CHANGED)

    def handle(self, event: Event) -> None:
        """Apply one event to the state (accounting must be up to date)."""
        kind = event.kind
        record = self.jobs.get(event.job) if event.job else None
        if kind is EventKind.JOB_COMPLETED and record and not record.status.is_terminal:
            record.completed_epochs = float(record.epochs)
            self._finish(record, JobStatus.COMPLETED, event.time)
        elif kind is EventKind.JOB_FAILED and record and not record.status.is_terminal:
            record.failure_reason = str(event.data.get("reason", "failed"))
            self._finish(record, JobStatus.FAILED, event.time)
        elif kind is EventKind.EPOCH_REPORTED and record:
            self._record_epoch(record, event)
        elif kind is EventKind.NODE_ADDED and event.node is not None:
            nodes = [n for n in self.cluster.nodes if n.name != event.node.name]
            self.cluster = Cluster((*nodes, event.node))
        elif kind is EventKind.NODE_REMOVED and event.node is not None:
            self._drop_node(event.node.name)
        if kind in RESCHEDULING_EVENTS:
            self._mark(kind)

    def halt_jobs_on(self, node_name: str, now: float) -> list[str]:
        """Halt the jobs with workers on a node that is leaving (a drain): they keep their
        checkpoints and wait for the next decision, which places them elsewhere."""
        self._account(now)
        halted = []
        for record in list(self.active.values()):
            if any(node == node_name for node, _ in record.placement):
                self.backend.halt(record.snapshot())
                record.preemptions += 1
                record.waiting_seconds_since_start = 0.0
                self._place(record, ())
                self._set_status(record, JobStatus.WAITING, now)
                halted.append(record.name)
        if halted:
            self._mark(EventKind.NODE_REMOVED)
        return halted

    def _drop_node(self, node_name: str) -> None:
        self.cluster = Cluster(tuple(n for n in self.cluster.nodes if n.name != node_name))
        for record in self.active.values():
            if any(node == node_name for node, _ in record.placement):
                record.placement = tuple((n, c) for n, c in record.placement if n != node_name)
                record.current_workers = sum(c for _, c in record.placement)
                if record.current_workers == 0 and record.status is JobStatus.RUNNING:
                    self._set_status(record, JobStatus.WAITING, self._last_accounted)

    def _record_epoch(self, record: JobRecord, event: Event) -> None:
        workers = int(event.data["workers"])
        seconds = float(event.data["epoch_seconds"])
        epoch = int(event.data.get("epoch", record.completed_epochs + 1))
        if workers < 1 or not seconds > 0:
            return
        new = _smoothed(record.epoch_time_by_workers.get(workers), seconds)
        record.epoch_time_by_workers[workers] = new
        record.completed_epochs = max(record.completed_epochs, float(epoch))
        if record.category:
            self.category_history.setdefault(record.category, {})[workers] = new
        self._record_layout(record, event)
        for observer in self.observers:
            observer.on_epoch(record, epoch, seconds, workers)

    @staticmethod
    def _record_layout(record: JobRecord, event: Event) -> None:
        """Note the throughput of the layout the job runs on, when the report gives one."""
        rate = event.data.get("samples_per_second")
        key = layout_key(record.placement)
        if rate is None or not float(rate) > 0 or key[0] != int(event.data["workers"]):
            return  # no throughput, or the job was resized since: another layout
        record.layout_throughput[key] = _smoothed(record.layout_throughput.get(key), float(rate))

    # ----- time ------------------------------------------------------------
    def _account(self, now: float) -> None:
        dt = now - self._last_accounted
        if dt <= 0:
            return
        for record in self.active.values():
            if record.status is JobStatus.SUBMITTED and record.submit_time > now:
                continue
            workers = record.current_workers
            if workers > 0:
                record.running_seconds += dt
                record.running_seconds_since_start += dt
                record.attained_gpu_seconds += dt * workers
                record.attained_gpu_seconds_since_start += dt * workers
            else:
                record.waiting_seconds += dt
                record.waiting_seconds_since_start += dt
        self._last_accounted = now

    def _check_priority_classes(self, now: float) -> None:
        """Note jobs whose priority class (e.g. Tiresias queue) changed; a change reschedules."""
        changed = False
        classes: dict[str, Hashable] = {}
        for name, record in self.active.items():
            algorithm = self.algorithm_for(record.gpu_type)
            priority_class = getattr(algorithm, "priority_class", None)
            if priority_class is None:
                continue
            if record.status is JobStatus.SUBMITTED and record.submit_time > now:
                continue
            # The read-only hooks get the live record (it has every Job field): a frozen
            # copy per job per step was most of the cost of long simulations.
            cls = priority_class(record)
            classes[name] = cls
            if name not in self._priority_classes:
                record.queue_since = now if record.queue_since is None else record.queue_since
            elif self._priority_classes[name] != cls:
                record.queue_since = now
                changed = True
        self._priority_classes = classes
        if changed:
            self._mark(EventKind.QUEUE_CHANGED)

    def next_wakeup(self, now: float) -> float | None:
        """When `step` has work to do next without any new event, or None."""
        candidates = []
        if self._dirty:
            candidates.append(self._earliest_reschedule(now))
        for record in self.active.values():
            algorithm = self.algorithm_for(record.gpu_type)
            until = getattr(algorithm, "seconds_until_class_change", None)
            if until is not None:
                seconds = until(record)  # read-only hook: the live record, as above
                if seconds is not None and seconds >= 0:
                    candidates.append(now + max(seconds, 1e-6))
        return min(candidates) if candidates else None

    def _earliest_reschedule(self, now: float) -> float:
        if self._last_reschedule is None:
            return now
        return max(now, self._last_reschedule + self.settings.rate_limit_seconds)

    # ----- the step ----------------------------------------------------------
    def step(self, now: float, force: bool = False) -> Plan | None:
        """Advance to `now`, take in events and reschedule when due. Returns the applied plan."""
        self._account(now)
        for event in self.backend.events():
            self.handle(event)
        self._check_priority_classes(now)
        if not self._dirty:
            return None
        if not force and self._earliest_reschedule(now) > now:
            return None
        return self.reschedule(now)

    def reschedule(self, now: float) -> Plan | None:
        self._account(now)
        self._dirty = False
        self._last_reschedule = now
        jobs = [
            r.snapshot()
            for r in self.active.values()
            if r.status is not JobStatus.SUBMITTED or r.submit_time <= now
        ]
        previous: Placement = {r.name: r.placement for r in self.active.values() if r.placement}
        algorithms = {t: self.algorithm_for(t) for t in {j.gpu_type for j in jobs}}
        started = time.perf_counter()
        try:
            plan = decide(jobs, self.cluster, previous, algorithms, self.placer)
        except (AllocationRejected, PlacementFailed) as exc:
            self.last_error = exc
            log.error("rescheduling refused, the plan in force stays: %s", exc)
            for observer in self.observers:
                observer.on_error(exc, now)
            return None
        decided = time.perf_counter()
        self._apply(plan, now)
        self.last_plan = plan
        self.last_error = None
        self.reschedules += 1
        elapsed = time.perf_counter() - started
        for observer in self.observers:
            observer.on_plan(plan, now, elapsed, decided - started)
        return plan

    def _apply(self, plan: Plan, now: float) -> None:
        for action in plan.actions:
            record = self.jobs[action.job]
            job = record.snapshot()
            if action.kind is ActionKind.HALT:
                self.backend.halt(job)
                record.preemptions += 1
                record.waiting_seconds_since_start = 0.0
                self._place(record, ())
                self._set_status(record, JobStatus.WAITING, now)
            elif action.kind is ActionKind.START:
                self._place(record, action.new)
                record.attained_gpu_seconds_since_start = 0.0
                record.running_seconds_since_start = 0.0
                if record.first_start_time is None:
                    record.first_start_time = now
                self.backend.start(record.snapshot(), action.new)
                self._set_status(record, JobStatus.RUNNING, now)
            else:
                self._place(record, action.new)
                if action.kind is ActionKind.MIGRATE:
                    record.migrations += 1
                else:
                    record.rescales += 1
                self.backend.scale(record.snapshot(), action.new)
        for name, record in self.active.items():
            if record.status is JobStatus.SUBMITTED and plan.allocation.get(name, 0) == 0 and (
                record.submit_time <= now
            ):
                self._set_status(record, JobStatus.WAITING, now)

    # ----- helpers ---------------------------------------------------------------
    def _place(self, record: JobRecord, placement: JobPlacement) -> None:
        record.placement = placement
        record.current_workers = sum(c for _, c in placement)

    def _finish(self, record: JobRecord, status: JobStatus, now: float) -> None:
        record.finish_time = now
        self._place(record, ())
        self._set_status(record, status, now)
        self.active.pop(record.name, None)
        self._priority_classes.pop(record.name, None)

    def _set_status(self, record: JobRecord, status: JobStatus, now: float) -> None:
        old = record.status
        if old == status:
            return
        record.status = transition(old, status)
        for observer in self.observers:
            observer.on_status(record, old, status, now)

    def _mark(self, kind: EventKind) -> None:
        self._dirty = True

    @property
    def dirty(self) -> bool:
        return self._dirty

    @property
    def accounted_until(self) -> float:
        """The time up to which attained service has been counted."""
        return self._last_accounted

    @property
    def last_reschedule(self) -> float | None:
        return self._last_reschedule

    def placement(self) -> dict[str, JobPlacement]:
        return {name: r.placement for name, r in self.active.items() if r.placement}
