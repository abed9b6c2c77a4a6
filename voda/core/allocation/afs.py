"""AFS-L (Hwang et al., NSDI'21): apathetic future share, for job lengths known.

GPUs are handed out one at a time (a job at 0 takes a starting block of `min`).
Each one goes to the winner of a pairwise tournament over the jobs that can take
it, walked in submit order as the Go Voda does: the first job is the incumbent,
and each later job challenges it. Of two jobs, j is the shorter (remaining time
at its current size; a job at 0 is longer than any running job) and jb the
longer; jb wins when

    (S_jb(x+1) - S_jb(x)) / S_jb(x+1)  >  (S_j(y+1) - S_j(y)) / S_j(y)

with x, y their current sizes. The left side is at most 1 and is exactly 1 for a
job at 0, so a job waiting to start beats every running job whose relative gain
is below 1. Between two jobs at 0 the shorter (at min) wins. A tie in length
makes the earlier job in submit order the shorter.

The rule is not transitive, so no heap can order it; instead the tournament is
kept between rounds. Handing a GPU to the winner changes that job only, so the
takeovers before it still stand and only the part of the walk after its
challenger is replayed. See docs/design/001-allocation.md.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

from voda.core.allocation.base import allocate_by_priority
from voda.core.allocation.afs_states import NO_GAIN_BAND, StateTables, band_of, state_at
from voda.core.estimate import EpochTimes
from voda.core.model import Job

INF = math.inf


@dataclass(frozen=True)
class AFSL:
    """One GPU (or a starting block of min) at a time, to the winner of the pairwise rule."""

    name: str = "AFS-L"

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return allocate_by_priority(jobs, capacity, afs_l)


def afs_l(ordered: Sequence[Job], capacity: int) -> dict[str, int]:
    """AFS-L on one priority class; `ordered` is in submit order."""
    return _Tournament(ordered, capacity).run()


class _Tournament:
    """The jobs in submit order with, per position, what the pairwise rule reads.

    For a running job at x workers: `length` its remaining time at x, g = t(x)/t(x+1) - 1
    its gain relative to S(x) (read when it is the shorter job) and h = 1 - t(x+1)/t(x)
    relative to S(x+1) (when it is the longer); g >= h. A job at 0 is longer than any
    running job, has h = 1 and, for ties between jobs at 0, `start` = its remaining time
    at min.

    A challenger c takes over from a running incumbent X only if c is at 0 and g_X < 1,
    or c runs and g_c >= h_X. So the walk needs only the waiting jobs and the running
    jobs of large gain: running jobs are filed, by position, under bands of gain
    (`_bucket`), and the walk looks at the bands at or above h_X alone.
    """

    def __init__(self, ordered: Sequence[Job], capacity: int) -> None:
        self.free = capacity
        self.held: dict[str, int] = {job.name: 0 for job in ordered}
        self.jobs = [job for job in ordered if job.min_workers <= capacity]
        self.tables = StateTables(self.jobs, capacity)
        self.times: list[EpochTimes | None] = [None] * len(self.jobs)  # made when needed
        n = len(self.jobs)
        self.x = [0] * n
        self.length = [INF] * n
        self.g = [INF] * n
        self.h = [1.0] * n
        self.band = [-1] * n  # the band a running job is filed under
        self.start = self.tables.start
        self.waiting = list(range(n))  # positions of the jobs at 0, ascending
        self.bands: list[list[int]] = [[] for _ in range(NO_GAIN_BAND + 1)]
        self.filled: list[int] = []  # indices of the bands that hold jobs, ascending
        # Jobs at 0 by min, largest last: they leave once their block cannot fit.
        self.blocks = sorted((job.min_workers, i) for i, job in enumerate(self.jobs))
        self.chain: list[int] = []  # the takeovers of the current walk, the winner last

    # ----- the walk ----------------------------------------------------------------------
    def _beats(self, incumbent: int, c: int) -> bool:
        """Does `c` (later in submit order) take over from `incumbent`?"""
        if self.x[incumbent] == 0:
            if self.x[c] == 0:
                return self.start[c] < self.start[incumbent]
            return self.g[c] >= 1.0
        if self.x[c] == 0:
            return self.g[incumbent] < 1.0
        if self.g[c] < self.h[incumbent]:
            return False
        return self.length[c] < self.length[incumbent] or self.h[c] > self.g[incumbent]

    def _walk(self, incumbent: int, after: int) -> None:
        """Let the jobs after position `after` challenge `incumbent`, noting takeovers."""
        while True:
            if self.x[incumbent] == 0:
                taker = self._taker_of_waiting(incumbent, after)
            else:
                taker = self._taker_of_running(incumbent, after)
            if taker is None:
                return
            self.chain.append(taker)
            incumbent = after = taker

    def _taker_of_waiting(self, incumbent: int, after: int) -> int | None:
        """First later job at 0 that is shorter at min, or running with g >= 1."""
        band = self.bands[0]
        i = bisect.bisect_right(band, after)
        strong = band[i] if i < len(band) else None
        start, own = self.start, self.start[incumbent]
        waiting = self.waiting
        for c in islice(waiting, bisect.bisect_right(waiting, after), None):
            if strong is not None and c > strong:
                break
            if start[c] < own:
                return c
        return strong

    def _taker_of_running(self, incumbent: int, after: int) -> int | None:
        g, h, length = self.g[incumbent], self.h[incumbent], self.length[incumbent]
        best = None
        if g < 1.0:  # any later job at 0 takes over
            i = bisect.bisect_right(self.waiting, after)
            if i < len(self.waiting):
                best = self.waiting[i]
        top = band_of(h)
        gains, heights, lengths, bands = self.g, self.h, self.length, self.bands
        for b in self.filled:  # the bands that hold jobs, ascending
            if b > top:
                break
            band = bands[b]
            if band[-1] <= after:
                continue
            for c in islice(band, bisect.bisect_right(band, after), None):
                if best is not None and c >= best:
                    break
                if gains[c] >= h and (lengths[c] < length or heights[c] > g):
                    best = c
                    break
        return best

    def _replay_from(self, position: int) -> None:
        """Redo the walk after the job at `position` changed or left; earlier takeovers stand."""
        chain = self.chain
        while chain and chain[-1] >= position:
            chain.pop()
        if chain:
            incumbent = chain[-1]
            if self._in_running(position) and self._beats(incumbent, position):
                chain.append(position)
                incumbent = position
            self._walk(incumbent, position)
            return
        first = self._first_in_running(position)
        if first is not None:
            chain.append(first)
            self._walk(first, first)

    def _in_running(self, i: int) -> bool:
        return self.band[i] >= 0 or (self.x[i] == 0 and self.start[i] < INF)

    def _first_in_running(self, position: int) -> int | None:
        firsts = [band[bisect.bisect_left(band, position)] for band in (*self.bands, self.waiting)
                  if band and band[-1] >= position]
        return min(firsts, default=None)

    # ----- state changes ---------------------------------------------------------------
    def _grow(self, i: int, take: int) -> None:
        had = self.x[i]
        x = self.x[i] = had + take
        self.free -= take
        if had == 0:
            self._stop_waiting(i)
        tables = self.tables
        if x >= tables.end[i]:
            if had:
                self._unfile(i)
            return
        k = x - tables.lo[i]
        if k < tables.tabled[i]:
            state = tables.states[tables.offset[i] + k]
        else:
            times = self.times[i] = self.times[i] or EpochTimes(self.jobs[i])
            state = state_at(self.jobs[i], times, x)
        self.length[i], self.g[i], self.h[i], band, _ = state
        if band != self.band[i]:
            if had:
                self._unfile(i)
            self._file(i, band)

    def _file(self, i: int, b: int) -> None:
        band = self.bands[b]
        if not band:
            bisect.insort(self.filled, b)
        bisect.insort(band, i)
        self.band[i] = b

    def _unfile(self, i: int) -> None:
        band = self.bands[self.band[i]]
        del band[bisect.bisect_left(band, i)]
        if not band:
            del self.filled[bisect.bisect_left(self.filled, self.band[i])]
        self.band[i] = -1

    def _stop_waiting(self, i: int) -> None:
        self.start[i] = INF
        del self.waiting[bisect.bisect_left(self.waiting, i)]

    def _drop_blocks_that_do_not_fit(self) -> int | None:
        """Jobs at 0 whose min exceeds the GPUs left leave; returns the earliest such."""
        earliest = None
        blocks = self.blocks
        while blocks and blocks[-1][0] > self.free:
            _, i = self.blocks.pop()
            if self.x[i] == 0 and self.start[i] < INF:
                self._stop_waiting(i)
                earliest = i if earliest is None else min(earliest, i)
        return earliest

    def run(self) -> dict[str, int]:
        if not self.jobs:
            return self.held
        if sum(job.max_workers for job in self.jobs) <= self.free:
            for job in self.jobs:  # room for every job at max, whatever the order
                self.held[job.name] = job.max_workers
            return self.held
        self._replay_from(0)
        while self.free > 0 and self.chain:
            winner = self.chain[-1]
            self._grow(winner, self.jobs[winner].min_workers if self.x[winner] == 0 else 1)
            earliest = self._drop_blocks_that_do_not_fit()
            self._replay_from(winner if earliest is None else min(winner, earliest))
        for job, x in zip(self.jobs, self.x, strict=True):
            self.held[job.name] = x
        return self.held
