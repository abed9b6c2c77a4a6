"""FIFO and ElasticFIFO: submit order decides."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from voda.core.allocation.base import by_submit
from voda.core.model import Job


def fill_in_order(ordered: Sequence[Job], capacity: int, size_of) -> dict[str, int]:
    """Give each job `size_of(job)` GPUs in order if they fit, else 0 (later jobs fill gaps)."""
    allocation: dict[str, int] = {}
    free = capacity
    for job in ordered:
        want = size_of(job)
        if want <= free:
            allocation[job.name] = want
            free -= want
        else:
            allocation[job.name] = 0
    return allocation


def grow_in_order(ordered: Sequence[Job], allocation: dict[str, int], capacity: int) -> None:
    """Hand the GPUs left over to running jobs below max, in order, up to max each.

    Equivalent to handing them out one at a time round-robin-free in order:
    each job in turn takes as many as it can before the next gets any.
    """
    free = capacity - sum(allocation.values())
    for job in ordered:
        if free <= 0:
            return
        have = allocation.get(job.name, 0)
        if have == 0:
            continue
        extra = min(job.max_workers - have, free)
        if extra > 0:
            allocation[job.name] = have + extra
            free -= extra


@dataclass(frozen=True)
class FIFO:
    """In submit order each job gets its preferred size if it fits, else 0."""

    name: str = "FIFO"

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return fill_in_order(by_submit(jobs), capacity, lambda j: j.preferred)


@dataclass(frozen=True)
class ElasticFIFO:
    """FIFO at min, then the remaining GPUs in submit order to jobs below max."""

    name: str = "ElasticFIFO"

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        ordered = by_submit(jobs)
        allocation = fill_in_order(ordered, capacity, lambda j: j.min_workers)
        grow_in_order(ordered, allocation, capacity)
        return allocation
