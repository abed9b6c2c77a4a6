"""What the scheduler did lately, kept in memory for the dashboard's scheduler page.

Recent decisions (when, why, what changed, how long it took), recent errors, and
the durations of the last decisions for a latency histogram. Bounded: old
entries fall off. Thread-safe: the scheduling thread writes, request threads read.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from voda.core.model import Plan

RECENT_DECISIONS = 100
RECENT_ERRORS = 50
RECENT_DURATIONS = 2000
MOVED_KEPT = 20  # the jobs a decision moved kept per decision (its action counts keep all)
# Histogram bucket upper bounds in seconds (the last bucket is open-ended).
LATENCY_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


@dataclass(frozen=True, slots=True)
class Moved:
    """A job a decision moved: its action and its GPUs before and after."""

    job: str
    kind: str
    before: int
    after: int


@dataclass(frozen=True, slots=True)
class Decision:
    time: float
    reasons: tuple[str, ...]
    actions: dict[str, int]  # action kind -> count
    seconds: float
    migrated_workers: int
    moved: tuple[Moved, ...] = ()  # the first MOVED_KEPT of its actions' jobs


@dataclass(frozen=True, slots=True)
class ErrorEntry:
    time: float
    gpu_type: str  # the GPU type whose decision was refused ('*': every type)
    message: str


class Activity:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._decisions: deque[Decision] = deque(maxlen=RECENT_DECISIONS)
        self._errors: deque[ErrorEntry] = deque(maxlen=RECENT_ERRORS)
        self._durations: deque[float] = deque(maxlen=RECENT_DURATIONS)
        self.version = 0  # bumped on every entry: readers can tell something happened

    def decision(self, plan: Plan, now: float, reasons: Iterable[str], seconds: float) -> None:
        entry = Decision(time=now, reasons=tuple(str(r) for r in reasons),
                         actions=dict(Counter(str(a.kind) for a in plan.actions)),
                         seconds=seconds, migrated_workers=plan.migrated_workers,
                         moved=tuple(Moved(a.job, str(a.kind), a.workers_before,
                                           a.workers_after)
                                     for a in plan.actions[:MOVED_KEPT]))
        with self._lock:
            self._decisions.append(entry)
            self._durations.append(seconds)
            self.version += 1

    def error(self, now: float, gpu_type: str, message: str) -> None:
        with self._lock:
            self._errors.append(ErrorEntry(now, gpu_type, message))
            self.version += 1

    def decisions(self, limit: int = RECENT_DECISIONS) -> list[Decision]:
        """Newest first."""
        with self._lock:
            return list(reversed(self._decisions))[:limit]

    def errors(self, limit: int = RECENT_ERRORS) -> list[ErrorEntry]:
        """Newest first."""
        with self._lock:
            return list(reversed(self._errors))[:limit]

    def latency_histogram(self) -> list[tuple[str, int]]:
        """(upper bound in ms, decisions) over the recent decisions."""
        with self._lock:
            durations = list(self._durations)
        return histogram(durations, LATENCY_BOUNDS)


def histogram(values: Sequence[float], bounds: Sequence[float]) -> list[tuple[str, int]]:
    """Counts of values in (previous bound, bound], and one bucket above the last bound."""
    counts = [0] * (len(bounds) + 1)
    for v in values:
        i = 0
        while i < len(bounds) and v > bounds[i]:
            i += 1
        counts[i] += 1
    labels = [f"{b * 1000:g}" for b in bounds] + [f">{bounds[-1] * 1000:g}"]
    return list(zip(labels, counts, strict=True))
