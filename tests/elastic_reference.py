"""The ElasticFIFO / ElasticSRJF filling as it was at ce6fffe (one Job copy per job from
`without_slowdown`, then growth over those copies): the reference
tests/test_decisions_unchanged.py compares voda.core.allocation.fifo.elastic_in_order with."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from voda.core.allocation.base import water_level, without_slowdown
from voda.core.model import Job


def fill_in_order(ordered: Sequence[Job], capacity: int,
                  size_of: Callable[[Job], int]) -> dict[str, int]:
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


GROWERS = {"round_robin": grow_round_robin, "in_order": grow_in_order}


def elastic_in_order_reference(ordered: Sequence[Job], capacity: int,
                               growth: str = "round_robin") -> dict[str, int]:
    allocation = fill_in_order(ordered, capacity, lambda job: job.min_workers)
    GROWERS[growth]([without_slowdown(job) for job in ordered], allocation, capacity)
    return allocation
