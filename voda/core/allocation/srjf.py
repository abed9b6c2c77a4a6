"""SRJF and ElasticSRJF: the job with the shortest estimated remaining time goes first.

The same filling rules as FIFO and ElasticFIFO (voda.core.allocation.fifo), with
the queue ordered by the remaining time estimated by voda.core.estimate at the
size the job would start with (preferred for SRJF, min for ElasticSRJF), as
voda.core.estimate.remaining_time computes it; ties by submit time, then name.
See docs/design/001-allocation.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from voda.core.allocation.fifo import fill_in_order, grow_in_order
from voda.core.estimate import epoch_time_at
from voda.core.model import Job


def shortest_first(jobs: Sequence[Job], size_of: Callable[[Job], int]) -> list[Job]:
    """Jobs by estimated remaining time at `size_of(job)` workers, ties by sort_key."""
    keyed = [
        (job.remaining_epochs * epoch_time_at(job, size_of(job)) if job.remaining_epochs > 0
         else 0.0, job.sort_key, job)
        for job in jobs
    ]
    keyed.sort(key=lambda t: (t[0], t[1]))
    return [job for _, _, job in keyed]


@dataclass(frozen=True)
class SRJF:
    """Shortest remaining first, each job at its preferred size if it fits, else 0."""

    name: str = "SRJF"

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        ordered = shortest_first(jobs, lambda j: j.preferred)
        return fill_in_order(ordered, capacity, lambda j: j.preferred)


@dataclass(frozen=True)
class ElasticSRJF:
    """Shortest remaining first at min, then the GPUs left over in that order up to max."""

    name: str = "ElasticSRJF"

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        ordered = shortest_first(jobs, lambda j: j.min_workers)
        allocation = fill_in_order(ordered, capacity, lambda j: j.min_workers)
        grow_in_order(ordered, allocation, capacity)
        return allocation
