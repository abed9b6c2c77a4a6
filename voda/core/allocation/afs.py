"""AFS-L (Hwang et al., NSDI'21): apathetic future share, for job lengths known.

GPUs are handed out one at a time. Between two jobs that could take the next
one, the shorter job (remaining time at its current allocation) gets it unless
the longer job's relative marginal gain (S(n+1) - S(n)) / S(n) is larger. That
pairwise rule is the order "largest relative gain first, then shortest, then
submit order", so a heap keyed that way picks each winner in O(log n).

A job that holds no GPU starts with a block of `min` GPUs; its relative gain is
infinite (from nothing to something), so every job that fits starts before any
running job grows, the shortest (at its min size) first. A block that does not
fit in what is left is skipped, and smaller blocks may still fit.
See docs/design/001-allocation.md.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from voda.core.allocation.base import by_submit
from voda.core.estimate import EpochTimes
from voda.core.model import Job


@dataclass(frozen=True)
class AFSL:
    """One GPU (or a starting block of min) at a time: best relative gain, then shortest."""

    name: str = "AFS-L"

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        ordered = by_submit(jobs)
        n = len(ordered)
        held = [0] * n
        lows = [job.min_workers for job in ordered]
        tops = [job.max_workers for job in ordered]
        remaining = [job.remaining_epochs for job in ordered]
        times = [EpochTimes(job) for job in ordered]
        free = capacity
        # 1. Starting blocks: infinite relative gain, so the shortest (at min) first.
        at_min = [times[rank](lows[rank]) if lows[rank] <= capacity else 0.0 for rank in range(n)]
        starters = sorted(
            (round(remaining[rank] * at_min[rank], 6), rank)
            for rank in range(n)
            if lows[rank] <= capacity
        )
        growth: list[tuple[float, float, int]] = []
        after = [0.0] * n  # epoch time at the size the next GPU would make
        for _, rank in starters:
            if lows[rank] > free:
                continue  # smaller blocks may still fit
            held[rank] = lows[rank]
            free -= lows[rank]
            if lows[rank] < tops[rank]:
                after[rank] = times[rank](lows[rank] + 1)
                growth.append(_key(at_min[rank], after[rank], remaining[rank], rank))
        # 2. One GPU at a time to the best (relative gain, then shortest) running job.
        if sum(tops[rank] - held[rank] for _, _, rank in growth) <= free:
            for _, _, rank in growth:  # room for all: every job ends at max, whatever the order
                held[rank] = tops[rank]
            growth = []
        heapq.heapify(growth)
        while free > 0 and growth:
            rank = growth[0][2]
            have = held[rank] = held[rank] + 1
            free -= 1
            if have < tops[rank]:
                now = after[rank]
                after[rank] = times[rank](have + 1)
                heapq.heapreplace(growth, _key(now, after[rank], remaining[rank], rank))
            else:
                heapq.heappop(growth)
        return {job.name: held[rank] for rank, job in enumerate(ordered)}


def _key(now: float, after: float, remaining: float, rank: int) -> tuple[float, float, int]:
    """Heap key of a running job: (-relative gain, remaining time, submit rank).

    With t(n) the epoch time at n workers, S(n) = t(1) / t(n), so the relative
    gain (S(n+1) - S(n)) / S(n) of one more GPU is t(n) / t(n+1) - 1 (`now` and
    `after`), and the remaining time at the current size is remaining epochs x t(n).
    Gains are rounded to 1e-12 and times to microseconds so that float noise does
    not decide ties.
    """
    return (-round(now / after - 1.0, 12), round(remaining * now, 6), rank)
