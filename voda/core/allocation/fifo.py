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
from operator import attrgetter
from typing import Literal

from voda.core.allocation.base import (
    allocate_by_priority,
    by_submit,
    most_at_rigid_size,
    rigid_size,
    water_level,
)
from voda.core.allocation.reasons import Reason, Terms, explain_in_order, submit_rule
from voda.core.estimate import NEVER_SLOWER_KNOWN, growth_limit
from voda.core.model import Job

_NAME, _MIN = attrgetter("name"), attrgetter("min_workers")

Growth = Literal["round_robin", "in_order"]
GROWTHS: tuple[str, ...] = ("round_robin", "in_order")


def fill_in_order(
    ordered: Sequence[Job], capacity: int, size_of: Callable[[Job], int]
) -> dict[str, int]:
    """Give each job `size_of(job)` GPUs in order if they fit, else 0 (later jobs fill gaps)."""
    names = list(map(_NAME, ordered))
    return dict(zip(names, fill_sizes(list(map(size_of, ordered)), capacity), strict=True))


def fill_sizes(wants: list[int], capacity: int) -> list[int]:
    """`fill_in_order` over the sizes alone: each size in turn if it fits, else 0."""
    gpus = [0] * len(wants)
    free = capacity
    for i, want in enumerate(wants):
        if want <= free:
            gpus[i] = want
            free -= want
            if free == 0:
                break  # nothing later fits but a size 0, which it had already
    else:
        return gpus
    for j in range(i + 1, len(wants)):
        if wants[j] <= 0:
            gpus[j] = wants[j]
    return gpus


def grow_round_robin(gpus: list[int], growing: list[int], rooms: list[int], free: int) -> None:
    """Hand `free` GPUs to the jobs at the positions `growing` (in order), each with the
    room `rooms` below its max, one per job per pass, as the Go Voda's ElasticFIFO loop.

    Computed in one step: every job first gets the number of GPUs that all jobs still
    below max get in full passes (water-filling: the largest level L with
    sum(min(room, L)) <= free), and the GPUs then left go one each to the first jobs in
    order that can still take one.
    """
    if free <= 0 or not growing:
        return
    if sum(rooms) <= free:
        for i, room in zip(growing, rooms, strict=True):
            gpus[i] += room
        return
    level = water_level(sorted(rooms), free)
    for i, room in zip(growing, rooms, strict=True):
        extra = min(room, level)
        gpus[i] += extra
        free -= extra
    for i, room in zip(growing, rooms, strict=True):
        if free == 0:
            break
        if room > level:
            gpus[i] += 1
            free -= 1


def grow_in_order(gpus: list[int], growing: list[int], rooms: list[int], free: int) -> None:
    """Hand `free` GPUs to the jobs at the positions `growing`, in order, each up to max."""
    for i, room in zip(growing, rooms, strict=True):
        if free <= 0:
            return
        extra = min(room, free)
        gpus[i] += extra
        free -= extra


GROWERS: dict[str, Callable[[list[int], list[int], list[int], int], None]] = {
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

    def most_gpus(self, jobs: Sequence[Job]) -> int:
        return most_at_rigid_size(jobs)

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> dict[str, Reason]:
        return explain_in_order(jobs, capacity, allocation, fifo_terms(self.name),
                                lambda: by_submit(jobs))


def fill_at_rigid_size(ordered: Sequence[Job], capacity: int) -> dict[str, int]:
    """`fill_in_order` at each job's `rigid_size` out of `capacity`.

    A job's rigid size is at least its min, so a job whose min exceeds the GPUs still
    free gets 0 without its size being worked out (`plain_fill_at_rigid_size` works out
    every one): most of a long queue waits behind the GPUs the first jobs took. A job
    whose measured epoch times are known never to slow down with more workers (never_slower,
    memoized) gets min(preferred, capacity) without the call."""
    names = list(map(_NAME, ordered))
    gpus = [0] * len(ordered)
    free = capacity
    known = NEVER_SLOWER_KNOWN.get
    for i, job in enumerate(ordered):
        low = job.min_workers
        if low > free:
            continue
        preferred = job.preferred_workers
        if preferred is None or preferred <= low or capacity <= low:
            want = low  # rigid_size's own first answer, without the call (a job that fits)
        else:
            observed = job.epoch_time_by_workers
            kept = known(id(observed))
            if kept is not None and kept[0] is observed and kept[1]:
                # never_slower(job) as memoized: rigid_size is min(preferred, capacity)
                want = preferred if preferred < capacity else capacity
            else:
                want = rigid_size(job, capacity)
        if want <= free:
            gpus[i] = want
            free -= want
    return dict(zip(names, gpus, strict=True))


def plain_fill_at_rigid_size(ordered: Sequence[Job], capacity: int) -> dict[str, int]:
    """`fill_at_rigid_size` with every job's size worked out (the reference)."""
    names = list(map(_NAME, ordered))
    sizes = [rigid_size(job, capacity) for job in ordered]
    return dict(zip(names, fill_sizes(sizes, capacity), strict=True))


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
    to where one GPU more would slow it down (`without_slowdown`: `growth_limit` from
    min), whichever is first. Only the jobs that started are looked at for growth."""
    gpus = fill_sizes(list(map(_MIN, ordered)), capacity)
    free = capacity - sum(gpus)
    growing: list[int] = []
    rooms: list[int] = []
    if free > 0:
        for i, (job, have) in enumerate(zip(ordered, gpus, strict=True)):
            if 0 < have < job.max_workers:
                room = growth_limit(job, job.min_workers, job.max_workers) - have
                if room > 0:
                    growing.append(i)
                    rooms.append(room)
    GROWERS[growth](gpus, growing, rooms, free)
    return dict(zip(map(_NAME, ordered), gpus, strict=True))


def fifo_terms(name: str) -> Terms:
    return Terms(name, "submit order", submit_rule(name, elastic=False), preferred_sized=True)


def elastic_fifo_terms(name: str, growth: str, order: str = "submit order") -> Terms:
    share = ("shares the GPUs beyond every job's min round-robin, one per job per pass, "
             f"in {order}" if growth == "round_robin" else
             f"gives the GPUs beyond every job's min to each job in {order}, up to max")
    return Terms(name, order, submit_rule(name, elastic=True), share=share)
