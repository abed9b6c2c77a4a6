"""The service: one Scheduler for every GPU type, its store, and the stepping loop.

Concurrency. Routes run in worker threads and the loop in an asyncio task that
hands each step to a thread; `lock` guards the scheduler. Every change to the
scheduler leaves pending writes (new jobs, job states, history, category speed,
backend state); whoever made the change takes them under `lock` and, before
letting go of it, takes `write_lock`, so batches reach the store in the order
the changes were made. A route answers only once its batch is committed.

Restart recovery (see docs/design/004-service.md): the store holds each job's
counters as of `accounted_at`; at start-up they are carried forward to now
(running jobs the backend still runs count as running, the others as waiting),
running jobs the backend still runs are adopted with their placement, the rest
wait for the first decision, which comes at once.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar, runtime_checkable

from sqlalchemy.orm import Session, sessionmaker

from voda.backends.base import Backend, SupportsAdoption, SupportsDelete
from voda.config import ServerSettings, User
from voda.core import estimate
from voda.core.allocation import registry
from voda.core.model import (
    Allocation,
    Cluster,
    Job,
    JobPlacement,
    JobStatus,
    Placement,
    Plan,
    validate_job,
)
from voda.core.placement.base import Placer
from voda.core.placement.registry import get_placer
from voda.engine.events import Event, EventKind
from voda.engine.scheduler import (
    ALL_GPU_TYPES,
    HistoryKey,
    JobRecord,
    Scheduler,
    SchedulerObserver,
    SchedulerSettings,
    account,
    history_key,
    layout_key,
)
from voda.spec import FieldError, JobSpec, SpecError
from voda.store import jobs as store
from voda.store.db import make_engine, migrate, session_factory

from .metrics import ServiceMetrics

log = logging.getLogger(__name__)
T = TypeVar("T")


@runtime_checkable
class SupportsState(Protocol):
    """A backend whose state must survive the process (the emulated cluster)."""

    name: str
    version: int

    def export_state(self) -> dict[str, Any]: ...

    def import_state(self, state: dict[str, Any]) -> None: ...


class NotFound(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class Forbidden(PermissionError):
    pass


@dataclass
class Pending:
    inserts: list[dict[str, Any]] = field(default_factory=list)
    states: dict[str, JobRecord] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    category: dict[tuple[HistoryKey, int], float] = field(default_factory=dict)
    layouts: dict[tuple[HistoryKey, tuple[int, int]], float] = field(default_factory=dict)
    backend_state: dict[str, Any] | None = None
    queued: set[str] = field(default_factory=set)  # Submitted -> Waiting, nothing else


@dataclass
class Batch:
    """Pending writes with their values frozen at the moment they were taken."""

    inserts: list[dict[str, Any]]
    states: list[dict[str, Any]]
    history: list[dict[str, Any]]
    category: list[tuple[HistoryKey, int, float]]
    backend_state: dict[str, Any] | None
    now: float
    queued: list[str] = field(default_factory=list)
    layouts: list[tuple[HistoryKey, tuple[int, int], float]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.inserts or self.states or self.history or self.category
                    or self.layouts or self.queued or self.backend_state is not None)


@dataclass
class _Ticket:
    batch: Batch
    done: bool = False
    error: Exception | None = None


class TimedPlacer:
    """Wraps a placer to measure how long placement takes in each decision."""

    def __init__(self, placer: Placer) -> None:
        self.placer = placer
        self.seconds = 0.0

    def __call__(self, allocation: Allocation, jobs: Any, cluster: Cluster,
                 previous: Placement) -> Placement:
        started = time.perf_counter()
        try:
            return self.placer(allocation, jobs, cluster, previous)
        finally:
            self.seconds = time.perf_counter() - started


class _Observer(SchedulerObserver):
    def __init__(self, service: Service) -> None:
        self.service = service

    def on_status(self, record: JobRecord, old: JobStatus, new: JobStatus, now: float) -> None:
        s = self.service
        if old is JobStatus.SUBMITTED and new is JobStatus.WAITING:
            # Its counters still follow from the stored ones (waiting all along): only the
            # status changes, which is written in one statement for all such jobs.
            s.pending.queued.add(record.name)
        else:
            s.pending.states[record.name] = record
        s.pending.history.append({"job": record.name, "time": now, "field": "status",
                                  "old": str(old), "new": str(new)})
        if new.is_terminal:
            s.metrics.job_finished(record.gpu_type, new)

    def on_plan(self, plan: Plan, now: float, seconds: float, allocation_seconds: float) -> None:
        s = self.service
        for action in plan.actions:
            record = s.scheduler.jobs.get(action.job)
            if record is not None:
                s.pending.states[record.name] = record
        gpu_types = {a.job: s.scheduler.jobs[a.job].gpu_type for a in plan.actions
                     if a.job in s.scheduler.jobs}
        s.metrics.plan_applied(plan, gpu_types, s.scheduler.cluster, seconds, allocation_seconds,
                               s.placer.seconds)
        if s.first_schedule_at is None:
            s.first_schedule_at = time.time()

    def on_error(self, error: Exception, now: float, gpu_type: str = ALL_GPU_TYPES) -> None:
        self.service.metrics.decision_refused(gpu_type)

    def on_recovered(self, gpu_type: str, now: float) -> None:
        self.service.metrics.decision_recovered(gpu_type)

    def on_promoted(self, record: JobRecord, now: float) -> None:
        self.service.pending.states[record.name] = record  # its reset counters are kept

    def on_epoch(self, record: JobRecord, epoch: int, seconds: float, workers: int) -> None:
        s = self.service
        s.pending.states[record.name] = record
        key = history_key(record)
        if record.category and workers in record.epoch_time_by_workers:
            s.pending.category[(key, workers)] = record.epoch_time_by_workers[workers]
        layout = layout_key(record.placement)
        if record.category and layout in record.layout_throughput:
            s.pending.layouts[(key, layout)] = record.layout_throughput[layout]


def unique_name(base: str, now: float) -> str:
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%d%H%M%S")
    return f"{base}-{stamp}-{secrets.token_hex(3)}"


class Service:
    def __init__(self, settings: ServerSettings, backend: Backend,
                 sessions: sessionmaker[Session] | None = None) -> None:
        self.settings = settings
        self.backend = backend
        self.engine = None
        if sessions is None:
            self.engine = make_engine(settings.db)
            sessions = session_factory(self.engine)
        self.sessions = sessions
        self.metrics = ServiceMetrics()
        self.lock = threading.RLock()
        self.write_lock = threading.Lock()
        self.pending = Pending()
        self._queue: list[_Ticket] = []
        self.queue_lock = threading.Lock()
        self.inbox_lock = threading.Lock()
        self.inbox: list[JobRecord] = []
        self.names: set[str] = set()
        self.placer = TimedPlacer(get_placer(settings.placement, settings.placement_settings))
        self.started_at = time.time()
        self.first_schedule_at: float | None = None
        self.recovered_jobs = 0
        self.adopted_running_jobs = 0
        self._backend_version = -1
        self.scheduler: Scheduler = None  # type: ignore[assignment]  # set by start()

    # ----- start-up and recovery --------------------------------------------------------
    def start(self) -> None:
        if self.engine is not None:
            migrate(self.engine)
        with self.sessions() as session:
            rows = store.load_jobs(session)
            history = store.load_category_history(session)
            layouts = store.load_layout_history(session)
            settings_rows = store.load_settings(session)
            backend_state = (store.load_backend_state(session, self.backend.name)
                             if isinstance(self.backend, SupportsState) else None)
        if backend_state is not None and isinstance(self.backend, SupportsState):
            self.backend.import_state(backend_state)
        sched_settings = SchedulerSettings(algorithm=self.settings.algorithm,
                                           rate_limit_seconds=self.settings.rate_limit_seconds)
        for row in settings_rows:
            if not registry.is_known(row.algorithm):  # e.g. a plug-in no longer installed
                log.warning("stored algorithm %r for %s is unknown; using %s", row.algorithm,
                            row.gpu_type, self.settings.algorithm)
                continue
            try:
                registry.create(row.algorithm, row.params)
            except ValueError as exc:  # knobs this version no longer takes
                log.warning("stored parameters of %r for %s are refused (%s); using %s",
                            row.algorithm, row.gpu_type, exc, self.settings.algorithm)
                continue
            if row.gpu_type == store.DEFAULT_SETTINGS_KEY:
                sched_settings.algorithm = row.algorithm
                sched_settings.algorithm_params = dict(row.params)
                if row.rate_limit_seconds is not None:
                    sched_settings.rate_limit_seconds = row.rate_limit_seconds
            else:
                sched_settings.algorithm_by_gpu_type[row.gpu_type] = (row.algorithm, row.params)
        now = time.time()
        self.scheduler = Scheduler(self.backend, sched_settings, placer=self.placer,
                                   observers=[_Observer(self)], category_history=history, now=now,
                                   layout_history=layouts)
        running = self.backend.running() if isinstance(self.backend, SupportsAdoption) else {}
        records = [self._recover(store.row_to_record(row), row.accounted_at, now, running)
                   for row in rows]
        active = {r.name for r in records if not r.status.is_terminal}
        for name in sorted(set(running) - active):  # the backend runs what the store ended
            if isinstance(self.backend, SupportsDelete):
                self.backend.delete(name)
        for record in records:
            self.scheduler.adopt(record)
            self._register_profile(record)
        self.names = set(self.scheduler.jobs)
        self.recovered_jobs = len(records)
        self.adopted_running_jobs = sum(1 for r in records if r.status is JobStatus.RUNNING)
        log.info("recovered %d jobs (%d running, adopted) in %.3f s", len(records),
                 self.adopted_running_jobs, time.time() - self.started_at)

    def _recover(self, record: JobRecord, accounted_at: float, now: float,
                 running: dict[str, JobPlacement]) -> JobRecord:
        """Carry a stored job's counters forward to `now` and match it with the backend."""
        if record.status.is_terminal:
            return record
        dt = max(0.0, now - accounted_at)
        placement = running.get(record.name)
        if placement:
            workers = sum(c for _, c in placement)
            record.placement, record.current_workers = tuple(placement), workers
            if record.status is not JobStatus.RUNNING:
                self._history(record.name, now, "status", str(record.status), "Running")
                record.status = JobStatus.RUNNING
            if record.first_start_time is None:
                record.first_start_time = now
        else:
            if record.status is JobStatus.RUNNING:  # the backend lost it: it waits again
                self._history(record.name, now, "status", "Running", "Waiting")
                record.status = JobStatus.WAITING
                record.preemptions += 1
                record.waiting_seconds_since_start = 0.0
            record.placement, record.current_workers = (), 0
        account(record, dt)
        self.pending.states[record.name] = record
        return record

    def _register_profile(self, record: JobRecord) -> None:
        """Tell the backend what it needs beyond the Job: the profile (emulated cluster),
        the command line (local processes) or the submitted document (Kubernetes), when
        it keeps such a table."""
        if record.status.is_terminal:
            return
        for table_name, key in (("profiles", "profile"), ("commands", "command"),
                                ("specs", "spec")):
            table = getattr(self.backend, table_name, None)
            value = record.extra.get(key)
            if isinstance(table, dict) and value:
                table[record.name] = value

    def close(self) -> None:
        self.flush()
        if self.engine is not None:
            self.engine.dispose()

    # ----- the loop -----------------------------------------------------------------------
    def tick(self, now: float | None = None) -> Plan | None:
        """One scheduling step, then its writes."""
        return self._mutate(lambda: self.scheduler.step(time.time() if now is None else now),
                            checkpoint=True)

    def flush(self) -> None:
        self._mutate(lambda: None)

    # ----- changes from the API -------------------------------------------------------------
    def submit(self, spec: JobSpec, user: User) -> dict[str, Any]:
        """Admit a job: store it and queue it for the scheduler, which takes it in at its
        next step (or at the next request that needs it). The scheduler lock is not
        taken, so a long decision does not hold submissions up. Names are unique: every
        name in the store is in `names`, and a new one is checked there."""
        self._check_gpu_type(spec)
        self._check_profile(spec)
        check_spec = getattr(self.backend, "check_spec", None)
        if check_spec is not None:  # what this backend could never run (SpecError)
            check_spec(spec)
        now = time.time()
        known = self.scheduler.category_history.get((spec.category, spec.gpu_type))
        job = Job(
            name=spec.name, min_workers=spec.min_workers, max_workers=spec.max_workers,
            preferred_workers=spec.preferred_workers, priority=spec.priority, submit_time=now,
            epochs=spec.epochs, category=spec.category, gpu_type=spec.gpu_type,
            placement_strategy=spec.placement_strategy, preferred_domain=spec.preferred_domain,
            epoch_time_by_workers=dict(known or {}),
        )
        problems = validate_job(job)
        if problems:
            raise SpecError([FieldError(*p.split(": ", 1)) for p in problems])
        extra = {"user": user.name, "kind": spec.kind, "command": spec.command,
                 "image": spec.image, "profile": spec.profile, "spec": spec.document}
        meta = dict(extra)
        with self.inbox_lock:
            name = unique_name(spec.name, now)
            while name in self.names:
                name = unique_name(spec.name, now)
            self.names.add(name)
            job = replace(job, name=name)
            record = JobRecord.from_job(job)
            record.extra.update(extra)
            self.inbox.append(record)
            ticket = _Ticket(Batch(
                inserts=[store.new_job_values(record, meta, now)], states=[],
                history=[{"job": name, "time": now, "field": "status", "old": None,
                          "new": str(record.status)}],
                category=[], backend_state=None, now=now))
            with self.queue_lock:
                self._queue.append(ticket)
        try:
            self._commit_through(ticket)
        except Exception:
            with self.inbox_lock:
                if record in self.inbox:
                    self.inbox.remove(record)
                    self.names.discard(name)
            raise
        self.metrics.job_created(spec.gpu_type)
        return self.describe_locked(record, now)

    def _admit(self) -> None:
        """Hand the admitted jobs to the scheduler (under `lock`)."""
        with self.inbox_lock:
            records, self.inbox = self.inbox, []
        for record in records:
            job = record.snapshot()
            admitted = self.scheduler.submit(job)
            admitted.extra.update(record.extra)
            self._register_profile(admitted)

    def _check_gpu_type(self, spec: JobSpec) -> None:
        types = self.scheduler.cluster.gpu_types()
        if spec.gpu_type not in types:
            field_name = "gpu_type" if spec.kind == "VodaJob" else \
                "metadata.annotations.voda.io/gpu-type"
            raise SpecError([FieldError(field_name, f"unknown GPU type {spec.gpu_type!r}; the "
                                        f"cluster has: {', '.join(types)}")])
        capacity = self.scheduler.cluster.capacity(spec.gpu_type)
        if spec.min_workers > capacity:
            raise SpecError([FieldError("min", f"{spec.min_workers} workers can never run: the "
                                        f"cluster has {capacity} {spec.gpu_type} GPUs")])

    def _check_profile(self, spec: JobSpec) -> None:
        if spec.profile is None or getattr(self.backend, "profiles", None) is None:
            return
        from voda.sim.speed import profile_names

        names = profile_names()
        if spec.profile not in names:
            raise SpecError([FieldError("profile", f"unknown profile {spec.profile!r}; known: "
                                        f"{', '.join(names)}")])

    def delete(self, name: str, user: User) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            record = self._visible(name, user)
            now = time.time()
            self.scheduler.delete(name, now)
            self.pending.states[name] = record
            return self.describe_locked(record, now)
        return self._mutate(run)

    def set_priority(self, name: str, priority: int, user: User) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            record = self._visible(name, user)
            old = record.priority
            self.scheduler.set_priority(name, priority)
            self.pending.states[name] = record
            now = time.time()
            self._history(name, now, "priority", str(old), str(priority))
            return self.describe_locked(record, now)
        return self._mutate(run)

    def report_epoch(self, name: str, epoch: int, seconds: float, workers: int,
                     user: User, samples_per_second: float | None = None) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            record = self._visible(name, user)
            if record.status.is_terminal:
                raise ValueError(f"job {name!r} is {record.status}; it takes no more reports")
            now = time.time()
            data: dict[str, Any] = {"epoch": epoch, "epoch_seconds": seconds, "workers": workers}
            if samples_per_second is not None:
                data["samples_per_second"] = samples_per_second
            self.scheduler.handle(Event(EventKind.EPOCH_REPORTED, now, job=name, data=data))
            return self.describe_locked(record, now)
        return self._mutate(run)

    def set_scheduler(self, gpu_type: str, algorithm: str | None, params: dict | None,
                      rate_limit: float | None) -> dict[str, Any]:
        """Raises UnknownAlgorithm / ValueError before anything changes."""
        def run() -> dict[str, Any]:
            self._known_gpu_type(gpu_type)
            current, current_params = self._algorithm_of(gpu_type)
            if algorithm is not None or params is not None:
                name = algorithm or current
                new_params = params if params is not None else (
                    current_params if name == current else {})
                registry.create(name, new_params)  # validates before any change
                self.scheduler.set_algorithm(name, new_params, gpu_type=gpu_type)
                with self.sessions.begin() as session:
                    store.save_algorithm(session, gpu_type, name, new_params)
            if rate_limit is not None:
                self.scheduler.set_rate_limit(rate_limit)
                with self.sessions.begin() as session:
                    store.save_rate_limit(session, rate_limit, self.scheduler.settings.algorithm)
            return self.scheduler_view(gpu_type)
        return self._mutate(run)

    # ----- reads ------------------------------------------------------------------------------
    def get(self, name: str, user: User) -> dict[str, Any]:
        with self.lock:
            self._admit()
            record = self._visible(name, user)
            return self.describe_locked(record, time.time())

    def list(self, user: User, status: str | None, gpu_type: str | None, owner: str | None,
             offset: int, limit: int) -> tuple[list[dict[str, Any]], int]:
        with self.lock:
            self._admit()
            records = [r for r in self.scheduler.jobs.values()
                       if (user.admin or r.extra.get("user") == user.name)
                       and (status is None or str(r.status).lower() == status.lower())
                       and (gpu_type is None or r.gpu_type == gpu_type)
                       and (owner is None or r.extra.get("user") == owner)]
            records.sort(key=lambda r: (r.submit_time, r.name))
            page = records[offset:offset + limit]
            return [self.summary(r) for r in page], len(records)

    def scheduler_view(self, gpu_type: str) -> dict[str, Any]:
        with self.lock:
            self._known_gpu_type(gpu_type)
            name, params = self._algorithm_of(gpu_type)
            return {"gpu_type": gpu_type, "algorithm": name, "params": params,
                    "rate_limit_seconds": self.scheduler.settings.rate_limit_seconds,
                    "valid_algorithms": registry.available()}

    def cluster_view(self) -> dict[str, Any]:
        with self.lock:
            s = self.scheduler
            used: dict[str, dict[str, int]] = {}
            for name, placement in s.placement().items():
                for node, count in placement:
                    used.setdefault(node, {})[name] = count
            nodes = []
            for n in s.cluster.nodes:
                jobs = used.get(n.name, {})
                taken = sum(jobs.values())
                nodes.append({"name": n.name, "gpu_type": n.gpu_type, "gpus": n.gpus,
                              "used": taken, "free": n.gpus - taken, "leaf": n.leaf_name,
                              "jobs": jobs})
            types = []
            for t in s.cluster.gpu_types():
                total = s.cluster.capacity(t)
                taken = sum(x["used"] for x in nodes if x["gpu_type"] == t)
                error = s.errors.get(t) or s.errors.get(ALL_GPU_TYPES)
                types.append({"gpu_type": t, "total": total, "used": taken,
                              "free": total - taken, "algorithm": self._algorithm_of(t)[0],
                              "error": error.reason if error else None})
            plan = s.last_plan
            return {
                "nodes": nodes,
                "gpu_types": types,
                "plan": {name: [{"node": n, "workers": c} for n, c in p]
                         for name, p in sorted(s.placement().items())},
                "allocation": dict(plan.allocation) if plan else {},
                "last_reschedule": s.last_reschedule,
                "last_error": str(s.last_error) if s.last_error else None,
                "errors": {t: e.reason for t, e in sorted(s.errors.items())},
            }

    def health(self) -> dict[str, Any]:
        with self.inbox_lock:
            jobs = len(self.names)
        first = (self.first_schedule_at - self.started_at) if self.first_schedule_at else None
        return {"status": "ok", "backend": self.settings.backend, "jobs": jobs,
                "started_at": self.started_at, "recovered_jobs": self.recovered_jobs,
                "adopted_running_jobs": self.adopted_running_jobs,
                "first_schedule_seconds": first}

    # ----- views --------------------------------------------------------------------------------
    def summary(self, r: JobRecord) -> dict[str, Any]:
        return {
            "name": r.name, "user": r.extra.get("user", ""), "kind": r.extra.get("kind", ""),
            "status": str(r.status), "gpu_type": r.gpu_type, "min_workers": r.min_workers,
            "max_workers": r.max_workers, "priority": r.priority, "workers": r.current_workers,
            "epochs": r.epochs, "completed_epochs": r.completed_epochs,
            "submit_time": r.submit_time,
        }

    def describe_locked(self, r: JobRecord, now: float) -> dict[str, Any]:
        # Counters are accounted up to the last step; carry them to `now` for display.
        since = max(self._accounted(), r.submit_time)
        dt = 0.0 if r.status.is_terminal else max(0.0, now - since)
        running = r.current_workers > 0
        job = r.snapshot()
        model = estimate.speed_model(job)
        workers_for_estimate = r.current_workers or r.preferred_workers or r.min_workers
        remaining = None
        if not r.status.is_terminal:
            value = estimate.remaining_time(job, workers_for_estimate, model)
            remaining = value if math.isfinite(value) else None
        end = r.finish_time if r.finish_time is not None else now
        return {
            **self.summary(r),
            "preferred_workers": r.preferred_workers,
            "command": r.extra.get("command"),
            "image": r.extra.get("image"),
            "profile": r.extra.get("profile"),
            "category": r.category,
            "placement": [{"node": n, "workers": c} for n, c in r.placement],
            "placement_strategy": r.placement_strategy,
            "preferred_domain": r.preferred_domain,
            "first_start_time": r.first_start_time,
            "finish_time": r.finish_time,
            "waiting_seconds": r.waiting_seconds + (0.0 if running else dt),
            "running_seconds": r.running_seconds + (dt if running else 0.0),
            "total_seconds": max(0.0, end - r.submit_time),
            "gpu_seconds": r.attained_gpu_seconds + dt * r.current_workers,
            "estimated_remaining_seconds": remaining,
            "epoch_time_by_workers": dict(sorted(r.epoch_time_by_workers.items())),
            "layout_throughput": {f"{w}x{n}": rate
                                  for (w, n), rate in sorted(r.layout_throughput.items())},
            "speedup": {k: round(model.speedup(k), 4) for k in range(1, r.max_workers + 1)},
            "rescales": r.rescales,
            "migrations": r.migrations,
            "preemptions": r.preemptions,
            "failure_reason": r.failure_reason,
        }

    # ----- internals ------------------------------------------------------------------------------
    def _visible(self, name: str, user: User) -> JobRecord:
        record = self.scheduler.jobs.get(name)
        if record is None or not (user.admin or record.extra.get("user") == user.name):
            raise NotFound(f"job {name!r} not found")
        return record

    def _known_gpu_type(self, gpu_type: str) -> None:
        types = self.scheduler.cluster.gpu_types()
        if gpu_type not in types:
            raise NotFound(f"GPU type {gpu_type!r} not found; the cluster has: {', '.join(types)}")

    def _algorithm_of(self, gpu_type: str) -> tuple[str, dict[str, Any]]:
        settings = self.scheduler.settings
        if gpu_type in settings.algorithm_by_gpu_type:
            name, params = settings.algorithm_by_gpu_type[gpu_type]
            return name, dict(params)
        return settings.algorithm, dict(settings.algorithm_params)

    def _history(self, job: str, now: float, field_name: str, old: str | None, new: str) -> None:
        self.pending.history.append({"job": job, "time": now, "field": field_name, "old": old,
                                     "new": new})

    def _accounted(self) -> float:
        return self.scheduler.accounted_until

    def render_metrics(self) -> bytes:
        """The Prometheus text, gauges refreshed from the scheduler's state now."""
        with self.lock:
            s = self.scheduler
            self.metrics.set_state(s.cluster, list(s.active.values()))
        return self.metrics.render()

    def _mutate(self, change: Callable[[], T], checkpoint: bool = False) -> T:
        """Run `change` under the lock, then wait until what it left pending is committed.

        Batches queue in the order the changes were made; whoever holds `write_lock`
        commits every queued batch in one transaction (group commit).
        """
        with self.lock:
            self._admit()
            result = change()
            batch = self._take(checkpoint)
            ticket = _Ticket(batch)
            with self.queue_lock:
                self._queue.append(ticket)
        self._commit_through(ticket)
        return result

    def _commit_through(self, ticket: _Ticket) -> None:
        with self.write_lock:
            if not ticket.done:
                with self.queue_lock:
                    tickets, self._queue = self._queue, []
                try:
                    self._write([t.batch for t in tickets if not t.batch.empty])
                except Exception as exc:
                    for t in tickets:
                        t.error = exc
                    raise
                finally:
                    for t in tickets:
                        t.done = True
        if ticket.error is not None:
            raise ticket.error

    def _take(self, checkpoint: bool) -> Batch:
        p, self.pending = self.pending, Pending()
        accounted = self._accounted()
        if checkpoint:  # running jobs' counters move with time: save them on every tick
            for r in self.scheduler.active.values():
                if r.current_workers > 0:
                    p.states.setdefault(r.name, r)
        backend_state = None
        if isinstance(self.backend, SupportsState) and self.backend.version != (
            self._backend_version
        ):
            self._backend_version = self.backend.version
            backend_state = self.backend.export_state()
        return Batch(
            inserts=p.inserts,
            states=[store.state_values(r, accounted) for r in p.states.values()],
            history=p.history,
            category=[(c, w, s) for (c, w), s in p.category.items()],
            layouts=[(c, layout, rate) for (c, layout), rate in p.layouts.items()],
            backend_state=backend_state,
            now=accounted,
            queued=sorted(p.queued - set(p.states)),
        )

    def _write(self, batches: list[Batch]) -> None:
        if not batches:
            return
        with self.sessions.begin() as session:
            for batch in batches:
                store.insert_jobs(session, batch.inserts)
                store.save_states(session, batch.states)
                store.mark_status(session, batch.queued, str(JobStatus.WAITING))
                store.add_history(session, batch.history)
                for key, workers, seconds in batch.category:
                    store.save_category_speed(session, key, workers, seconds, batch.now)
                for key, layout, rate in batch.layouts:
                    store.save_category_layout(session, key, layout, rate, batch.now)
                if batch.backend_state is not None:
                    name = getattr(self.backend, "name", "backend")
                    store.save_backend_state(session, name, batch.backend_state, batch.now)
