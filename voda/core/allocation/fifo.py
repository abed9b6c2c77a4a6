"""FIFO and ElasticFIFO: submit order decides.

The elastic variants (ElasticFIFO here, ElasticSRJF in srjf.py) start jobs at min
in their order, then hand the GPUs left to the running jobs below max: by default
round-robin, one per job per pass, as the Go Voda does (`growth="round_robin"`);
`growth="in_order"` gives each job in turn all it can take up to max before the next
gets any. See docs/design/001-allocation.md for what each costs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from voda.core.allocation.base import (
    allocate_by_priority,
    by_submit,
    rigid_size,
    water_level,
    without_slowdown,
)
from voda.core.allocation.reasons import Reason, Terms, explain_in_order, submit_rule
from voda.core.model import Job

Growth = Literal["round_robin", "in_order"]
GROWTHS: tuple[str, ...] = ("round_robin", "in_order")


def fill_in_order(
    ordered: Sequence[Job], capacity: int, size_of: Callable[[Job], int]
) -> dict[str, int]:
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


def grow_round_robin(ordered: Sequence[Job], allocation: dict[str, int], capacity: int) -> None:
    """Hand the GPUs left over to running jobs below max, one per job per pass, in order.

    The Go Voda's ElasticFIFO loop, computed in one step: every job first gets the
    number of GPUs that all jobs still below max get in full passes (water-filling:
    the largest level L with sum(min(headroom, L)) <= free), and the GPUs then left go
    one each to the first jobs in order that can still take one.
    """
    free = capacity - sum(allocation.values())
    growing = [j for j in ordered if 0 < allocation.get(j.name, 0) < j.max_workers]
    if free <= 0 or not growing:
        return
    headroom = [j.max_workers - allocation[j.name] for j in growing]
    if sum(headroom) <= free:
        for job in growing:
            allocation[job.name] = job.max_workers
        return
    level = water_level(sorted(headroom), free)
    for job, room in zip(growing, headroom, strict=True):
        extra = min(room, level)
        allocation[job.name] += extra
        free -= extra
    for job, room in zip(growing, headroom, strict=True):
        if free == 0:
            break
        if room > level:
            allocation[job.name] += 1
            free -= 1


def grow_in_order(ordered: Sequence[Job], allocation: dict[str, int], capacity: int) -> None:
    """Hand the GPUs left over to running jobs below max, in order, each up to max."""
    free = capacity - sum(allocation.values())
    for job in ordered:
        if free <= 0:
            return
        have = allocation.get(job.name, 0)
        if have == 0:
            continue
        extra = min(job.max_workers - have, free)
        allocation[job.name] = have + extra
        free -= extra


GROWERS: dict[str, Callable[[Sequence[Job], dict[str, int], int], None]] = {
    "round_robin": grow_round_robin,
    "in_order": grow_in_order,
}


def check_growth(growth: str) -> None:
    if growth not in GROWTHS:
        raise ValueError(f"growth: must be one of {list(GROWTHS)}, got {growth!r}")


@dataclass(frozen=True)
class FIFO:
    """In submit order each job gets its size (`rigid_size`: preferred, at most what its
    class has, never a count slower than a smaller one) if it fits, else 0."""

    name: str = "FIFO"

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return allocate_by_priority(jobs, capacity, fill_at_rigid_size)

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> dict[str, Reason]:
        return explain_in_order(jobs, capacity, allocation, fifo_terms(self.name),
                                lambda: by_submit(jobs))


def fill_at_rigid_size(ordered: Sequence[Job], capacity: int) -> dict[str, int]:
    """`fill_in_order` at each job's `rigid_size` out of `capacity`."""
    return fill_in_order(ordered, capacity, lambda job: rigid_size(job, capacity))


@dataclass(frozen=True)
class ElasticFIFO:
    """FIFO at min, then the GPUs left round-robin, one per job per pass, up to max."""

    name: str = "ElasticFIFO"
    growth: Growth = "round_robin"

    def __post_init__(self) -> None:
        check_growth(self.growth)

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return allocate_by_priority(
            jobs, capacity, lambda group, free: elastic_in_order(group, free, self.growth))

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> dict[str, Reason]:
        return explain_in_order(jobs, capacity, allocation,
                                elastic_fifo_terms(self.name, self.growth),
                                lambda: by_submit(jobs))


def elastic_in_order(
    ordered: Sequence[Job], capacity: int, growth: str = "round_robin"
) -> dict[str, int]:
    """Min in order (non-blocking), then growth in the same order, each job up to max or
    to where one GPU more would slow it down (`without_slowdown`), whichever is first."""
    allocation = fill_in_order(ordered, capacity, _min)
    GROWERS[growth]([without_slowdown(job) for job in ordered], allocation, capacity)
    return allocation


def _min(job: Job) -> int:
    return job.min_workers


def fifo_terms(name: str) -> Terms:
    return Terms(name, "submit order", submit_rule(name, elastic=False), preferred_sized=True)


def elastic_fifo_terms(name: str, growth: str, order: str = "submit order") -> Terms:
    share = ("shares the GPUs beyond every job's min round-robin, one per job per pass, "
             f"in {order}" if growth == "round_robin" else
             f"gives the GPUs beyond every job's min to each job in {order}, up to max")
    return Terms(name, order, submit_rule(name, elastic=True), share=share)
