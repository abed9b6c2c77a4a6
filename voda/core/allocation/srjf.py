"""SRJF and ElasticSRJF: the job with the shortest estimated remaining time goes first.

The same filling rules as FIFO and ElasticFIFO (voda.core.allocation.fifo), with
the queue ordered by an estimate of the time left (voda.core.estimate); ties by
submit time, then name. Two estimates (the `order` knob):

- "gpu_time" (default): remaining epochs x epoch time on one GPU, about the GPU
  service a job still needs, whatever its size: the Go Voda's order;
- "wall_time": remaining epochs x epoch time at the size the job starts with
  (preferred for SRJF, min for ElasticSRJF), so a wide job looks short.

See docs/design/001-allocation.md for the measurement behind the default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Literal

import numpy as np

from voda.core.allocation.afs_states import rounded_as_python
from voda.core.allocation.base import (
    allocate_by_priority,
    allocate_many_by_priority,
    by_submit,
    most_at_rigid_size,
    rigid_size,
)
from voda.core.allocation.fifo import (
    Growth,
    check_growth,
    elastic_fifo_terms,
    elastic_in_order,
    fill_at_rigid_size,
)
from voda.core.allocation.reasons import (
    Reason,
    Terms,
    by_priority,
    explain_in_order,
    priority_rule,
    seconds,
)
from voda.core.estimate import epoch_time_at, epoch_time_runs
from voda.core.model import Job

_EPOCHS, _COMPLETED = attrgetter("epochs"), attrgetter("completed_epochs")
_MIN_WORKERS = attrgetter("min_workers")

Order = Literal["gpu_time", "wall_time"]
ORDERS: tuple[str, ...] = ("gpu_time", "wall_time")
DEFAULT_ORDER: Order = "gpu_time"


def shortest_first(jobs: Sequence[Job], size_of: Callable[[Job], int]) -> list[Job]:
    """Jobs by estimated remaining time at `size_of(job)` workers, ties by sort_key.

    In sort_key order first (`by_submit`), then one stable sort by the estimate alone:
    the same order as sorting by (estimate, sort_key), one float key each. The epoch
    times come in one batch (`epoch_time_runs`, bit for bit `epoch_time_at`) and are
    rounded to microseconds for all jobs at once (`rounded_as_python`, as `round`)."""
    return shortest_first_many([(jobs, size_of)])[0]


def shortest_first_many(groups: Sequence[tuple[Sequence[Job], Callable[[Job], int]]]
                        ) -> list[list[Job]]:
    """`shortest_first(jobs, size_of)` of each group, the estimates of all in one batch:
    a job's key is the same operations on the same operands in any batch."""
    ordered = [by_submit(jobs) for jobs, _ in groups]
    every = list(chain.from_iterable(ordered))
    n = len(every)
    if not n:
        return ordered
    sizes = np.fromiter(chain.from_iterable(map(size_of, members) for members, (_, size_of)
                                            in zip(ordered, groups, strict=True)),
                        dtype=np.int64, count=n)
    left = (np.fromiter(map(_EPOCHS, every), dtype=float, count=n)
            - np.fromiter(map(_COMPLETED, every), dtype=float, count=n))
    remaining = np.where(left > 0.0, left, 0.0)  # Job.remaining_epochs
    with np.errstate(invalid="ignore", over="ignore"):
        estimate = remaining * epoch_time_runs(every, sizes, np.ones(n, dtype=np.int64))
    keys = np.where(remaining > 0.0, rounded_as_python(estimate, 6), 0.0).tolist()
    out = []
    at = 0
    for members in ordered:
        mine = keys[at:at + len(members)]
        at += len(members)
        out.append([members[i] for i in sorted(range(len(members)), key=mine.__getitem__)])
    return out


def _check_order(order: str) -> None:
    if order not in ORDERS:
        raise ValueError(f"order: must be one of {list(ORDERS)}, got {order!r}")


def _one(_job: Job) -> int:
    return 1


@dataclass(frozen=True)
class SRJF:
    """Shortest remaining first, each job at its size (`rigid_size`) if it fits, else 0."""

    name: str = "SRJF"
    order: Order = DEFAULT_ORDER

    def __post_init__(self) -> None:
        _check_order(self.order)

    def most_gpus(self, jobs: Sequence[Job]) -> int:
        return most_at_rigid_size(jobs)

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return allocate_by_priority(jobs, capacity, self._allocate_class)

    def allocate_many(self, problems: Sequence[tuple[Sequence[Job], int]]) -> list[dict[str, int]]:
        """`self(jobs, capacity)` of each problem, the estimates of all jobs in one batch
        (the quota layer runs one problem per queue, docs/design/013-queues.md)."""
        return allocate_many_by_priority(problems, self._allocate_classes)

    def _size(self, capacity: int) -> Callable[[Job], int]:
        return _one if self.order == "gpu_time" else (lambda j: rigid_size(j, capacity))

    def _allocate_class(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return fill_at_rigid_size(shortest_first(jobs, self._size(capacity)), capacity)

    def _allocate_classes(self, problems: Sequence[tuple[Sequence[Job], int]]
                          ) -> list[dict[str, int]]:
        orders = shortest_first_many([(jobs, self._size(capacity)) for jobs, capacity
                                      in problems])
        return [fill_at_rigid_size(ordered, capacity)
                for ordered, (_, capacity) in zip(orders, problems, strict=True)]

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> dict[str, Reason]:
        size = _one if self.order == "gpu_time" else (lambda j: j.preferred)
        terms = Terms(self.name, _order_words(self.order), shortest_rule(self.name, size),
                      preferred_sized=True)
        return explain_in_order(jobs, capacity, allocation, terms,
                                lambda: by_priority(shortest_first(jobs, size)))


@dataclass(frozen=True)
class ElasticSRJF:
    """Shortest remaining first at min, then the GPUs left round-robin in that order
    (`growth="in_order"`: the shortest to max first)."""

    name: str = "ElasticSRJF"
    order: Order = DEFAULT_ORDER
    growth: Growth = "round_robin"

    def __post_init__(self) -> None:
        _check_order(self.order)
        check_growth(self.growth)

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return allocate_by_priority(jobs, capacity, self._allocate_class)

    def allocate_many(self, problems: Sequence[tuple[Sequence[Job], int]]) -> list[dict[str, int]]:
        """`self(jobs, capacity)` of each problem, the estimates of all jobs in one batch."""
        return allocate_many_by_priority(problems, self._allocate_classes)

    def _size(self) -> Callable[[Job], int]:
        return _one if self.order == "gpu_time" else _MIN_WORKERS

    def _allocate_class(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return elastic_in_order(shortest_first(jobs, self._size()), capacity, self.growth)

    def _allocate_classes(self, problems: Sequence[tuple[Sequence[Job], int]]
                          ) -> list[dict[str, int]]:
        orders = shortest_first_many([(jobs, self._size()) for jobs, _ in problems])
        return [elastic_in_order(ordered, capacity, self.growth)
                for ordered, (_, capacity) in zip(orders, problems, strict=True)]

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> dict[str, Reason]:
        size = _one if self.order == "gpu_time" else (lambda j: j.min_workers)
        order = _order_words(self.order)
        terms = elastic_fifo_terms(self.name, self.growth, order)
        terms = Terms(self.name, order, shortest_rule(self.name, size), share=terms.share)
        return explain_in_order(jobs, capacity, allocation, terms,
                                lambda: by_priority(shortest_first(jobs, size)))


def _order_words(order: str) -> str:
    return ("order of estimated remaining GPU time" if order == "gpu_time"
            else "order of estimated remaining time")


def _remaining(job: Job, size: Callable[[Job], int]) -> float:
    return job.remaining_epochs * epoch_time_at(job, size(job)) if job.remaining_epochs > 0 \
        else 0.0


def shortest_rule(name: str, size: Callable[[Job], int]) -> Callable[[Job, Job], str]:
    def rule(loser: Job, taker: Job) -> str:
        said = priority_rule(loser, taker, name)
        if said:
            return said
        theirs, mine = _remaining(taker, size), _remaining(loser, size)
        if theirs == mine:
            return (f"{name}: {taker.name}'s estimated remaining time {seconds(theirs)} ties "
                    f"with {loser.name}'s, and {taker.name} was submitted first")
        return (f"{name}: {taker.name}'s estimated remaining time {seconds(theirs)} is "
                f"shorter than {loser.name}'s {seconds(mine)}")
    return rule
