"""Taking borrowed GPUs back from a queue (docs/design/013-queues.md, rule 5).

A queue that holds more than its guarantee, and whose share fell below what it holds
while another queue grows, gives the difference back. What its algorithm gives its jobs
on the guarantee alone (as it would decide for the queue by itself) stays theirs; what
its running jobs hold beyond that is borrowed, and is cut to what is left of the queue's
share: first the borrowed GPUs are given back by shrinking (toward the job's part of the
guarantee, or toward its `min`), lowest priority then most recent first; then the jobs
running on borrowed GPUs alone are preempted in that order. A job the algorithm runs on
the guarantee is never preempted to give GPUs to another queue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from voda.core.allocation.base import by_submit, checked_allocate
from voda.core.model import Job

Allocate = Callable[[Sequence[Job], int], Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class Reclaim:
    allocation: dict[str, int]
    by_shrinking: int  # GPUs given back by borrowed jobs that kept running
    by_preemption: int  # GPUs given back by borrowed jobs stopped
    within_guarantee: frozenset[str]  # the jobs its algorithm runs on the guarantee alone
    cut: frozenset[str]  # the borrowed jobs that gave GPUs back


def reclaim(algorithm: Allocate, jobs: Sequence[Job], share: int,
            own: Mapping[str, int]) -> Reclaim:
    """The queue's jobs on at most `share` GPUs, the borrowed ones cut as the rule says.
    `own`: the algorithm's allocation of the jobs on min(guarantee, share) (the quota
    decision's run of the queue there)."""
    ordered = by_submit(jobs)
    counts = cut_to(ordered, own, share)
    left = share - sum(counts.values())
    idle = [j for j in ordered if counts[j.name] == 0 and j.current_workers <= 0]
    if left > 0 and idle:  # what a preemption freed beyond the cut: its waiting jobs'
        counts.update(checked_allocate(algorithm, idle, left))
        left = share - sum(counts.values())
    if left > 0:  # still idle: the jobs that gave nothing back may grow into it
        counts.update(grown(algorithm, ordered, counts, left))
    held = {j.name: min(j.current_workers, j.max_workers) for j in jobs}
    cut = frozenset(j.name for j in jobs if counts[j.name] < held[j.name])
    shrunk = sum(held[n] - counts[n] for n in cut if counts[n] > 0)
    preempted = sum(held[n] for n in cut if counts[n] == 0)
    inside = frozenset(n for n, gpus in own.items() if gpus > 0)
    return Reclaim(counts, shrunk, preempted, inside, cut)


def grown(algorithm: Allocate, jobs: Sequence[Job], counts: Mapping[str, int],
          left: int) -> dict[str, int]:
    """The running jobs that gave nothing back, on what they hold plus `left`, as the
    algorithm shares that among them; unchanged unless it takes none of them below what
    it holds (growing into idle GPUs never cuts a job)."""
    keep = [j for j in jobs if counts[j.name] > 0
            and counts[j.name] >= min(j.current_workers, j.max_workers)]
    if not keep:
        return {}
    now = {j.name: counts[j.name] for j in keep}
    more = checked_allocate(algorithm, keep, sum(now.values()) + left)
    if any(more.get(name, 0) < gpus for name, gpus in now.items()):
        return {}
    return {name: more[name] for name in now}


def cut_to(jobs: Sequence[Job], own: Mapping[str, int], budget: int) -> dict[str, int]:
    """Jobs (in priority then submit order) cut to at most `budget` GPUs in all, none below
    `own` (its part of the guarantee): what they hold beyond it shrinks from the last
    (lowest priority, most recent) toward `own` or `min`; then the jobs with no part of the
    guarantee are preempted from the last; a job preempted needlessly (a later preemption
    freed enough for its min) runs again, and the shrunk grow back into what is left."""
    held = {j.name: max(min(j.current_workers, j.max_workers), own.get(j.name, 0))
            for j in jobs}
    counts = dict(held)
    excess = sum(counts.values()) - budget
    last_first = list(reversed(jobs))
    for job in last_first:  # 1. shrink toward its part of the guarantee, or its min
        if excess <= 0:
            break
        cut = min(excess, counts[job.name] - (own.get(job.name, 0) or job.min_workers))
        if cut > 0:
            counts[job.name] -= cut
            excess -= cut
    stopped: set[str] = set()
    for job in last_first:  # 2. preempt the jobs running on borrowed GPUs alone
        if excess <= 0:
            break
        if own.get(job.name, 0) or not counts[job.name]:
            continue
        excess -= counts[job.name]
        counts[job.name] = 0
        stopped.add(job.name)
    for job in jobs:  # 3. the surplus of a preemption: victims that fit run again
        if excess >= 0:
            break
        if job.name in stopped and job.min_workers <= -excess:
            stopped.discard(job.name)
            counts[job.name] = job.min_workers
            excess += job.min_workers
    for job in jobs:  # then the shrunk grow back
        if excess >= 0:
            break
        grow = min(-excess, held[job.name] - counts[job.name]) if counts[job.name] else 0
        if grow > 0:
            counts[job.name] += grow
            excess += grow
    return counts
