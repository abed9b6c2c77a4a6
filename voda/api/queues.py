"""The service's team queues (docs/design/013-queues.md): which are in force, which queue
a new job joins, and what each has had reclaimed.

The queues in force are the queue file's (`voda serve --queues FILE`) and config.toml's
[[queues]] tables, with the changes administrators made over the API on top (kept in
the store, so they outlive a restart): a queue set over the API replaces the file's of
that name, a deleted one hides it. Every definition goes through the simulator's reader
(voda.sim.queues.parse_queues), so a file, a table and a request body read alike.

A job's queue: the one its spec names (`queue`, or the annotation `voda.io/queue`; an
undeclared one is refused naming the field), else its user's (config.toml
[users.NAME] queue) when declared, else on Kubernetes its namespace's (the first queue
whose `match` has that `namespace`, else the queue named as the namespace), else
`default`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from voda.core.quotas import DEFAULT_QUEUE, QueueSet
from voda.core.quotas.model import MAX_QUEUES
from voda.core.quotas.share import QuotaDecision
from voda.core.quotas.usage import TypeUsage, queue_usage
from voda.sim.queues import (
    QueueFile,
    QueueFileError,
    parse_queues,
    read_queue_document,
)
from voda.spec.errors import fail

log = logging.getLogger(__name__)

QUEUE_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUEUE_NAME_MAX = 63
_BODY_KEYS = ("guarantee", "borrowing_limit", "lending_limit", "weight", "match")


def base_entries(queue_file: str, config_entries: Iterable[Mapping[str, Any]]
                 ) -> list[dict[str, Any]]:
    """The queue file's entries and config.toml's, checked together (QueueFileError)."""
    entries: list[dict[str, Any]] = []
    if queue_file:
        document = read_queue_document(queue_file)
        parse_queues(document, queue_file)
        entries += [dict(e) for e in document["queues"]]
    entries += [dict(e) for e in config_entries]
    parse_queues({"queues": entries}, "queues (--queues file and config.toml [[queues]])")
    return entries


def check_name(name: str) -> None:
    if len(name) > QUEUE_NAME_MAX or not QUEUE_NAME_RE.match(name):
        raise fail("name", f"a queue's name is 1 to {QUEUE_NAME_MAX} lowercase letters, "
                   f"digits and '-', starting and ending with a letter or digit; got "
                   f"{name[:80]!r}")


def check_entry(name: str, body: Any) -> dict[str, Any]:
    """A PUT body as a queue entry named `name`; SpecError naming the field."""
    check_name(name)
    if not isinstance(body, Mapping):
        raise fail("body", "expected a mapping of guarantee, borrowing_limit, lending_limit, "
                           "weight and match")
    given = body.get("name")
    if given is not None and given != name:
        raise fail("name", f"the body names {str(given)[:80]!r}, the path {name!r}")
    entry = {"name": name, **{k: v for k, v in body.items() if k != "name"}}
    try:
        parse_queues({"queues": [entry]}, "body")
    except QueueFileError as exc:
        raise fail(exc.field or "body", exc.reason) from None
    return entry


class QueueBook:
    """The queues in force and the GPUs reclaimed from each (see the module docstring).
    `observe` is the scheduler's queue observer: it runs under the scheduler's lock."""

    def __init__(self, base: list[dict[str, Any]],
                 stored: Iterable[tuple[str, Mapping[str, Any] | None]] = (),
                 on_reclaim: Callable[[str, str, int, int], None] | None = None) -> None:
        self.base = base
        self.on_reclaim = on_reclaim  # (queue, GPU type, by shrinking, by preemption)
        self.overrides: dict[str, dict[str, Any] | None] = {}
        for name, entry in stored:
            try:
                self._with(name, None if entry is None else dict(entry))
            except QueueFileError as exc:
                log.warning("the stored queue %r is refused (%s); ignored", name, exc)
                continue
            self.overrides[name] = None if entry is None else dict(entry)
        self.current: QueueFile = self._with(None, None)
        self.reclaimed: dict[tuple[str, str], list[int]] = {}  # [shrinking, preemption]
        self._lock = threading.Lock()

    # ----- what is in force -------------------------------------------------------
    def _entries(self, overrides: Mapping[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
        entries = [overrides.get(e["name"], e) for e in self.base]
        named = {e["name"] for e in self.base}
        entries += [e for n, e in overrides.items() if n not in named]
        return [e for e in entries if e is not None]

    def _with(self, name: str | None, entry: dict[str, Any] | None) -> QueueFile:
        overrides = dict(self.overrides)
        if name is not None:
            overrides[name] = entry
        return parse_queues({"queues": self._entries(overrides)}, "queues")

    @property
    def queues(self) -> QueueSet | None:
        """What the scheduler runs under; None: no queues (every result is today's)."""
        return self.current.queues or None

    def declared(self) -> list[str]:
        return [q.name for q in self.current.queues]

    def source_of(self, name: str) -> str:
        """'api' when an administrator set it, 'config' when the file or config.toml did."""
        return "api" if self.overrides.get(name) is not None else "config"

    # ----- changes (the service stores them first, then applies) ---------------------
    def planned_put(self, name: str, entry: dict[str, Any]) -> QueueFile:
        """What would be in force with `entry` set; SpecError when it cannot be."""
        if name not in self.declared() and len(self.declared()) >= MAX_QUEUES:
            raise fail("name", f"at most {MAX_QUEUES} queues; delete one first")
        try:
            return self._with(name, entry)
        except QueueFileError as exc:
            raise fail(exc.field or "body", exc.reason) from None

    def apply(self, name: str, entry: dict[str, Any] | None) -> None:
        self.current = self._with(name, entry)
        self.overrides[name] = entry

    # ----- a new job's queue ------------------------------------------------------
    def queue_for(self, named: str | None, field: str, user_queue: str,
                  namespace: str | None) -> str:
        declared = set(self.declared()) | {DEFAULT_QUEUE}
        if named is not None:
            if named not in declared:
                raise fail(field, f"unknown queue {named[:80]!r}; queues: "
                           f"{', '.join(sorted(declared))}")
            return named
        if user_queue and user_queue in declared:
            return user_queue
        if namespace:
            matched = self.current.queue_of({"namespace": namespace})
            if matched != DEFAULT_QUEUE:
                return matched
            if namespace in declared:
                return namespace
        return DEFAULT_QUEUE

    # ----- reclaims, told by the scheduler ---------------------------------------------
    def observe(self, gpu_type: str, decision: QuotaDecision) -> None:
        with self._lock:
            for name, outcome in decision.queues.items():
                if outcome.reclaimed:
                    counts = self.reclaimed.setdefault((name, gpu_type), [0, 0])
                    counts[0] += outcome.reclaimed_by_shrinking
                    counts[1] += outcome.reclaimed_by_preemption
                    if self.on_reclaim is not None:
                        self.on_reclaim(name, gpu_type, outcome.reclaimed_by_shrinking,
                                        outcome.reclaimed_by_preemption)

    # It reads only what was reclaimed, so the decision may leave each queue's
    # `within_guarantee` at its bound and skip the runs that make it exact.
    observe.reads_within_guarantee = False  # type: ignore[attr-defined]

    def reclaimed_of(self, name: str, gpu_type: str) -> tuple[int, int]:
        with self._lock:
            shrinking, preemption = self.reclaimed.get((name, gpu_type), (0, 0))
        return shrinking, preemption


# ----- views -------------------------------------------------------------------------
def usage_of(book: QueueBook, jobs: Iterable[tuple[str, str, int]],
             capacity: Mapping[str, int]) -> dict[str, dict[str, TypeUsage]]:
    """Each queue's usage from the active jobs' (queue, GPU type, GPUs held)."""
    queues = book.current.queues
    held: dict[tuple[str, str], int] = {}
    waiting: dict[tuple[str, str], int] = {}
    for queue, gpu_type, gpus in jobs:
        key = (queues.queue_of(queue), gpu_type)
        held[key] = held.get(key, 0) + gpus
        if gpus == 0:
            waiting[key] = waiting.get(key, 0) + 1
    return queue_usage(queues, held, waiting, capacity)


def queue_view(book: QueueBook, name: str, usage: Mapping[str, TypeUsage]) -> dict[str, Any]:
    """One queue as GET /v1/queues/{name} shows it."""
    declared = name in book.declared()
    entry = book.current.entry(name) if declared else {
        "name": name, "guarantee": {}, "borrowing_limit": None, "lending_limit": None,
        "weight": 1.0, "match": {}}
    types = []
    for gpu_type, u in usage.items():
        shrinking, preemption = book.reclaimed_of(name, gpu_type)
        types.append({"gpu_type": gpu_type, "used": u.used, "guarantee": u.guarantee,
                      "borrowed": u.borrowed, "lent": u.lent, "waiting_jobs": u.waiting,
                      "borrowing_limit": u.borrowing_limit, "lending_limit": u.lending_limit,
                      "reclaimed_by_shrinking": shrinking,
                      "reclaimed_by_preemption": preemption})
    return {**entry, "declared": declared,
            "source": book.source_of(name) if declared else "implicit",
            "usage": types}
