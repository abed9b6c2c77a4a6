"""Taking borrowed GPUs back from a queue (docs/design/013-queues.md, rule 5).

A queue that holds more than its guarantee and whose share fell below what it holds gives
the difference back: first by shrinking its running jobs toward their `min` (borrowed jobs
first, lowest priority and most recent first), then by preempting its borrowed jobs in the
same order. A job within the queue's guarantee (the prefix of its running jobs, in
priority then submit order, whose GPUs fit in the guarantee) is never preempted while the
share still covers the guarantee.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from voda.core.allocation.base import by_submit
from voda.core.model import Job


@dataclass(frozen=True, slots=True)
class Reclaim:
    allocation: dict[str, int]
    by_shrinking: int  # GPUs given back by jobs that kept running
    by_preemption: int  # GPUs given back by jobs stopped
    within_guarantee: frozenset[str]  # the running jobs within the queue's guarantee


def within_guarantee(jobs: Sequence[Job], guarantee: int) -> frozenset[str]:
    """The running jobs whose GPUs fit in `guarantee`, taken in priority then submit order
    until the first that does not fit."""
    inside: list[str] = []
    total = 0
    for job in by_submit([j for j in jobs if j.current_workers > 0]):
        total += job.current_workers
        if total > guarantee:
            break
        inside.append(job.name)
    return frozenset(inside)


def reclaim(jobs: Sequence[Job], guarantee: int, share: int) -> Reclaim:
    """The queue's jobs cut from what they hold down to at most `share` GPUs."""
    running = by_submit([j for j in jobs if j.current_workers > 0])
    counts = {j.name: min(j.current_workers, j.max_workers) for j in running}
    counts.update({j.name: 0 for j in jobs if j.current_workers <= 0})
    inside = within_guarantee(jobs, guarantee)
    last_first = running[::-1]
    borrowed = [j for j in last_first if j.name not in inside]
    kept = [j for j in last_first if j.name in inside]
    excess = sum(counts[j.name] for j in running) - share
    shrunk = preempted = 0
    for job in (*borrowed, *kept):  # 1. shrink toward min
        if excess <= 0:
            break
        cut = min(excess, counts[job.name] - job.min_workers)
        if cut > 0:
            counts[job.name] -= cut
            excess -= cut
            shrunk += cut
    stopped: set[str] = set()
    for job in (*borrowed, *kept):  # 2. preempt; jobs within the guarantee only as a last resort
        if excess <= 0:
            break
        excess -= counts[job.name]
        preempted += counts[job.name]
        counts[job.name] = 0
        stopped.add(job.name)
    for job in running:  # 3. a preemption that freed more than needed: grow back
        if excess >= 0:
            break
        if job.name in stopped:
            continue
        grow = min(-excess, min(job.current_workers, job.max_workers) - counts[job.name])
        if grow > 0:
            counts[job.name] += grow
            excess += grow
            shrunk -= grow
    return Reclaim(counts, shrunk, preempted, inside)
