"""Queues: what a platform team configures per team (docs/design/013-queues.md).

Every limit is per GPU type. A guarantee missing for a type is 0; a borrowing or
lending limit missing (the whole mapping, or the type in it) is unlimited (None).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

DEFAULT_QUEUE = "default"  # the queue of a job that names none: no guarantee
MAX_QUEUES = 1000  # a bound on what one configuration may declare
MAX_GPUS = 1_000_000  # a bound on any one guarantee or limit
MAX_WEIGHT = 1e6


def _frozen(m: Mapping[str, int] | None) -> Mapping[str, int] | None:
    return None if m is None else MappingProxyType(dict(m))


@dataclass(frozen=True, slots=True)
class Queue:
    name: str
    guarantee: Mapping[str, int] = field(default_factory=dict)
    borrowing_limit: Mapping[str, int] | None = None
    lending_limit: Mapping[str, int] | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "guarantee", _frozen(self.guarantee))
        object.__setattr__(self, "borrowing_limit", _frozen(self.borrowing_limit))
        object.__setattr__(self, "lending_limit", _frozen(self.lending_limit))

    def guaranteed(self, gpu_type: str) -> int:
        return self.guarantee.get(gpu_type, 0)

    def may_borrow(self, gpu_type: str) -> int | None:
        """GPUs it may hold beyond its guarantee (None: unlimited)."""
        limits = self.borrowing_limit
        return None if limits is None else limits.get(gpu_type)

    def may_lend(self, gpu_type: str) -> int | None:
        """GPUs of its idle guarantee others may use (None: all of it)."""
        limits = self.lending_limit
        return None if limits is None else limits.get(gpu_type)

    def ceiling(self, gpu_type: str) -> float:
        """The most it may hold: guarantee plus borrowing limit (inf: unlimited)."""
        limit = self.may_borrow(gpu_type)
        return math.inf if limit is None else self.guaranteed(gpu_type) + limit


def queue_problems(queue: Queue) -> list[str]:
    """What is wrong with one queue, as 'field: reason' strings (empty when valid)."""
    problems = []
    if not queue.name or len(queue.name) > 63:
        problems.append(f"name: must be 1 to 63 characters, got {queue.name!r}")
    if not (isinstance(queue.weight, int | float) and not isinstance(queue.weight, bool)
            and 0 < queue.weight <= MAX_WEIGHT and math.isfinite(queue.weight)):
        problems.append(f"weight: must be a number in (0, {MAX_WEIGHT:g}], got {queue.weight!r}")
    for label, limits in (("guarantee", queue.guarantee),
                          ("borrowing_limit", queue.borrowing_limit),
                          ("lending_limit", queue.lending_limit)):
        for gpu_type, count in (limits or {}).items():
            if not (isinstance(count, int) and not isinstance(count, bool)
                    and 0 <= count <= MAX_GPUS):
                problems.append(f"{label}.{gpu_type}: must be an integer in [0, {MAX_GPUS}], "
                                f"got {count!r}")
    return problems


@dataclass(frozen=True, slots=True)
class QueueSet:
    """The queues in force, by name; a job names one (Job.queue). A job whose queue is not
    declared is in `default`, which has no guarantee unless it is declared too."""

    queues: tuple[Queue, ...] = ()

    def __post_init__(self) -> None:
        if len(self.queues) > MAX_QUEUES:
            raise ValueError(f"queues: at most {MAX_QUEUES}, got {len(self.queues)}")
        seen: set[str] = set()
        for queue in self.queues:
            problems = queue_problems(queue)
            if problems:
                raise ValueError(f"queue {queue.name!r}: " + "; ".join(problems))
            if queue.name in seen:
                raise ValueError(f"queues: {queue.name!r} is declared twice")
            seen.add(queue.name)

    def __bool__(self) -> bool:
        return bool(self.queues)

    def __iter__(self) -> Iterator[Queue]:
        return iter(self.queues)

    def get(self, name: str) -> Queue:
        for queue in self.queues:
            if queue.name == name:
                return queue
        return Queue(name)

    def queue_of(self, name: str) -> str:
        """The queue a job that names `name` runs in: `name` when declared, else default."""
        return name if any(q.name == name for q in self.queues) else DEFAULT_QUEUE
