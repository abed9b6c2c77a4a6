"""Writing the service's changes to the store: ordered group commit that loses nothing.

Every change to the scheduler leaves pending writes; they are frozen into a `Batch`,
given the next sequence number and queued in the order the changes were made.
Whoever needs a sequence number durable (a request before it answers, the loop
before its next step) writes every queued batch in one transaction.

When the store fails:
- transiently (unreachable, locked, full, read-only): the batches stay queued and are
  retried with exponential backoff; submissions in the failed group are refused (their
  names are kept as `doubtful` and their rows deleted at the next successful write, in
  case the commit reached the database after all), and the store is unhealthy until a
  write succeeds. The service changes nothing while it is (see Service._require_store).
- permanently (the database refuses a value): the batches are written one by one, and
  a failing one row by row; a row the store refuses alone is logged, counted and set
  aside, so one bad row never blocks the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from voda.core.model import JobStatus
from voda.engine.scheduler import HistoryKey, JobRecord
from voda.store import history
from voda.store import jobs as store
from voda.store.faults import StoreFault, classify
from voda.store.models import LIVE_NAME_INDEX

log = logging.getLogger(__name__)

MIN_BACKOFF_SECONDS = 0.1
MAX_BACKOFF_SECONDS = 5.0


class StoreUnavailable(Exception):
    """The store cannot take writes now: 503 with the reason and Retry-After."""

    def __init__(self, fault: StoreFault, retry_after: float, detail: str = "") -> None:
        self.fault = fault
        self.retry_after = retry_after
        super().__init__(f"{fault}{'; ' + detail if detail else ''}")


class StoreRefused(ValueError):
    """The store refused a submission's values for good (422)."""


class NameTaken(StoreRefused):
    """The store refused a submission because a live job has its name (409: the unique
    index on live jobs' names, voda.store.models.LIVE_NAME_INDEX)."""


def _name_taken(reason: str) -> bool:
    """Whether the store refused a row for the name of a live job: PostgreSQL names the
    index, SQLite the column."""
    return LIVE_NAME_INDEX in reason or "jobs.given_name" in reason


@dataclass
class Pending:
    inserts: list[dict[str, Any]] = field(default_factory=list)
    states: dict[str, JobRecord] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    category: dict[tuple[HistoryKey, int], float] = field(default_factory=dict)
    layouts: dict[tuple[HistoryKey, tuple[int, int]], float] = field(default_factory=dict)
    backend_state: dict[str, Any] | None = None
    queued: set[str] = field(default_factory=set)  # Submitted -> Waiting, nothing else
    nodes: list[dict[str, Any]] = field(default_factory=list)
    # Goodput models as stored JSON: by job (its own), by (category, GPU type) (the best).
    goodput: dict[str, dict[str, Any]] = field(default_factory=dict)
    category_goodput: dict[HistoryKey, dict[str, Any]] = field(default_factory=dict)
    node_events: list[dict[str, Any]] = field(default_factory=list)
    # The cluster's samples (voda.api.history), and the time before which the store
    # forgets samples and node changes; None: no sample was taken. The queues' samples
    # are taken with them (while queues are configured).
    samples: list[dict[str, Any]] = field(default_factory=list)
    queue_samples: list[dict[str, Any]] = field(default_factory=list)
    keep_after: float | None = None
    # Jobs that finished: their names are free once this is queued (not written itself).
    ended: list[str] = field(default_factory=list)


Unit = Callable[[Session], None]


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
    backend_name: str = "backend"
    nodes: list[dict[str, Any]] = field(default_factory=list)
    # A submission: its insert and history are one unit, refused or written whole.
    submission: bool = False
    goodput: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    category_goodput: list[tuple[HistoryKey, dict[str, Any]]] = field(default_factory=list)
    node_events: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    queue_samples: list[dict[str, Any]] = field(default_factory=list)
    keep_after: float | None = None

    @property
    def empty(self) -> bool:
        return not (self.inserts or self.states or self.history or self.category
                    or self.layouts or self.queued or self.nodes or self.goodput
                    or self.category_goodput or self.backend_state is not None
                    or self.node_events or self.keep_after is not None)

    def write(self, session: Session) -> None:
        store.insert_jobs(session, self.inserts)
        store.save_states(session, self.states)
        store.mark_status(session, self.queued, str(JobStatus.WAITING))
        store.add_history(session, self.history)
        for category, workers, seconds in self.category:
            store.save_category_speed(session, category, workers, seconds, self.now)
        for category, layout, rate in self.layouts:
            store.save_category_layout(session, category, layout, rate, self.now)
        for node in self.nodes:
            store.save_node(session, node)
        history.add_node_events(session, self.node_events)
        self._write_samples(session)
        self._write_goodput(session)
        if self.backend_state is not None:
            store.save_backend_state(session, self.backend_name, self.backend_state, self.now)

    def _write_samples(self, session: Session) -> None:
        if self.keep_after is not None:
            history.add_samples(session, self.samples, self.keep_after, self.queue_samples)

    def _write_goodput(self, session: Session) -> None:
        """Jobs' goodput models and their categories' together: one unit, so a report is
        never stored half."""
        for name, model in self.goodput:
            store.save_job_goodput(session, name, model)
        for key, model in self.category_goodput:
            store.save_category_goodput(session, key, model, self.now)

    def units(self) -> list[tuple[str, Unit]]:
        """The batch as separately writable pieces, each named for the log."""
        if self.submission:
            return [(f"job {self.inserts[0]['name']}" if self.inserts else "submission",
                     self.write)]
        now = self.now
        out: list[tuple[str, Unit]] = []
        out += [(f"state of {s['name']}", _bind(store.save_states, [s])) for s in self.states]
        out += [(f"status of {n}", _bind(store.mark_status, [n], str(JobStatus.WAITING)))
                for n in self.queued]
        out += [(f"history of {h['job']}", _bind(store.add_history, [h])) for h in self.history]
        out += [(f"speed of {c}", _bind(store.save_category_speed, c, w, s, now))
                for c, w, s in self.category]
        out += [(f"layout of {c}", _bind(store.save_category_layout, c, lay, r, now))
                for c, lay, r in self.layouts]
        out += [(f"node {n['name']}", _bind(store.save_node, n)) for n in self.nodes]
        out += [(f"change of node {e['node']}", _bind(history.add_node_events, [e]))
                for e in self.node_events]
        if self.keep_after is not None:
            out.append(("cluster samples", self._write_samples))
        if self.goodput or self.category_goodput:
            out.append(("goodput reports of " + ", ".join(n for n, _ in self.goodput),
                        self._write_goodput))
        if self.backend_state is not None:
            out.append(("backend state", _bind(store.save_backend_state, self.backend_name,
                                               self.backend_state, now)))
        return out


def _bind(function: Callable[..., None], *args: Any) -> Unit:
    return lambda session: function(session, *args)


@dataclass
class Ticket:
    batch: Batch
    seq: int
    done: bool = False
    error: Exception | None = None


class StoreHealth:
    """Whether the last write succeeded, why not, and when to try again."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.fault: StoreFault | None = None
        self.failures = 0  # in a row
        self.failures_total = 0
        self.rejected_rows = 0
        self.next_try = 0.0
        self.writing_since: float | None = None

    @property
    def ok(self) -> bool:
        return self.fault is None

    def backoff(self) -> float:
        return min(MAX_BACKOFF_SECONDS, MIN_BACKOFF_SECONDS * 2 ** max(0, self.failures - 1))

    def retry_after(self) -> float:
        return max(1.0, self.next_try - self.clock())

    def may_try(self) -> bool:
        return self.ok or self.clock() >= self.next_try

    def failed(self, fault: StoreFault) -> None:
        if self.fault is None:
            log.error("the store failed (%s): changes are kept and retried", fault.reason)
        self.fault = fault
        self.failures += 1
        self.failures_total += 1
        self.next_try = self.clock() + self.backoff()

    def recovered(self) -> None:
        if self.fault is not None:
            log.warning("the store is back after %d failed writes", self.failures)
        self.fault = None
        self.failures = 0

    def unavailable(self, detail: str = "") -> StoreUnavailable:
        fault = self.fault or StoreFault(True, "unavailable")
        return StoreUnavailable(fault, self.retry_after(), detail)


class StoreWriter:
    def __init__(self, sessions: sessionmaker[Session],
                 on_cleanup: Callable[[list[str]], None] | None = None,
                 on_written: Callable[[float], None] | None = None) -> None:
        """`on_cleanup`: names of refused submissions whose rows are gone; `on_written`:
        the seconds a group of batches took to be written."""
        self.sessions = sessions
        self.health = StoreHealth()
        self.write_lock = threading.Lock()
        self.queue_lock = threading.Lock()
        self._queue: list[Ticket] = []
        self._seq = 0
        self.durable = 0  # every ticket up to this sequence number is written
        self.doubtful: set[str] = set()  # refused submissions that may have been committed
        self._on_cleanup = on_cleanup
        self._on_written = on_written

    @property
    def seq(self) -> int:
        return self._seq

    @property
    def unwritten(self) -> int:
        with self.queue_lock:
            return len(self._queue)

    def enqueue(self, batch: Batch) -> Ticket:
        with self.queue_lock:
            self._seq += 1
            ticket = Ticket(batch, self._seq)
            self._queue.append(ticket)
            return ticket

    def write_through(self, seq: int, detail: str = "") -> None:
        """Return once every batch up to `seq` is written; StoreUnavailable if it cannot be."""
        if self.durable >= seq:
            return
        with self.write_lock:
            if self.durable >= seq:
                return
            if not self.health.may_try():
                raise self.health.unavailable(detail)
            with self.queue_lock:
                tickets = list(self._queue)
            if not tickets:
                return
            started = self.health.writing_since = time.monotonic()
            try:
                self._write(tickets)
            except _Transient as exc:
                self.health.failed(exc.fault)
                self._refuse_submissions(tickets, exc.fault)
                with self.queue_lock:  # written alone before the fault: not again
                    self._queue = [t for t in self._queue if not t.done]
                raise self.health.unavailable(detail) from None
            finally:
                self.health.writing_since = None
            self.health.recovered()
            if self._on_written is not None:
                self._on_written(time.monotonic() - started)
            with self.queue_lock:
                written = {id(t) for t in tickets}
                self._queue = [t for t in self._queue if id(t) not in written]
            for t in tickets:
                t.done = True
            self.durable = max(self.durable, tickets[-1].seq)

    def flush(self) -> bool:
        """Try to write what is queued (respecting the backoff); True when nothing is left
        and the store takes writes again."""
        try:
            self.write_through(self._seq)
            if not self.health.ok:
                self._probe()
        except StoreUnavailable:
            return False
        return self.unwritten == 0 and self.health.ok

    def _probe(self) -> None:
        """A small write when nothing is queued but the last write failed."""
        with self.write_lock:
            if self.health.ok or not self.health.may_try():
                return
            try:
                self._run(lambda s: store.touch(s, "probe", "ok", time.time()))
            except (_Transient, _Refused) as exc:
                self.health.failed(exc.fault)
                raise self.health.unavailable() from None
            self.health.recovered()

    # ----- internals -----------------------------------------------------------------------
    def _write(self, tickets: Sequence[Ticket]) -> None:
        batches = [t.batch for t in tickets if not t.batch.empty]
        doubtful = sorted(self.doubtful)
        try:
            with self.sessions.begin() as session:
                if doubtful:
                    store.delete_jobs(session, doubtful)
                for batch in batches:
                    batch.write(session)
        except Exception as error:
            fault = classify(error)
            if fault.transient:
                raise _Transient(fault) from error
            log.warning("the store refused a group of writes (%s); writing them one by one",
                        fault.reason)
            self._write_isolated(tickets, doubtful)
            return
        self._cleaned(doubtful)

    def _write_isolated(self, tickets: Sequence[Ticket], doubtful: list[str]) -> None:
        if doubtful:
            self._run(lambda s: store.delete_jobs(s, doubtful))
            self._cleaned(doubtful)
        for ticket in tickets:
            batch = ticket.batch
            if batch.empty:
                continue
            try:
                self._run(batch.write)
                ticket.done = True
                continue
            except _Refused as refused:
                if batch.submission:
                    refusal = NameTaken if _name_taken(refused.fault.reason) else StoreRefused
                    ticket.error = refusal(f"body: the store refused the job "
                                           f"({refused.fault.reason})")
                    ticket.done = True
                    self.health.rejected_rows += 1
                    continue
            for what, unit in batch.units():
                try:
                    self._run(unit)
                except _Refused as refused:
                    self.health.rejected_rows += 1
                    log.error("the store refused %s for good (%s); it is left out", what,
                              refused.fault.reason)
            ticket.done = True

    def _run(self, unit: Unit) -> None:
        try:
            with self.sessions.begin() as session:
                unit(session)
        except Exception as error:
            fault = classify(error)
            if fault.transient:
                raise _Transient(fault) from error
            raise _Refused(fault) from error

    def _refuse_submissions(self, tickets: Sequence[Ticket], fault: StoreFault) -> None:
        """Submissions in a failed write are answered 503 and never retried."""
        refused = [t for t in tickets if t.batch.submission and not t.done]
        if not refused:
            return
        with self.queue_lock:
            gone = {id(t) for t in refused}
            self._queue = [t for t in self._queue if id(t) not in gone]
        for t in refused:
            t.done = True
            t.error = StoreUnavailable(fault, self.health.retry_after())
            self.doubtful.update(row["name"] for row in t.batch.inserts)

    def _cleaned(self, names: list[str]) -> None:
        if not names:
            return
        self.doubtful.difference_update(names)
        if self._on_cleanup is not None:
            self._on_cleanup(names)


class _Transient(Exception):
    def __init__(self, fault: StoreFault) -> None:
        self.fault = fault


class _Refused(Exception):
    def __init__(self, fault: StoreFault) -> None:
        self.fault = fault
