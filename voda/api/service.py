"""The service: one Scheduler for every GPU type, its store, and the stepping loop.

Concurrency. Routes run in worker threads and the loop in an asyncio task that
hands each step to a thread; `lock` guards the scheduler. Every change to the
scheduler leaves pending writes; whoever made the change freezes them into a batch
before letting go of the lock, so batches reach the store in the order the changes
were made (voda.api.writes). A route answers only once its batch is written.

Durability. Nothing is shown or acknowledged before it is in the store:
- a submission is inserted first and handed to the scheduler only once committed;
- a read waits until every change made before it is written;
- while the store fails, the loop does not step and changes are refused (503 with
  the reason and Retry-After); what was already changed stays queued and is retried.

Restart recovery (see docs/design/004-service.md): the store holds each job's
counters as of `accounted_at`; at start-up they are carried forward to now
(running jobs the backend still runs count as running, the others as waiting),
running jobs the backend still runs are adopted with their placement, the rest
wait for the first decision, which comes at once.

Here are the changes; the read-only views the routes call are in voda.api.reads
(ServiceReads, which Service extends), the errors in voda.api.errors (imported here, so
`from voda.api.service import NotFound` still holds).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Protocol, TypeVar, runtime_checkable

from sqlalchemy.orm import Session, sessionmaker

from voda.api import views
from voda.api.errors import Busy, Conflict, Forbidden, NotFound, StoreNotWritable
from voda.api.history import cluster_samples, queue_samples
from voda.api.job_labels import named
from voda.api.job_names import JobNames, name_taken, new_uid
from voda.api.queues import QueueBook, base_entries, check_entry
from voda.api.reads import HISTORY_SHOWN as HISTORY_SHOWN  # the routes import it from here
from voda.api.reads import ServiceReads
from voda.api.report_tokens import Reporter, ReportKeys, incarnation_of
from voda.api.suspensions import note_suspensions
from voda.api.token_file import ensure_report_key, key_check
from voda.api.writes import Batch, NameTaken, Pending, StoreUnavailable, StoreWriter
from voda.blas import serial_blas
from voda.config import ServerSettings, User, split_list
from voda.core.allocation import registry
from voda.core.goodput_report import GoodputReport, ReportRefused, model_of, model_to_dict
from voda.core.model import (
    Allocation,
    Cluster,
    Job,
    JobPlacement,
    JobStatus,
    Node,
    Placement,
    Plan,
    validate_job,
)
from voda.core.placement.base import Placer
from voda.core.placement.registry import get_placer
from voda.engine.backend import Backend, SupportsAdoption, SupportsDelete
from voda.engine.events import Event, EventKind
from voda.engine.forecast import forecast
from voda.engine.forecast import snapshot as forecast_snapshot
from voda.engine.forecasting import Forecaster, forecast_view
from voda.engine.scheduler import (
    ALL_GPU_TYPES,
    JobReason,
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
from voda.store.faults import classify

from . import activity_log
from .activity import Activity
from .metrics import ServiceMetrics

log = logging.getLogger(__name__)
T = TypeVar("T")

QUEUED = frozenset({JobStatus.SUBMITTED, JobStatus.WAITING})
# Goodput fits (SciPy, tens of milliseconds, mostly holding the GIL) run outside the
# scheduler lock, one at a time; at most FIT_ADMISSIONS reports fit or wait to, the next
# is answered 429 at once: reports cannot take every worker thread or the interpreter.
CONCURRENT_FITS = 1
FIT_ADMISSIONS = 4


@runtime_checkable
class SupportsState(Protocol):
    """A backend whose state must survive the process (the emulated cluster)."""

    name: str
    version: int

    def export_state(self) -> dict[str, Any]: ...

    def import_state(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class SupportsNodeChanges(Protocol):
    """A backend whose nodes can be added and removed while it runs."""

    def add_node(self, node: Node) -> None: ...

    def remove_node(self, name: str) -> None: ...


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
        s.history(record.name, now, "status", str(old), str(new))
        if (old in QUEUED) != (new in QUEUED):
            s.count_queued(views.owner_of(record), 1 if new in QUEUED else -1)
        if new.is_terminal:
            s.metrics.job_finished(record.gpu_type, new)
            s.pending.ended.append(record.name)  # its name is free once this is queued

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
        s.metrics.reasons(s.scheduler.job_reasons, s.scheduler.active)
        s.activity.decision(plan, now, s.scheduler.last_reasons, seconds)
        for action in plan.actions:  # the allocation history the dashboard draws
            s.history(action.job, now, str(action.kind), str(action.workers_before),
                      str(action.workers_after))
        if s.first_schedule_at is None:
            s.first_schedule_at = time.time()
        s.forecaster.after_decision(s.scheduler, now)  # computed off the decision path

    def on_error(self, error: Exception, now: float, gpu_type: str = ALL_GPU_TYPES) -> None:
        self.service.metrics.decision_refused(gpu_type)
        self.service.activity.error(now, gpu_type, str(error))

    def on_recovered(self, gpu_type: str, now: float) -> None:
        self.service.metrics.decision_recovered(gpu_type)

    def on_reason(self, record: JobRecord, old: JobReason | None, new: JobReason | None,
                  now: float) -> None:
        """A change of code is an event of the job (describe shows it, as kubectl does)."""
        self.service.history(record.name, now, "reason", str(old.code) if old else None,
                             str(new.code) if new else "AtMax",
                             new.message if new else "holds its max GPUs")

    def on_event_failed(self, event: Event, error: Exception, now: float) -> None:
        s = self.service
        s.metrics.event_failed(str(event.kind))
        record = s.scheduler.jobs.get(event.job) if event.job else None
        node = event.node.name if event.node else "?"
        about = f"job {event.job}" if event.job else f"node {node}"
        s.activity.error(now, record.gpu_type if record else ALL_GPU_TYPES,
                         f"{event.kind} of {about} dropped: {type(error).__name__}: {error}")

    def on_promoted(self, record: JobRecord, now: float) -> None:
        self.service.pending.states[record.name] = record  # its reset counters are kept

    def on_goodput(self, record: JobRecord, category_learned: bool) -> None:
        s = self.service
        values = model_to_dict(record.goodput)
        s.pending.goodput[record.name] = values
        if category_learned:
            s.pending.category_goodput[history_key(record)] = values

    def on_epoch(self, record: JobRecord, epoch: int, seconds: float, workers: int) -> None:
        s = self.service
        s.pending.states[record.name] = record
        key = history_key(record)
        if record.category and workers in record.epoch_time_by_workers:
            s.pending.category[(key, workers)] = record.epoch_time_by_workers[workers]
        layout = layout_key(record.placement)
        if record.category and layout in record.layout_throughput:
            s.pending.layouts[(key, layout)] = record.layout_throughput[layout]


# The report-token secret as earlier versions kept it, in plain text (now removed), and
# the hash of the key as kept now (voda.api.token_file.key_check).
REPORT_SECRET_KEY = "report_secret"
REPORT_KEY_CHECK = "report_key_check"


class Service(ServiceReads):
    def __init__(self, settings: ServerSettings, backend: Backend,
                 sessions: sessionmaker[Session] | None = None) -> None:
        self.settings = settings
        self.backend = backend
        self.engine = None
        if sessions is None:
            self.engine = make_engine(settings.db, settings.db_max_bytes)
            sessions = session_factory(self.engine)
        self.sessions = sessions
        self.metrics = ServiceMetrics()
        self.activity = Activity()
        # Every node the cluster had (and the removed ones stored), by name: those gone
        # are shown lost.
        self.seen_nodes: dict[str, Node] = {}
        self._present_nodes: set[str] = set()  # in the cluster (drained too) at the last step
        self.lock = threading.RLock()
        self._lock_since: float | None = None
        self._lock_depth = 0
        self.writer = StoreWriter(sessions, on_cleanup=self._forget_names,
                                  on_written=self.metrics.store_written)
        self.pending = Pending()
        self.inbox_lock = threading.Lock()
        self.inbox: list[JobRecord] = []
        self.names: set[str] = set()  # every job's uid (voda.api.job_names)
        self.job_names = JobNames()  # names as given: the live jobs' unique
        if hasattr(backend, "said"):  # the Kubernetes backend's reasons on job objects
            backend.said = lambda text: named(text, self.job_names.name_of)
        # (user, Idempotency-Key) -> (job uid, SHA-256 of the body); None while in flight.
        self.idempotency: dict[tuple[str, str], tuple[str, str] | None] = {}
        self.queued_by_user: dict[str, int] = {}
        self.unschedulable: dict[str, str] = {}
        self.suspended: dict[str, str] = {}  # job -> why Kueue holds it (note_suspensions)
        self.drained: dict[str, Node] = {}
        self.import_paths = frozenset(split_list(settings.algorithm_paths)) | (
            {settings.algorithm} if ":" in settings.algorithm else set())
        self.placer = TimedPlacer(get_placer(settings.placement, settings.placement_settings))
        # Each job's start and finish, assuming no new arrivals: refreshed after each
        # decision on a thread of its own, with a placer of its own (011-forecast.md).
        self.forecaster = Forecaster(placer=get_placer(settings.placement,
                                                       settings.placement_settings))
        self.started_at = time.time()
        self._last_sample: float | None = None
        self.first_schedule_at: float | None = None
        self.recovered_jobs = 0
        self.adopted_running_jobs = 0
        self._backend_version = -1
        self.fits = threading.BoundedSemaphore(CONCURRENT_FITS)
        self.fit_admissions = threading.BoundedSemaphore(FIT_ADMISSIONS)
        self.scheduler: Scheduler = None  # type: ignore[assignment]  # set by start()
        # The team queues in force (voda.api.queues); set by start().
        self.queue_book: QueueBook = None  # type: ignore[assignment]
        self.report_keys: ReportKeys = None  # type: ignore[assignment]  # set by start()

    # ----- start-up and recovery --------------------------------------------------------
    def start(self) -> None:
        now = time.time()
        if self.engine is not None:
            migrate(self.engine)
        self._check_writable(now)
        self.report_keys = ReportKeys(self._report_secret(now))
        with self.sessions() as session:
            rows = store.load_jobs(session)
            history = store.load_category_history(session)
            layouts = store.load_layout_history(session)
            goodput = store.load_goodput_history(session)
            settings_rows = store.load_settings(session)
            node_rows = store.load_nodes(session)
            queue_rows = [(q.name, q.entry) for q in store.load_queues(session)]
            backend_state = (store.load_backend_state(session, self.backend.name)
                             if isinstance(self.backend, SupportsState) else None)
        self._apply_stored_nodes(node_rows)
        self.queue_book = QueueBook(base_entries(self.settings.queue_file,
                                                 self.settings.queue_entries), queue_rows,
                                    on_reclaim=self.metrics.reclaimed)
        if backend_state is not None and isinstance(self.backend, SupportsState):
            self.backend.import_state(backend_state)
        sched_settings = self._scheduler_settings(settings_rows)
        self.scheduler = Scheduler(self.backend, sched_settings, placer=self.placer,
                                   observers=self._observers(), category_history=history, now=now,
                                   layout_history=layouts, goodput_history=goodput)
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
            key = record.extra.get("idempotency_key")
            if key:
                self.idempotency[(views.owner_of(record), key)] = (
                    record.name, str(record.extra.get("request_hash") or ""))
            if record.status in QUEUED:
                self.count_queued(views.owner_of(record), 1)
        for node in self.drained.values():
            self._take_out(node, now)
        self._present_nodes = self._note_nodes()
        self._note_schedulability(now)
        self.names = set(self.scheduler.jobs)
        for record in records:  # oldest first (load_jobs)
            self.job_names.add(views.name_of(record), record.name,
                               live=not record.status.is_terminal,
                               owner=views.owner_of(record))
        self.recovered_jobs = len(records)
        self.adopted_running_jobs = sum(1 for r in records if r.status is JobStatus.RUNNING)
        log.info("recovered %d jobs (%d running, adopted) in %.3f s", len(records),
                 self.adopted_running_jobs, time.time() - self.started_at)

    def _observers(self) -> list[SchedulerObserver]:
        """The store, metrics and history (_Observer), and the log (voda.activity)."""
        return [_Observer(self),
                activity_log.ActivityLog(reasons=lambda: self.scheduler.last_reasons,
                                         name_of=self.job_names.name_of)]

    def _check_writable(self, now: float) -> None:
        try:
            with self.sessions.begin() as session:
                store.touch(session, "started_at", repr(now), now)
        except Exception as error:
            raise StoreNotWritable(f"db: the store does not take writes: "
                                   f"{classify(error).reason}") from error

    def _report_secret(self, now: float) -> str:
        """The key report tokens are signed with: VODA_REPORT_KEY or an owner-only key file
        (voda.api.token_file), never the store, so that reading the store does not let
        anyone sign a report token. The store keeps a hash of it, to say when it changed.

        A store of an earlier version kept the secret itself (`report_secret`): it is
        deleted and not reused (whoever could read the store could have taken it), so
        report tokens signed before stop working; the Kubernetes backend hands running
        jobs new ones in their Secrets (report_secret_check_seconds)."""
        try:
            secret, path = ensure_report_key(self.settings)
        except OSError as exc:
            raise ValueError(f"report_key_file: cannot keep the report-token key: {exc} (set "
                             "report_key_file, or VODA_REPORT_KEY on every replica)") from exc
        check = key_check(secret)
        where = str(path) if path is not None else "report_key"
        try:
            with self.sessions.begin() as session:
                legacy = store.state_value(session, REPORT_SECRET_KEY)
                stored = store.state_value(session, REPORT_KEY_CHECK)
                if legacy is not None:
                    store.delete_state_value(session, REPORT_SECRET_KEY)
                if stored != check:
                    store.touch(session, REPORT_KEY_CHECK, check, now)
        except Exception as error:  # another replica wrote the same at once
            log.info("the report key's check was written concurrently (%s)",
                     classify(error).reason)
            return secret
        if legacy is not None:
            log.warning("the store held the report-token secret in plain text: removed; "
                        "report tokens are now signed with the key of %s, and those signed "
                        "before no longer verify", where)
        elif stored is not None and stored != check:
            log.warning("the report-token key (%s) is not the one this store last saw: "
                        "report tokens signed before no longer verify (replicas must share "
                        "one key: VODA_REPORT_KEY)", where)
        return secret

    def _scheduler_settings(self, rows: list[Any]) -> SchedulerSettings:
        settings = SchedulerSettings(algorithm=self.settings.algorithm,
                                     rate_limit_seconds=self.settings.rate_limit_seconds,
                                     queues=self.queue_book.queues,
                                     queue_observer=self.queue_book.observe)
        for row in rows:
            if not registry.is_known(row.algorithm, self.import_paths):
                log.warning("stored algorithm %r for %s is unknown; using %s", row.algorithm,
                            row.gpu_type, self.settings.algorithm)
                continue
            try:
                registry.create(row.algorithm, row.params, self.import_paths)
            except ValueError as exc:  # knobs this version no longer takes
                log.warning("stored parameters of %r for %s are refused (%s); using %s",
                            row.algorithm, row.gpu_type, exc, self.settings.algorithm)
                continue
            if row.gpu_type == store.DEFAULT_SETTINGS_KEY:
                settings.algorithm = row.algorithm
                settings.algorithm_params = dict(row.params)
                if row.rate_limit_seconds is not None:
                    settings.rate_limit_seconds = row.rate_limit_seconds
            else:
                settings.algorithm_by_gpu_type[row.gpu_type] = (row.algorithm, row.params)
        return settings

    def _apply_stored_nodes(self, rows: list[Any]) -> None:
        """Nodes added, drained or removed at run time, over what the backend offers."""
        if not rows:
            return
        if not isinstance(self.backend, SupportsNodeChanges):
            log.warning("the store holds node changes this backend cannot make; ignored")
            return
        offered = {n.name for n in self.backend.nodes()}
        for row in rows:
            node = Node(row.name, row.gpus, row.gpu_type, row.leaf, row.spine)
            if row.state == "removed":
                if row.name in offered:
                    self.backend.remove_node(row.name)
                self.seen_nodes[row.name] = node  # shown lost
                continue
            if row.name not in offered:
                self.backend.add_node(node)
            if row.state == "drained":
                self.drained[row.name] = node

    def _recover(self, record: JobRecord, accounted_at: float, now: float,
                 running: dict[str, JobPlacement]) -> JobRecord:
        """Carry a stored job's counters forward to `now` and match it with the backend."""
        record.extra["category"] = views.user_category(record.category)
        if record.status.is_terminal:
            return record
        dt = max(0.0, now - accounted_at)
        placement = running.get(record.name)
        if placement:
            workers = sum(c for _, c in placement)
            record.placement, record.current_workers = tuple(placement), workers
            if record.status is not JobStatus.RUNNING:
                self.history(record.name, now, "status", str(record.status), "Running")
                record.status = JobStatus.RUNNING
            if record.first_start_time is None:
                record.first_start_time = now
        else:
            if record.status is JobStatus.RUNNING:  # the backend lost it: it waits again
                self.history(record.name, now, "status", "Running", "Waiting")
                record.status = JobStatus.WAITING
                record.preemptions += 1
                record.waiting_seconds_since_start = 0.0
            record.placement, record.current_workers = (), 0
        account(record, dt * self.scheduler.time_scale)  # the counters are in job seconds
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
        tokens = getattr(self.backend, "report_tokens", None)
        if isinstance(tokens, dict):  # a backend that hands its jobs a report credential
            tokens[record.name] = self.report_keys.mint(
                views.owner_of(record), record.name, incarnation_of(record.submit_time))

    def close(self) -> None:
        self.forecaster.close()
        with contextlib.suppress(StoreUnavailable):
            self._mutate(lambda: None, require_store=False)
        if self.writer.unwritten:
            log.error("the store is unavailable: %d batches of changes were not written",
                      self.writer.unwritten)
        if self.engine is not None:
            self.engine.dispose()

    # ----- the loop -----------------------------------------------------------------------
    def tick(self, now: float | None = None) -> Plan | None:
        """One scheduling step, then its writes. While the store fails, nothing moves:
        queued changes are retried (with backoff) and the step waits."""
        if not self.writer.health.ok and not self.writer.flush():
            return None
        try:
            plan = self._mutate(lambda: self._step(time.time() if now is None else now),
                                checkpoint=True)
        except Exception:
            self.metrics.step(time.time(), ok=False)
            raise
        self.metrics.step(time.time(), ok=True)
        return plan

    def _step(self, now: float) -> Plan | None:
        plan = self.scheduler.step(now)
        note_suspensions(self, now)
        self._note_backend_node_changes(now)
        self._sample(now)
        return plan

    def _note_backend_node_changes(self, now: float) -> None:
        """A node the backend stopped offering (a Kubernetes node deleted or gone
        NotReady, a host lost) or offers again gets an entry in its change list, as the
        changes administrators make do; theirs are noted where they are made."""
        present = self._note_nodes()
        for name in sorted(self._present_nodes - present):
            self._node_event(name, now, "lost", "the backend no longer offers this node")
        for name in sorted(present - self._present_nodes):
            self._node_event(name, now, "active", "the backend offers this node")
        self._present_nodes = present

    def _sample(self, now: float) -> None:
        """The cluster's history (voda.api.history): a sample per GPU type when one is
        due (and per queue and GPU type while queues are configured), written with the
        step's changes; older samples are then forgotten."""
        last = self._last_sample
        if last is not None and now - last < self.settings.history_sample_seconds:
            return
        self._last_sample = now
        s = self.scheduler
        self.pending.samples = cluster_samples(s.cluster, s.active.values(), now, s.time_scale)
        if self.queue_book.queues is not None:
            self.pending.queue_samples = queue_samples(self._queue_usage(), now)
        self.pending.keep_after = now - self.settings.history_days * 86400.0

    def flush(self) -> None:
        self._mutate(lambda: None, require_store=False)

    # ----- changes from the API -------------------------------------------------------------
    def submit(self, spec: JobSpec, user: User, idempotency_key: str | None = None,
               request_hash: str = "") -> tuple[dict[str, Any], bool]:
        """Admit a job: store it, then queue it for the scheduler, which takes it in at its
        next step (or at the next request that needs it). Returns the job and whether it
        was an earlier submission with the same Idempotency-Key.

        The scheduler lock is not taken, so a long decision does not hold submissions up.
        A job keeps its name, which no live job may hold (409 naming the field and the job
        that holds it; the store's unique index refuses it too, whichever replica wrote
        the other); its uid is new (voda.api.job_names)."""
        if idempotency_key:
            earlier = self._idempotent_replay(user, idempotency_key, request_hash)
            if earlier is not None:
                return earlier, True
        try:
            self._require_store()
            self._check_admission(spec, user)
            record, ticket = self._stage(spec, user, idempotency_key, request_hash)
        except BaseException:
            self._release_key(user, idempotency_key)
            raise
        name = record.name
        try:
            try:
                self.writer.write_through(ticket.seq, "the job was not accepted")
            except StoreUnavailable:
                if not (ticket.done and ticket.error is None):  # else: it was written alone
                    raise
            if isinstance(ticket.error, NameTaken):  # another service stored it first
                raise Conflict(spec.name_field, name_taken(views.name_of(record), None))
            if ticket.error is not None:
                raise ticket.error
        except BaseException:
            with self.inbox_lock:
                if name not in self.writer.doubtful:
                    self.names.discard(name)
                    self.job_names.forget(name)
                self.queued_by_user[user.name] = self.queued_by_user.get(user.name, 1) - 1
            self._release_key(user, idempotency_key)
            raise
        with self.inbox_lock:
            self.inbox.append(record)
            if idempotency_key:
                self.idempotency[(user.name, idempotency_key)] = (name, request_hash)
        self.metrics.job_created(spec.gpu_type)
        activity_log.submitted(record)
        return self._describe(record, time.time()), False

    def what_if(self, spec: JobSpec, user: User) -> dict[str, Any]:
        """When `spec` would start and finish if submitted now, assuming no other arrivals
        (nothing is stored or queued). Refused as a submission would be (4xx naming the
        field)."""
        self._check_admission(spec, user)
        now = time.time()
        category = f"{self.settings.history_owner(user.name)}/{spec.category}"
        known = self.scheduler.category_history.get((category, spec.gpu_type))
        job = Job(
            name=f"{spec.name or spec.generate_name}-what-if", min_workers=spec.min_workers,
            max_workers=spec.max_workers, preferred_workers=spec.preferred_workers,
            priority=spec.priority, submit_time=now, epochs=spec.epochs, category=category,
            gpu_type=spec.gpu_type, placement_strategy=spec.placement_strategy,
            preferred_domain=spec.preferred_domain, epoch_time_by_workers=dict(known or {}),
            queue=self.team_queue_of(spec, user),
        )
        problems = validate_job(job)
        if problems:
            raise SpecError([FieldError(*p.split(": ", 1)) for p in problems])
        while job.name in self.scheduler.jobs:
            job = replace(job, name=job.name + "-")
        with self._locked():
            given = forecast_snapshot(self.scheduler, now, self.forecaster.penalty,
                                      self.forecaster.placer)
        result = forecast(given, extra=[job])
        view = forecast_view(result.jobs[job.name], now)
        return {"name": spec.name or spec.generate_name, "min_workers": job.min_workers,
                "max_workers": job.max_workers, "gpu_type": job.gpu_type,
                "epochs": job.epochs, "forecast": view,
                "epoch_time_by_workers": dict(sorted(job.epoch_time_by_workers.items()))}

    def _stage(self, spec: JobSpec, user: User, idempotency_key: str | None,
               request_hash: str) -> tuple[JobRecord, Any]:
        now = time.time()
        category = f"{self.settings.history_owner(user.name)}/{spec.category}"
        known = self.scheduler.category_history.get((category, spec.gpu_type))
        queue = self.team_queue_of(spec, user)
        job = Job(
            name=spec.name or f"{spec.generate_name}x", min_workers=spec.min_workers,
            max_workers=spec.max_workers,
            preferred_workers=spec.preferred_workers, priority=spec.priority, submit_time=now,
            epochs=spec.epochs, category=category, gpu_type=spec.gpu_type,
            placement_strategy=spec.placement_strategy, preferred_domain=spec.preferred_domain,
            epoch_time_by_workers=dict(known or {}), gpu_types=spec.gpu_types, queue=queue,
        )
        problems = validate_job(job)
        if problems:
            raise SpecError([FieldError(*p.split(": ", 1)) for p in problems])
        extra = {"user": user.name, "kind": spec.kind, "command": spec.command,
                 "image": spec.image, "profile": spec.profile, "category": spec.category,
                 "spec": spec.document}
        meta = {**extra, "idempotency_key": idempotency_key,
                "request_hash": request_hash or None}
        with self.inbox_lock:
            limits = self.settings.limits_of(user.name)
            queued = self.queued_by_user.get(user.name, 0)
            if not user.admin and queued >= limits.max_queued_jobs:
                raise Forbidden("queued_jobs", f"{user.name} has {queued} jobs waiting, the "
                                f"most allowed; wait for some to start or delete some")
            given, name = self._claim_name(spec, user, now)  # 409 when a live job has it
            self.queued_by_user[user.name] = queued + 1
            self.names.add(name)
        job = replace(job, name=name)
        record = JobRecord.from_job(job)
        record.extra.update(extra, given_name=given)
        meta["given_name"] = given
        ticket = self.writer.enqueue(Batch(
            inserts=[store.new_job_values(record, meta, now)], states=[],
            history=[_history_entry(name, now, "status", None, str(record.status))],
            category=[], backend_state=None, now=now, submission=True))
        return record, ticket

    def _claim_name(self, spec: JobSpec, user: User, now: float) -> tuple[str, str]:
        """The new job's name (as given, or generated from generate_name) and its uid,
        claimed in `job_names` (under `inbox_lock`); 409 when a live job has the name,
        naming its uid when `user` may see it."""
        if spec.generate_name is not None:
            given, name = self.job_names.claim_generated(spec.generate_name, now, user.name)
        else:
            given, name = spec.name, new_uid(spec.name, now)
            holder = self.job_names.live.get(given)
            if holder is not None and holder in self.writer.doubtful:
                # A submission refused for a store fault: its row, if it was stored after
                # all, is deleted before any later insert (voda.api.writes).
                self.job_names.release(holder)
            holder = self.job_names.claim(given, name, user.name)
            if holder is not None:
                shown = user.admin or self.job_names.owner_of.get(holder) == user.name
                raise Conflict(spec.name_field, name_taken(given, holder if shown else None))
        while name in self.names:  # the same second and the same 24 random bits
            self.job_names.forget(name)
            name = new_uid(given, now)
            self.job_names.add(given, name, live=True, owner=user.name)
        return given, name

    def _idempotent_replay(self, user: User, key: str,
                           request_hash: str) -> dict[str, Any] | None:
        with self.inbox_lock:
            slot = (user.name, key)
            if slot not in self.idempotency:
                self.idempotency[slot] = None  # in flight: a concurrent retry waits its turn
                return None
            earlier = self.idempotency[slot]
        if earlier is None:
            raise Conflict("Idempotency-Key", "a request with this key is still being "
                           "processed; retry in a moment")
        name, digest = earlier
        if digest and request_hash and digest != request_hash:
            raise SpecError([FieldError("Idempotency-Key", "already used for a different "
                                        f"job ({name}); use a new key for a new job")])
        return self.get(name, user)

    def _release_key(self, user: User, key: str | None) -> None:
        if key:
            with self.inbox_lock:
                if self.idempotency.get((user.name, key)) is None:
                    self.idempotency.pop((user.name, key), None)

    def _forget_names(self, names: list[str]) -> None:
        """Refused submissions whose rows were deleted: their names are free again."""
        with self.inbox_lock:
            self.names.difference_update(names)
            for name in names:
                self.job_names.forget(name)

    def _release_names(self, ended: list[str]) -> None:
        """Jobs that finished, their final state queued for the store before any
        submission that reuses their name can be: those names are free again."""
        if not ended:
            return
        with self.inbox_lock:
            for uid in ended:
                self.job_names.release(uid)

    def count_queued(self, user: str, change: int) -> None:
        with self.inbox_lock:
            self.queued_by_user[user] = max(0, self.queued_by_user.get(user, 0) + change)

    def _admit(self) -> None:
        """Hand the admitted (stored) jobs to the scheduler (under `lock`)."""
        with self.inbox_lock:
            records, self.inbox = self.inbox, []
        for record in records:
            job = record.snapshot()
            admitted = self.scheduler.submit(job)
            admitted.extra.update(record.extra)
            self._register_profile(admitted)

    def _check_admission(self, spec: JobSpec, user: User) -> None:
        cluster = self.scheduler.cluster
        types = cluster.gpu_types()
        compact = spec.kind == "VodaJob"
        if spec.gpu_type not in types:
            field_name = "gpu_type" if compact else "metadata.annotations.voda.io/gpu-type"
            raise SpecError([FieldError(field_name, f"unknown GPU type {spec.gpu_type!r}; the "
                                        f"cluster has: {', '.join(types)}")])
        capacity = cluster.capacity(spec.gpu_type)
        errors = []
        # An elastic job's max is a ceiling, not a demand: one above the GPUs there are
        # runs on what there is and grows when nodes join. Only a min that cannot fit is
        # refused (and counts stay bounded by the spec's MAX_WORKERS).
        if spec.min_workers > capacity:
            errors.append(FieldError(spec.field_names.get("min", "min"),
                                     f"{spec.min_workers} workers can never run: the cluster "
                                     f"has {capacity} {spec.gpu_type} GPUs"))
        if spec.preferred_domain is not None:
            of_type = cluster.of_type(spec.gpu_type).nodes
            domains = {n.leaf_name for n in of_type} | {n.spine_name for n in of_type} | {
                n.name for n in of_type}
            if spec.preferred_domain not in domains:
                errors.append(FieldError(
                    spec.field_names.get("preferred_domain", "preferred_domain"),
                    f"unknown domain {spec.preferred_domain!r}; the {spec.gpu_type} nodes are "
                    f"in: {', '.join(sorted(domains)[:20])}"))
        if errors:
            raise SpecError(errors)
        self._check_profile(spec)
        if spec.adaptive and not callable(getattr(self.backend, "adaptive_batch", None)):
            raise SpecError([FieldError("adaptive", f"the {self.backend_name} backend runs "
                                        "what the job's command does: a batch-adaptive job "
                                        "there reports its goodput itself (POST "
                                        "/v1/jobs/{name}/goodput); only the emulated "
                                        "cluster runs one from its profile")])
        check_spec = getattr(self.backend, "check_spec", None)
        if check_spec is not None:  # what this backend could never run (SpecError)
            check_spec(spec)
        if not user.admin:
            best = self.settings.limits_of(user.name).best_priority
            if spec.priority < best:
                raise Forbidden(spec.field_names.get("priority", "priority"),
                                f"{spec.priority} is better than the best priority "
                                f"{user.name} may use ({best})")
            if self.backend_name == "local" and not self.settings.local_user_jobs:
                raise Forbidden("command", "the local backend runs every job as the service's "
                                "own OS user: only administrators may submit to it (unless "
                                "local_user_jobs is set)")

    @property
    def backend_name(self) -> str:
        return str(getattr(self.backend, "name", self.settings.backend))

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
            self.scheduler.delete(record.name, now)
            self.pending.states[record.name] = record
            return self._describe(record, now)
        return self._mutate(run)

    def set_priority(self, name: str, priority: int, user: User) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            record = self._visible(name, user)
            if record.status.is_terminal:
                raise Conflict("priority", f"job {name!r} is {record.status}; its priority "
                               "can no longer change")
            best = self.settings.limits_of(user.name).best_priority
            if not user.admin and priority < best:
                raise Forbidden("priority", f"{priority} is better than the best priority "
                                f"{user.name} may use ({best})")
            old = record.priority
            self.scheduler.set_priority(record.name, priority)
            self.pending.states[record.name] = record
            now = time.time()
            self.history(record.name, now, "priority", str(old), str(priority))
            return self._describe(record, now)
        return self._mutate(run)

    def report_epoch(self, name: str, epoch: int, seconds: float, workers: int,
                     user: User, samples_per_second: float | None = None) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            record = self._reportable(name, user)
            _running(record, "reports epochs")
            errors = []
            if epoch > record.epochs:
                errors.append(FieldError("epoch", f"the job has {record.epochs} epochs, "
                                         f"got {epoch}"))
            if workers > record.current_workers:
                errors.append(FieldError("workers", f"the job runs on {record.current_workers}"
                                         f" workers, got {workers}"))
            if errors:
                raise SpecError(errors)
            now = time.time()
            data: dict[str, Any] = {"epoch": epoch, "epoch_seconds": seconds, "workers": workers}
            if samples_per_second is not None:
                data["samples_per_second"] = samples_per_second
            self.scheduler.handle(Event(EventKind.EPOCH_REPORTED, now, job=record.name,
                                        data=data))
            return self._describe(record, now)
        return self._mutate(run)

    def report_goodput(self, name: str, report: GoodputReport, user: User) -> dict[str, Any]:
        """A running batch-adaptive job's measurements: fitted (outside the lock) into its
        goodput model, which the allocation then reads, and which becomes its category's
        when measured on more GPUs than the category's."""
        def check() -> int:
            record = self._reportable(name, user)
            _running(record, "reports goodput")
            return record.max_workers

        self._require_store()  # before the fit: a report the store cannot take is refused
        with self._locked():
            self._admit()
            max_workers = check()
        if not self.fit_admissions.acquire(blocking=False):
            raise Busy("observations", f"{FIT_ADMISSIONS} goodput reports are being fitted "
                       "or wait to be; retry in a moment")
        try:
            with self.fits, serial_blas():  # one fit at a time: the thread count is ours
                model = model_of(report, max_workers)
        except ReportRefused as refused:
            raise SpecError([FieldError(f, r) for f, r in refused.problems]) from None
        finally:
            self.fit_admissions.release()

        def run() -> dict[str, Any]:
            record = self._reportable(name, user)
            _running(record, "reports goodput")
            now = time.time()
            self.scheduler.handle(Event(EventKind.GOODPUT_REPORTED, now, job=record.name,
                                        data={"goodput": model}))
            return self._describe(record, now)
        return self._mutate(run)

    def set_scheduler(self, gpu_type: str, algorithm: str | None, params: dict | None,
                      rate_limit: float | None) -> dict[str, Any]:
        """Raises UnknownAlgorithm / ValueError before anything changes. Over the API only
        registered names, entry points and the import paths of the server's own
        configuration (`algorithm_paths`) are accepted: nothing else is imported."""
        def run() -> dict[str, Any]:
            self._known_gpu_type(gpu_type)
            current, current_params = self._algorithm_of(gpu_type)
            if algorithm is not None or params is not None:
                name = algorithm or current
                new_params = params if params is not None else (
                    current_params if name == current else {})
                registry.create(name, new_params, self.import_paths)  # validates first
                self._store_write(lambda s: store.save_algorithm(s, gpu_type, name, new_params))
                self.scheduler.set_algorithm(name, new_params, gpu_type=gpu_type)
            if rate_limit is not None:
                default = self.scheduler.settings.algorithm
                self._store_write(lambda s: store.save_rate_limit(s, rate_limit, default))
                self.scheduler.set_rate_limit(rate_limit)
            return self._scheduler_view(gpu_type)
        return self._mutate(run)

    # ----- team queues (voda.api.queues) ---------------------------------------------------
    def team_queue_of(self, spec: JobSpec, user: User) -> str:
        """A new job's team queue; SpecError naming the field when it names an unknown one."""
        namespace = (getattr(getattr(self.backend, "settings", None), "namespace", None)
                     if self.backend_name == "kubernetes" else None)
        return self.queue_book.queue_for(spec.queue, spec.field_names.get("queue", "queue"),
                                         self.settings.limits_of(user.name).queue, namespace)

    def put_queue(self, name: str, body: Any) -> tuple[dict[str, Any], bool]:
        """Create or replace a queue (administrators); stored, then in force. Returns its
        view and whether it is new. SpecError naming the field when it is refused."""
        entry = check_entry(name, body)

        def run() -> tuple[dict[str, Any], bool]:
            created = name not in self.queue_book.declared()
            self.queue_book.planned_put(name, entry)  # refused before anything is stored
            self._store_write(lambda s: store.save_queue(s, name, entry, time.time()))
            self.queue_book.apply(name, entry)
            self.scheduler.set_queues(self.queue_book.queues)
            return self._queue_view(name), created
        return self._mutate(run)

    def delete_queue(self, name: str) -> dict[str, Any]:
        """Delete a queue (administrators): its jobs are in `default` from the next decision."""
        def run() -> dict[str, Any]:
            if name not in self.queue_book.declared():
                raise NotFound(f"queue {name!r} not found; queues: "
                               f"{', '.join(self.queue_book.declared()) or 'none declared'}")
            shown = self._queue_view(name)
            self._store_write(lambda s: store.save_queue(s, name, None, time.time()))
            self.queue_book.apply(name, None)
            self.scheduler.set_queues(self.queue_book.queues)
            return shown
        return self._mutate(run)

    # ----- nodes ------------------------------------------------------------------------------
    def add_node(self, node: Node) -> dict[str, Any]:
        """A new node, or a drained one back in service."""
        def run() -> dict[str, Any]:
            backend = self._node_backend()
            now = time.time()
            known = {n.name: n for n in self.backend.nodes()}
            if node.name in known and node.name not in self.drained:
                raise Conflict("name", f"node {node.name!r} is already in service")
            if node.name in self.drained:
                node_ = self.drained.pop(node.name)
            else:
                backend.add_node(node)
                node_ = node
            self.scheduler.handle(Event(EventKind.NODE_ADDED, now, node=node_))
            self._node_changed(node_, "active", now)
            return self._node_view(node_)
        return self._mutate(run)

    def drain_node(self, name: str) -> dict[str, Any]:
        """The node takes no workers; the jobs on it stop (keeping their checkpoints) and
        wait to be placed elsewhere."""
        def run() -> dict[str, Any]:
            self._node_backend()
            node = self._node(name)
            if name in self.drained:
                return self._node_view(node)
            now = time.time()
            self.drained[name] = node
            self._take_out(node, now)
            self._node_changed(node, "drained", now)
            return self._node_view(node)
        return self._mutate(run)

    def remove_node(self, name: str) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            backend = self._node_backend()
            node = self._node(name)
            now = time.time()
            if name not in self.drained:
                self._take_out(node, now)
            self.drained.pop(name, None)
            backend.remove_node(name)
            self.seen_nodes[name] = node  # shown lost
            self._node_changed(node, "removed", now)
            return {**self._node_view(node), "schedulable": False, "removed": True}
        return self._mutate(run)

    def _take_out(self, node: Node, now: float) -> None:
        """The node leaves the scheduler's cluster; its jobs stop and wait."""
        self.scheduler.halt_jobs_on(node.name, now)
        self.scheduler.handle(Event(EventKind.NODE_REMOVED, now, node=node))

    def _node_changed(self, node: Node, state: str, now: float) -> None:
        """The node's row, and its change in the node's history (`node_events`)."""
        self.pending.nodes.append(_node_values(node, state, now))
        self._node_event(node.name, now, state, None)
        if state == "removed":
            self._present_nodes.discard(node.name)
        else:
            self._present_nodes.add(node.name)
        self._note_schedulability(now)

    def _node_event(self, name: str, now: float, state: str, message: str | None) -> None:
        self.pending.node_events.append({"node": name, "time": now, "state": state,
                                         "message": message})

    def _node_backend(self) -> SupportsNodeChanges:
        if not isinstance(self.backend, SupportsNodeChanges):
            raise Conflict("backend", f"the {self.backend_name} backend cannot change its "
                           "nodes while it runs")
        return self.backend

    def _node(self, name: str) -> Node:
        for node in self.backend.nodes():
            if node.name == name:
                return node
        raise NotFound(f"node {name!r} not found")

    def _note_schedulability(self, now: float) -> None:
        """Say so (describe, an event) when a waiting job's min no longer fits, and when it
        fits again."""
        cluster = self.scheduler.cluster
        for record in self.scheduler.active.values():
            capacity = cluster.capacity(record.gpu_type)
            reason = None
            if record.min_workers > capacity:
                reason = (f"min {record.min_workers} workers do not fit: the cluster has "
                          f"{capacity} {record.gpu_type} GPUs")
            before = self.unschedulable.get(record.name)
            if reason == before:
                continue
            if reason is None:
                self.unschedulable.pop(record.name, None)
                self.history(record.name, now, "event", None, "Schedulable",
                             f"min {record.min_workers} workers fit again")
            else:
                self.unschedulable[record.name] = reason
                self.history(record.name, now, "event", None, "Unschedulable", reason)

    def _note_nodes(self) -> set[str]:
        """Note the nodes the cluster has now (under the lock); their names."""
        for node in (*self.scheduler.cluster.nodes, *self.drained.values()):
            self.seen_nodes[node.name] = node
        return {n.name for n in self.scheduler.cluster.nodes} | set(self.drained)

    # ----- internals ------------------------------------------------------------------------------
    def _reportable(self, name: str, user: User) -> JobRecord:
        """The job `user` may report for. A report token holds only for its own job, while
        that job (the same submission) has not ended."""
        if not isinstance(user, Reporter):
            return self._visible(name, user)
        record = self.scheduler.jobs.get(user.job)  # the token names the job's uid
        if (record is None or name not in (user.job, views.name_of(record))
                or views.owner_of(record) != user.name
                or incarnation_of(record.submit_time) != user.incarnation):
            raise Forbidden("authorization", f"this report token is not valid for job "
                            f"{name[:200]!r}: it reports only for the job it was issued to")
        if record.status.is_terminal:
            raise Forbidden("authorization", f"job {name!r} is {record.status}: its report "
                            "token is no longer valid")
        return record

    def history(self, job: str, now: float, field_name: str, old: str | None, new: str,
                message: str | None = None) -> None:
        self.pending.history.append(_history_entry(job, now, field_name, old, new, message))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """`lock`, noting since when it is held (for /readyz)."""
        with self.lock:
            outer = self._lock_depth == 0
            if outer:
                self._lock_since = time.monotonic()
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
                if outer:
                    self._lock_since = None

    def _store_write(self, write: Callable[[Session], None]) -> None:
        """A write of its own (settings), made before the change it records."""
        try:
            with self.sessions.begin() as session:
                write(session)
        except Exception as error:
            fault = classify(error)
            if not fault.transient:
                raise
            self.writer.health.failed(fault)
            raise self.writer.health.unavailable("nothing was changed") from None

    def _store_read(self, read: Callable[[Session], T]) -> T:
        try:
            with self.sessions() as session:
                return read(session)
        except Exception as error:
            fault = classify(error)
            if not fault.transient:
                raise
            raise StoreUnavailable(fault, 1.0) from None

    def _require_store(self) -> None:
        """Refuse a change while the store fails (after one more try when it is due)."""
        if not self.writer.health.ok and not self.writer.flush():
            raise self.writer.health.unavailable("nothing was changed")

    def _read(self, read: Callable[[], T]) -> T:
        """`read` under the lock, answered once everything it may show is in the store."""
        with self._locked():
            result = read()
            seq = self.writer.seq
        self.writer.write_through(seq, "what would be shown is not stored yet")
        return result

    def _mutate(self, change: Callable[[], T], checkpoint: bool = False,
                require_store: bool = True) -> T:
        """Run `change` under the lock, then wait until what it left pending is written."""
        if require_store:
            self._require_store()
        with self._locked():
            self._admit()
            result = change()
            ended = self.pending.ended
            ticket = self.writer.enqueue(self._take(checkpoint))
            self._release_names(ended)
        self.writer.write_through(ticket.seq, "the change is made but not stored yet")
        return result

    def _take(self, checkpoint: bool) -> Batch:
        p, self.pending = self.pending, Pending()
        accounted = self.scheduler.accounted_until
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
            backend_name=self.backend_name,
            nodes=p.nodes,
            node_events=p.node_events,
            samples=p.samples,
            queue_samples=p.queue_samples,
            keep_after=p.keep_after,
            goodput=list(p.goodput.items()),
            category_goodput=list(p.category_goodput.items()),
        )


def _running(record: JobRecord, what: str) -> None:
    if record.status is not JobStatus.RUNNING:
        raise Conflict("status", f"job {record.name!r} is {record.status}; only a running job "
                       f"{what}")


def _history_entry(job: str, now: float, field_name: str, old: str | None, new: str,
                   message: str | None = None) -> dict[str, Any]:
    return {"job": job, "time": now, "field": field_name, "old": old, "new": new,
            "message": message}


def _node_values(node: Node, state: str, now: float) -> dict[str, Any]:
    return {"name": node.name, "gpus": node.gpus, "gpu_type": node.gpu_type,
            "leaf": node.leaf, "spine": node.spine, "state": state, "updated_at": now}
