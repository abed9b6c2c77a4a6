"""The service's read-only views: what the routes read of it (a job, the job list and
counts, a job's history and log, the cluster, the scheduler's settings, refused
decisions, health, readiness, the metrics) and the helpers that shape a job or a node
for an answer.

`ServiceReads` is the read-only part of Service (voda.api.service), which extends it:
its methods read the state Service keeps, under Service's lock, and answer once what
they show is in the store; they change nothing. The changes are in voda.api.service;
the views of one record in voda.api.views.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from voda.api import views
from voda.api.errors import Conflict, NotFound
from voda.api.history import MAX_POINTS
from voda.api.job_labels import named_or_none
from voda.api.job_names import JobNames
from voda.api.metrics import ServiceMetrics
from voda.api.queues import QueueBook, queue_view, usage_of
from voda.api.writes import StoreWriter
from voda.config import ServerSettings, User
from voda.core.allocation import registry
from voda.core.model import JobStatus, Node
from voda.core.quotas import DEFAULT_QUEUE
from voda.core.quotas.usage import TypeUsage
from voda.engine.backend import Backend
from voda.engine.scheduler import JobRecord, Scheduler
from voda.store import history as samples_store
from voda.store import jobs as store

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from sqlalchemy.orm import Session

T = TypeVar("T")

LOCK_STALL_SECONDS = 5.0  # /readyz fails when the scheduler lock is held longer
WRITE_STALL_SECONDS = 5.0
EVENTS_SHOWN = 20
HISTORY_SHOWN = 1000  # the most history entries one answer holds (the newest)
NODE_EVENTS_SHOWN = 50


class ServiceReads:
    """What Service answers without changing anything (see the module's docstring)."""

    # Set by Service's __init__ and start().
    settings: ServerSettings
    backend: Backend
    scheduler: Scheduler
    writer: StoreWriter
    metrics: ServiceMetrics
    inbox_lock: threading.Lock
    names: set[str]
    job_names: JobNames
    unschedulable: dict[str, str]
    suspended: dict[str, str]
    drained: dict[str, Node]
    seen_nodes: dict[str, Node]
    import_paths: frozenset[str]
    queue_book: QueueBook
    started_at: float
    first_schedule_at: float | None
    recovered_jobs: int
    adopted_running_jobs: int
    _lock_since: float | None

    if TYPE_CHECKING:  # Service's own: its lock, the store, the admitted jobs, the nodes
        def _locked(self) -> AbstractContextManager[None]: ...

        def _read(self, read: Callable[[], T]) -> T: ...

        def _store_read(self, read: Callable[[Session], T]) -> T: ...

        def _admit(self) -> None: ...

        def _note_nodes(self) -> set[str]: ...

    # ----- reads ------------------------------------------------------------------------------
    def get(self, name: str, user: User) -> dict[str, Any]:
        """The job `name` means (see `_visible`), with its newest events."""
        def read() -> dict[str, Any]:
            self._admit()
            return self._describe(self._visible(name, user), time.time())
        view = self._read(read)
        uid = view["uid"]
        rows = self._store_read(lambda s: store.history(s, uid, last=EVENTS_SHOWN))
        hidden = self._hidden_from(user)
        view["events"] = [{"time": r.time, "field": r.field, "old": r.old, "new": r.new,
                           "message": self._said(r.message, hidden)} for r in rows]
        return self._readable(view, hidden)

    def _said(self, message: str | None, hidden: Callable[[str], bool] | None) -> str | None:
        """A sentence as `hidden`'s viewer reads it: the jobs it may not see redacted, the
        others said by name (voda.api.job_labels)."""
        return named_or_none(_redacted(message, hidden), self.job_names.name_of)

    def _readable(self, job: dict[str, Any], hidden: Callable[[str], bool] | None
                  ) -> dict[str, Any]:
        """A job's view with its reason's sentence as its viewer reads it (`_said`)."""
        reason = job.get("reason")
        if not reason:
            return job
        return {**job, "reason": {**reason, "message": self._said(reason["message"], hidden)}}

    def _hidden_from(self, user: User) -> Callable[[str], bool] | None:
        """Whether a name is a job `user` may not see: reasons and events name the jobs
        ahead of a job and those that took its GPUs (None: an administrator sees all)."""
        if user.admin:
            return None
        jobs = self.scheduler.jobs

        def hidden(name: str) -> bool:
            record = jobs.get(name)
            return record is not None and not views.visible(user, record)
        return hidden

    def list(self, user: User, status: str | None, gpu_type: str | None, owner: str | None,
             offset: int, limit: int, search: str | None = None,
             newest_first: bool = False) -> tuple[list[dict[str, Any]], int]:
        """One page of the jobs `user` may see, oldest first (or newest first), and how many
        there are. `search` keeps the jobs whose name or owner contains it (any case)."""
        status_l = status.lower() if status is not None else None
        needle = search.lower() if search else None

        def read() -> tuple[list[dict[str, Any]], int]:
            self._admit()
            records = [r for r in self.scheduler.jobs.values()
                       if views.visible(user, r)
                       and (status_l is None or str(r.status).lower() == status_l)
                       and (gpu_type is None or r.gpu_type == gpu_type)
                       and (owner is None or views.owner_of(r) == owner)
                       and (needle is None or needle in r.name.lower()
                            or needle in views.owner_of(r).lower())]
            records.sort(key=lambda r: (r.submit_time, r.name), reverse=newest_first)
            page = records[offset:offset + limit]
            hidden = self._hidden_from(user)
            return [self._readable(self._summary(r), hidden) for r in page], len(records)
        return self._read(read)

    def counts_by_status(self, user: User) -> dict[str, int]:
        """How many of the jobs `user` may see are in each status."""
        def read() -> dict[str, int]:
            self._admit()
            counts = {str(s): 0 for s in JobStatus}
            for r in self.scheduler.jobs.values():
                if views.visible(user, r):
                    counts[str(r.status)] += 1
            return counts
        return self._read(read)

    def job_history(self, name: str, user: User,
                    last: int = HISTORY_SHOWN) -> list[dict[str, Any]]:
        """A job's newest `last` status, priority, event and allocation changes, oldest
        first (as stored)."""
        def read() -> str:
            self._admit()
            return self._visible(name, user).name
        uid = self._read(read)
        rows = self._store_read(lambda s: store.history(s, uid, last=last))
        hidden = self._hidden_from(user)
        return [{"time": r.time, "field": r.field, "old": r.old, "new": r.new,
                 "message": self._said(r.message, hidden)} for r in rows]

    def log_tail(self, name: str, user: User, lines: int) -> str | None:
        """The last lines of a job's log, on a backend that keeps logs (None elsewhere)."""
        with self._locked():
            uid = self._visible(name, user).name
        log_path = getattr(self.backend, "log_path", None)
        if log_path is None:
            return None
        from voda.backends.local import read_tail

        path = log_path(uid)
        return read_tail(path, lines=lines) if path.is_file() else ""

    def log_file(self, name: str, user: User) -> tuple[Path, str]:
        """Where the backend keeps the log of a job `user` may see (404 otherwise, as for
        every read of a job), and the job's uid; 409 on a backend that keeps none."""
        with self._locked():
            self._admit()
            uid = self._visible(name, user).name
        log_path = getattr(self.backend, "log_path", None)
        if log_path is None:
            hint = (" (the pods' logs: kubectl logs)" if self.settings.backend == "kubernetes"
                    else "")
            raise Conflict("logs", f"the {self.settings.backend} backend keeps no job logs; "
                           f"only the local backend does{hint}")
        try:
            return Path(log_path(uid)), uid
        except ValueError as exc:  # not a name the backend keeps files under
            raise NotFound(f"job {name!r} has no log: {exc}") from None

    def log_ended(self, uid: str) -> bool:
        """Whether nothing more will be written to the job's log: it ended (or is gone)."""
        record = self.scheduler.jobs.get(uid)
        return record is None or record.status.is_terminal

    def scheduler_view(self, gpu_type: str) -> dict[str, Any]:
        return self._read(lambda: self._scheduler_view(gpu_type))

    def _scheduler_view(self, gpu_type: str) -> dict[str, Any]:
        self._known_gpu_type(gpu_type)
        name, params = self._algorithm_of(gpu_type)
        return {"gpu_type": gpu_type, "algorithm": name, "params": params,
                "rate_limit_seconds": self.scheduler.settings.rate_limit_seconds,
                "valid_algorithms": registry.available(self.import_paths)}

    def cluster_view(self, user: User) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            algorithms = {t: self._algorithm_of(t)[0]
                          for t in self.scheduler.cluster.gpu_types()}
            return views.cluster_view(self.scheduler, user, algorithms,
                                      self.drained.values(), self._lost_nodes(),
                                      self.job_names.name_of)
        return self._read(read)

    # ----- team queues (voda.api.queues) ------------------------------------------------
    def queue_list(self) -> list[dict[str, Any]]:
        """Every declared queue, and `default` (declared or not), with its usage."""
        def read() -> list[dict[str, Any]]:
            usage = self._queue_usage()
            return [queue_view(self.queue_book, name, usage.get(name, {}))
                    for name in self._queue_names()]
        return self._read(read)

    def queue_detail(self, name: str) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            self._known_queue(name)
            return self._queue_view(name)
        return self._read(read)

    def _known_queue(self, name: str) -> None:
        if name not in self._queue_names():
            raise NotFound(f"queue {name!r} not found; queues: "
                           f"{', '.join(self._queue_names())}")

    def _queue_names(self) -> list[str]:
        declared = self.queue_book.declared()
        return declared + ([] if DEFAULT_QUEUE in declared else [DEFAULT_QUEUE])

    def _queue_view(self, name: str) -> dict[str, Any]:
        return queue_view(self.queue_book, name, self._queue_usage().get(name, {}))

    def _queue_usage(self) -> dict[str, dict[str, TypeUsage]]:
        """Each queue's usage now, per GPU type (under the lock)."""
        cluster = self.scheduler.cluster
        jobs = [(r.queue, r.gpu_type, r.current_workers)
                for r in self.scheduler.jobs.values() if not r.status.is_terminal]
        return usage_of(self.queue_book, jobs,
                        {t: cluster.capacity(t) for t in cluster.gpu_types()})

    def cluster_history(self, gpu_type: str, seconds: float, now: float | None = None,
                        points: int = MAX_POINTS) -> list[dict[str, float]]:
        """The samples of `gpu_type` over the last `seconds` (voda.api.history), averaged
        into at most `points` (at most history.MAX_POINTS) points, oldest first."""
        with self._locked():
            self._known_gpu_type(gpu_type)
        return self._history_read(samples_store.samples, seconds, now, points, gpu_type)

    def queue_history(self, name: str, gpu_type: str, seconds: float, now: float | None = None,
                      points: int = MAX_POINTS) -> list[dict[str, float | None]]:
        """The queue's samples of `gpu_type` over the last `seconds`, averaged as
        `cluster_history` averages the cluster's (NotFound: an unknown queue)."""
        with self._locked():
            self._known_queue(name)
            self._known_gpu_type(gpu_type)
        return self._history_read(samples_store.queue_samples, seconds, now, points, name,
                                  gpu_type)

    def _history_read(self, read: Callable[..., list[dict[str, Any]]], seconds: float,
                      now: float | None, points: int, *keys: str) -> list[dict[str, Any]]:
        """`read(session, *keys, start, end, buckets)` over the last `seconds`, in at most
        `points` (at most history.MAX_POINTS) points."""
        end = time.time() if now is None else now
        return self._store_read(lambda s: read(s, *keys, end - seconds, end,
                                               max(1, min(points, MAX_POINTS))))

    def node_events(self, name: str, last: int = NODE_EVENTS_SHOWN) -> list[dict[str, Any]]:
        """The node's last changes (drained, active, removed), oldest first."""
        rows = self._store_read(lambda s: samples_store.node_events(s, name, last))
        return [{"time": r.time, "state": r.state, "message": r.message} for r in rows]

    def refusals(self, user: User) -> dict[str, str]:
        """Refused decisions in force by GPU type (reasons for administrators only)."""
        return self._read(lambda: views.refusals(self.scheduler, user, self.job_names.name_of))

    def _lost_nodes(self) -> list[Node]:
        """Nodes the cluster had and has no more: removed, or lost by the backend."""
        present = self._note_nodes()
        return [n for name, n in self.seen_nodes.items() if name not in present]

    def health(self) -> dict[str, Any]:
        with self.inbox_lock:
            jobs = len(self.names)
        first = (self.first_schedule_at - self.started_at) if self.first_schedule_at else None
        fault = self.writer.health.fault
        return {"status": "ok", "backend": self.settings.backend, "jobs": jobs,
                "started_at": self.started_at, "recovered_jobs": self.recovered_jobs,
                "adopted_running_jobs": self.adopted_running_jobs,
                "first_schedule_seconds": first,
                "store": "ok" if fault is None else str(fault)}

    def readiness(self) -> tuple[bool, list[str]]:
        """Ready: the store takes writes and the scheduler lock is not stuck. Never waits
        for a lock itself."""
        reasons = []
        health = self.writer.health
        if health.fault is not None:
            reasons.append(f"{health.fault}; {self.writer.unwritten} batches of changes "
                           "wait to be written")
        writing = health.writing_since
        if writing is not None and time.monotonic() - writing > WRITE_STALL_SECONDS:
            reasons.append(f"store: a write has taken {time.monotonic() - writing:.1f} s")
        held = self.lock_held_seconds()
        if held > LOCK_STALL_SECONDS:
            reasons.append(f"scheduler: the lock has been held for {held:.1f} s")
        return not reasons, reasons

    def liveness(self) -> tuple[bool, list[str]]:
        """Alive unless the backend says its own loop is wedged (`stalled()`); a restart
        is the cure. Never waits for a lock."""
        stalled = getattr(self.backend, "stalled", None)
        reason = stalled() if callable(stalled) else None
        return reason is None, [reason] if reason else []

    def lock_held_seconds(self) -> float:
        since = self._lock_since
        return 0.0 if since is None else max(0.0, time.monotonic() - since)

    # ----- helpers of the views ------------------------------------------------------
    def _describe(self, record: JobRecord, now: float) -> dict[str, Any]:
        return {**views.describe(record, now, self.scheduler.accounted_until,
                                 self.scheduler.cluster, self.unschedulable.get(record.name),
                                 self._queue_of(record), self.scheduler.time_scale,
                                 self._suspended(record),
                                 self.scheduler.job_reasons.get(record.name)),
                "forecast": self._forecast_of(record)}

    def _forecast_of(self, record: JobRecord) -> dict[str, Any] | None:
        """The job's start and finish as last forecast, assuming no new arrivals."""
        forecaster = getattr(self, "forecaster", None)
        if forecaster is None or record.status.is_terminal:
            return None
        return forecaster.of(record.name)

    def _suspended(self, record: JobRecord) -> str | None:
        """Why something outside Voda (Kueue) holds the job suspended, if it does (as of
        the last scheduling step: api/suspensions.py)."""
        return None if record.status.is_terminal else self.suspended.get(record.name)

    def _summary(self, record: JobRecord) -> dict[str, Any]:
        return {**views.summary(record, self._queue_of(record),
                                reason=self.scheduler.job_reasons.get(record.name)),
                "forecast": self._forecast_of(record)}

    def _queue_of(self, record: JobRecord) -> int | None:
        """The priority queue (0 is the top) of an active job under an algorithm that keeps
        queues (Tiresias); None elsewhere."""
        if record.status.is_terminal:
            return None
        priority_class = getattr(self.scheduler.algorithm_for(record.gpu_type),
                                 "priority_class", None)
        if priority_class is None:
            return None
        value = priority_class(record)
        return value if isinstance(value, int) else None

    def _visible(self, name: str, user: User) -> JobRecord:
        """The job `name` means: the live job of that name, else the job of that uid, else
        the newest finished job of that name (voda.api.job_names); 404 when there is none
        `user` may see."""
        with self.inbox_lock:
            uid = self.job_names.resolve(name, self.scheduler.jobs)
        record = self.scheduler.jobs.get(uid) if uid is not None else None
        if record is None or not views.visible(user, record):
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

    def render_metrics(self) -> bytes:
        """The Prometheus text, gauges refreshed from the scheduler's state now."""
        with self._locked():
            s = self.scheduler
            self.metrics.set_state(s.cluster, list(s.active.values()))
            self.metrics.set_queues(self._queue_usage())
        self.metrics.set_store(self.writer.health, self.writer.unwritten,
                               self.lock_held_seconds())
        return self.metrics.render()

    def _node_view(self, node: Node) -> dict[str, Any]:
        return {"name": node.name, "gpus": node.gpus, "gpu_type": node.gpu_type,
                "leaf": node.leaf_name, "spine": node.spine_name,
                "schedulable": node.name not in self.drained, "removed": False}


def _redacted(message: str | None, hidden: Callable[[str], bool] | None) -> str | None:
    return message if message is None or hidden is None else views.redact_names(message,
                                                                                 hidden)
