"""The allocation contract shared by every algorithm, built in or custom.

An algorithm is a callable `(jobs, capacity) -> {job name: GPUs}` over the
active jobs of one GPU type. It must give every job 0 or a count in
[min, max], never hand out more than `capacity` in total, and be deterministic.
`checked_allocate` enforces that on every result, so a broken custom algorithm
is refused instead of reaching the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from itertools import groupby, islice, repeat
from operator import attrgetter, lt
from typing import Protocol, runtime_checkable

from voda.core.estimate import fastest_count, growth_limit
from voda.core.model import Job


@runtime_checkable
class AllocationAlgorithm(Protocol):
    name: str

    def __call__(self, jobs: Sequence[Job], capacity: int) -> Mapping[str, int]: ...


class AllocationRejected(ValueError):
    """An algorithm returned an allocation that breaks the contract."""

    def __init__(self, algorithm: str, problems: list[str]) -> None:
        self.algorithm = algorithm
        self.problems = problems
        super().__init__(f"allocation from {algorithm!r} refused: " + "; ".join(problems))


def allocation_problems(
    jobs: Sequence[Job], capacity: int, allocation: Mapping[str, int]
) -> list[str]:
    """Every way `allocation` breaks the contract (empty when it is valid)."""
    problems: list[str] = []
    by_name = {j.name: j for j in jobs}
    total = 0
    for name, gpus in allocation.items():
        job = by_name.get(name)
        if job is None:
            problems.append(f"job {name!r}: not among the jobs given")
            continue
        if not isinstance(gpus, int) or isinstance(gpus, bool):
            problems.append(f"job {name!r}: GPU count {gpus!r} is not an integer")
            continue
        if gpus != 0 and not (job.min_workers <= gpus <= job.max_workers):
            problems.append(
                f"job {name!r}: {gpus} GPUs is neither 0 nor within "
                f"[min, max] = [{job.min_workers}, {job.max_workers}]"
            )
        total += max(gpus, 0)
    if total > capacity:
        problems.append(f"{total} GPUs allocated but the capacity is {capacity}")
    return problems


def checked_allocate(
    algorithm: AllocationAlgorithm, jobs: Sequence[Job], capacity: int
) -> dict[str, int]:
    """Run `algorithm` and return its allocation with every job present (0 if none).

    Raises AllocationRejected when the result breaks the contract, or when the
    algorithm itself raises.
    """
    name = getattr(algorithm, "name", type(algorithm).__name__)
    try:
        raw = algorithm(jobs, capacity)
    except Exception as exc:  # a custom algorithm may fail in any way
        raise AllocationRejected(name, [f"raised {type(exc).__name__}: {exc}"]) from exc
    return checked_result(name, jobs, capacity, raw)


def checked_allocate_many(algorithm: AllocationAlgorithm,
                          problems: Sequence[tuple[Sequence[Job], int]]) -> list[dict[str, int]]:
    """`checked_allocate` of each (jobs, capacity) problem, by the algorithm's
    `allocate_many(problems)` where it has one (the same allocations as a call per
    problem, for less: Voda, Pollux), else a call per problem."""
    many = getattr(algorithm, "allocate_many", None)
    if many is None:
        return [checked_allocate(algorithm, jobs, capacity) for jobs, capacity in problems]
    name = getattr(algorithm, "name", type(algorithm).__name__)
    try:
        raws = list(many(problems))
    except Exception as exc:  # a custom algorithm may fail in any way
        raise AllocationRejected(name, [f"raised {type(exc).__name__}: {exc}"]) from exc
    if len(raws) != len(problems):
        raise AllocationRejected(name, [f"allocate_many returned {len(raws)} allocations "
                                        f"for {len(problems)} problems"])
    return [checked_result(name, jobs, capacity, raw)
            for (jobs, capacity), raw in zip(problems, raws, strict=True)]


def checked_result(name: str, jobs: Sequence[Job], capacity: int, raw: object
                   ) -> dict[str, int]:
    """`raw`, what algorithm `name` gave `jobs` on `capacity`, with every job present,
    or AllocationRejected saying how it breaks the contract."""
    if not isinstance(raw, Mapping):
        raise AllocationRejected(name, [f"returned {type(raw).__name__}, not a mapping"])
    checked = _valid(jobs, capacity, raw)
    if checked is not None:
        return checked
    problems = allocation_problems(jobs, capacity, raw)
    if problems:
        raise AllocationRejected(name, problems)
    return {j.name: int(raw.get(j.name, 0)) for j in jobs}  # e.g. an int subclass


def _valid(jobs: Sequence[Job], capacity: int, raw: Mapping[str, int]) -> dict[str, int] | None:
    """`raw` with every job present (0 if none) when it plainly keeps the contract, else
    None (`allocation_problems` then says why, or finds nothing wrong with what this pass
    does not take: an int subclass, jobs of one name): one pass, no message built."""
    out: dict[str, int] = {}
    total = named = 0
    get = raw.get
    for job in jobs:
        gpus = get(job.name)
        if gpus is None:
            out[job.name] = 0
            continue
        named += 1
        if type(gpus) is not int:  # bool, and int subclasses: the slow path decides
            return None
        if gpus != 0 and not (job.min_workers <= gpus <= job.max_workers):
            return None
        out[job.name] = gpus
        total += max(gpus, 0)
    if named != len(raw) or total > capacity:
        return None  # a name not among the jobs (or given twice), or too many GPUs
    return out


_PRIORITY, _SUBMIT_TIME, _NAME = (
    attrgetter("priority"), attrgetter("submit_time"), attrgetter("name"))


def water_level(rooms: list[int], free: int) -> int:
    """The largest L with sum(min(room, L)) <= free (`rooms` ascending, not empty); the
    largest room where they all fit."""
    below = 0  # sum of the rooms already under the level
    for i, room in enumerate(rooms):
        count = len(rooms) - i  # jobs whose room is at least `room`
        if below + room * count > free:
            return (free - below) // count
        below += room
    return rooms[-1]


def by_submit(jobs: Sequence[Job]) -> list[Job]:
    """Jobs by priority, then submit order, then name: the order every algorithm breaks ties in.

    The same order as sorting by `Job.sort_key`, got by stable sorts from the last key to
    the first: one key each compares about three times faster than key tuples. The sort by
    name (strings: the dearest) is made only where two submit times are not strictly
    ordered (a tie, or a NaN); where every one is, the submit order alone decides.
    """
    ordered = sorted(jobs, key=_SUBMIT_TIME)
    times = list(map(_SUBMIT_TIME, ordered))
    if not all(map(lt, times, islice(times, 1, None))):
        ordered = plain_by_submit(jobs)
    else:
        ordered.sort(key=_PRIORITY)
    return ordered


def plain_by_submit(jobs: Sequence[Job]) -> list[Job]:
    """`by_submit` with every sort made (the reference)."""
    ordered = sorted(jobs, key=_NAME)
    ordered.sort(key=_SUBMIT_TIME)
    ordered.sort(key=_PRIORITY)
    return ordered


ClassAllocator = Callable[[Sequence[Job], int], Mapping[str, int]]


def allocate_by_priority(
    jobs: Sequence[Job], capacity: int, allocate_class: ClassAllocator
) -> dict[str, int]:
    """Strict priority classes, the one meaning of `priority` in every built-in algorithm.

    The jobs of priority 0 are allocated first, by `allocate_class`, on the whole
    capacity; the jobs of priority 1 then share what is left, and so on. A job of a
    lower class gets a GPU only when no job of a higher class would take it under the
    algorithm's own rules. `allocate_class` gets one class in submit order.
    """
    allocation: dict[str, int] = {}
    free = capacity
    for _, members in groupby(by_submit(jobs), key=_PRIORITY):
        group = list(members)
        part = allocate_class(group, free)
        names = list(map(_NAME, group))
        gpus = list(map(part.get, names, repeat(0)))  # a job the class left out gets 0
        allocation.update(zip(names, gpus, strict=True))
        free -= sum(gpus)
    return allocation


CountsAllocator = Callable[[Sequence[Job], int], Sequence[int]]


def allocate_counts_by_priority(
    jobs: Sequence[Job], capacity: int, counts_class: CountsAllocator
) -> dict[str, int]:
    """`allocate_by_priority` for a class allocator that gives a count per job, in the
    order of the class it was handed: no map from it to build and read back by name (on
    10,000 jobs, two passes over scattered names and their hashes: some 4 ms)."""
    allocation: dict[str, int] = {}
    free = capacity
    for _, members in groupby(by_submit(jobs), key=_PRIORITY):
        group = list(members)
        gpus = counts_class(group, free)
        allocation.update(zip(map(_NAME, group), gpus, strict=True))
        free -= sum(gpus)
    return allocation


ManyAllocator = Callable[[Sequence[tuple[Sequence[Job], int]]], list[dict[str, int]]]


def allocate_many_by_priority(problems: Sequence[tuple[Sequence[Job], int]],
                              allocate_classes: ManyAllocator,
                              kept: dict[int, tuple[Sequence[Job], list[list[Job]]]] | None = None
                              ) -> list[dict[str, int]]:
    """`allocate_by_priority` of each (jobs, capacity) problem, the classes of one rank
    in every problem handed to `allocate_classes` together (a list of (class, capacity
    left) in, one allocation per problem out): the same allocations, for an algorithm
    whose per-call cost is worth sharing (Voda's, Pollux's; the quota layer runs one
    problem per queue).

    `kept` (a store over calls on the same, unchanged lists of jobs, as the quota layer's
    rounds make them): each list's priority classes, worked out once."""
    classes = ([_classes(jobs) for jobs, _ in problems] if kept is None
               else [kept_classes(jobs, kept) for jobs, _ in problems])
    free = [capacity for _, capacity in problems]
    out: list[dict[str, int]] = [{} for _ in problems]
    for rank in range(max(map(len, classes), default=0)):
        now = [k for k, groups in enumerate(classes) if rank < len(groups)]
        parts = allocate_classes([(classes[k][rank], free[k]) for k in now])
        for k, part in zip(now, parts, strict=True):
            names = list(map(_NAME, classes[k][rank]))
            if len(classes[k]) == 1 and list(part) == names:  # its one class, every job named
                out[k] = dict(part)
                continue
            gpus = list(map(part.get, names, repeat(0)))
            out[k].update(zip(names, gpus, strict=True))
            free[k] -= sum(gpus)
    return out


def kept_classes(jobs: Sequence[Job],
                 kept: dict[int, tuple[Sequence[Job], list[list[Job]]]]) -> list[list[Job]]:
    """`_classes(jobs)`, kept under the list's id with the list (so the id is not reused
    while it is kept): read back for the same list, which a caller does not change."""
    held = kept.get(id(jobs))
    if held is None:
        held = kept[id(jobs)] = (jobs, _classes(jobs))
    return held[1]


def _classes(jobs: Sequence[Job]) -> list[list[Job]]:
    """The priority classes of `jobs`, each in submit order (`by_submit`): most problems
    have one, which needs no grouping."""
    ordered = by_submit(jobs)
    if not ordered:
        return []
    if ordered[0].priority == ordered[-1].priority:  # by priority first: all the same
        return [ordered]
    return [list(members) for _, members in groupby(ordered, key=_PRIORITY)]


def live_problems(problems: Sequence[tuple[Sequence[Job], int]],
                  order: Callable[[Sequence[Job]], list[Job]]
                  ) -> tuple[list[dict[str, int]], list[tuple[int, list[Job], int]]]:
    """The problems with jobs and GPUs to share, as (index, jobs in `order`, capacity),
    and one allocation per problem, every job at 0 for the others (empty for these)."""
    out: list[dict[str, int]] = [{} for _ in problems]
    live = []
    for k, (jobs, capacity) in enumerate(problems):
        ordered = order(jobs)
        if not ordered or capacity <= 0:
            out[k] = {j.name: 0 for j in ordered}
        else:
            live.append((k, ordered, capacity))
    return out, live


def rigid_size(job: Job, capacity: int) -> int:
    """The size a rigid-size algorithm (FIFO, SRJF, Tiresias) runs `job` at, out of the
    `capacity` its priority class has.

    Its preferred size (min when none), as those papers run a job at the size it asks
    for; but never more than the capacity (a size the class can never give would leave
    the job waiting for ever with GPUs idle: it takes the largest count in [min,
    preferred] that fits instead), and never a count whose estimated epoch time is worse
    than a smaller count's: of the counts from min up to that, the fastest (the largest
    of equally fast ones). A job whose min exceeds the capacity gets its min, which does
    not fit."""
    top = min(job.preferred, capacity)
    low = job.min_workers
    if top <= low:
        return low
    return fastest_count(job, low, top)


def most_at_rigid_size(jobs: Sequence[Job]) -> int:
    """The most GPUs a rigid-size algorithm gives `jobs` on any capacity: a job runs at
    its `rigid_size`, at most the larger of its min and its preferred size, or not at
    all. (The optional `most_gpus(jobs)` of an algorithm: the quota layer's demand of a
    queue, docs/design/013-queues.md; without it the demand is the sum of the jobs' max.)"""
    most = 0
    for job in jobs:  # max(min, preferred), read without the property: a loop per queue
        preferred = job.preferred_workers
        low = job.min_workers
        most += low if preferred is None or preferred < low else preferred
    return most


def without_slowdown(job: Job) -> Job:
    """`job` with its max lowered to where its estimated epoch time first rises
    (`estimate.growth_limit` from min): an algorithm that grows a job one GPU at a time
    then never grows it into a slow-down. The job itself when nothing lowers it."""
    top = growth_limit(job, job.min_workers, job.max_workers)
    if top >= job.max_workers:
        return job
    preferred = job.preferred_workers
    return replace(job, max_workers=top,
                   preferred_workers=None if preferred is None else min(preferred, top))
