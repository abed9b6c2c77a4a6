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
challenger is replayed. Each step of a replay asks for the first job after a
position that takes over from the incumbent; `_Index` answers with set
operations on bit masks of positions, checking only the few jobs whose values
sit in the same band as the incumbent's thresholds. See
docs/design/001-allocation.md.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from voda.core.allocation.afs_states import StateTables, state_at
from voda.core.allocation.base import allocate_by_priority
from voda.core.estimate import EpochTimes
from voda.core.model import Job

# Bands per quantity: more bands leave fewer jobs to check one by one in a query, and
# cost more mask updates when a job moves to another band.
BANDS = 32


@dataclass(frozen=True)
class AFSL:
    """One GPU (or a starting block of min) at a time, to the winner of the pairwise rule."""

    name: str = "AFS-L"

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return allocate_by_priority(jobs, capacity, afs_l)


def afs_l(ordered: Sequence[Job], capacity: int) -> dict[str, int]:
    """AFS-L on one priority class; `ordered` is in submit order."""
    jobs = [job for job in ordered if job.min_workers <= capacity]
    held = {job.name: 0 for job in ordered}
    if sum(job.max_workers for job in jobs) <= capacity:
        held.update((job.name, job.max_workers) for job in jobs)  # room for all at max
        return held
    if jobs:
        held.update(zip([job.name for job in jobs], _Tournament(jobs, capacity).run(),
                        strict=True))
    return held


class _Edges:
    """Fixed cuts of one quantity: the band of v is the number of edges at or below v,
    so a larger value never has a lower band. Edges at quantiles of the values met."""

    def __init__(self, values: np.ndarray, also: Sequence[float] = ()) -> None:
        finite = np.sort(values[np.isfinite(values)])
        cuts = finite[(np.arange(1, BANDS) * len(finite)) // BANDS] if len(finite) else finite
        self.edges = np.unique(np.concatenate([cuts, np.asarray(also, dtype=float)]))
        self.listed: list[float] = self.edges.tolist()

    def bands(self, values: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.edges, values, side="right")

    def band(self, value: float) -> int:
        return bisect_right(self.listed, value)

    def below(self, bands: np.ndarray) -> list[int]:
        """below[j]: the mask of positions i with bands[i] < j, for j = 0 .. len(edges) + 1."""
        return _masks(bands[None, :] < np.arange(len(self.listed) + 2)[:, None])


def _masks(flags: np.ndarray) -> list[int]:
    """Per row of `flags`, the bit mask with bit i set where the row is true at i."""
    packed = np.packbits(flags, axis=1, bitorder="little")
    raw, width = packed.tobytes(), packed.shape[1]
    return [int.from_bytes(raw[r:r + width], "little") for r in range(0, len(raw), width)]


class _Tournament:
    """The jobs in submit order (bit i of every mask is job i), the walk's takeovers,
    and the index the walk queries.

    Every state a job can be in (its size) has an entry in the state lists: length,
    g (gain relative to S(now)), h (relative to S(next)), and bands: of length, of g,
    of h, and of the values the job asks of others when it is the incumbent (h among
    the g bands, g among the h bands). `state[i]` is job i's current entry.

    `shorter[j]`, `gain_below[j]`, `h_below[j]` are the masks of jobs whose current
    band (of length, g, h) is below j; a job waiting is filed under its state at min,
    which is where it starts. `start_below[j]` does the same for the remaining time at
    min. Masks hold jobs that left too: they are read through `running` and `waiting`.
    """

    def __init__(self, jobs: Sequence[Job], capacity: int) -> None:
        self.jobs = jobs
        self.free = capacity
        n = len(jobs)
        tables = self.tables = StateTables(jobs, capacity)
        self.x = [0] * n
        length, g, h, start = tables.length, tables.g, tables.h, tables.start
        length_edges = self.length_edges = _Edges(length)
        gain_edges = self.gain_edges = _Edges(np.concatenate([g, h]), also=[1.0])
        h_edges = self.h_edges = _Edges(np.concatenate([g, h]))
        start_edges = self.start_edges = _Edges(start)
        length_band, gain_band, h_band = (
            length_edges.bands(length), gain_edges.bands(g), h_edges.bands(h))
        # Each job's first state (at min), or -1 for a job that has none (it never runs
        # below max); every job is filed under it while it waits.
        first = np.where(np.array(tables.tabled) > 0, tables.offset, -1)
        filed = np.maximum(first, 0)
        empty = np.zeros(n, dtype=np.int64)
        self.shorter = length_edges.below(length_band[filed] if len(length) else empty)
        self.gain_below = gain_edges.below(gain_band[filed] if len(g) else empty)
        self.h_below = h_edges.below(h_band[filed] if len(h) else empty)
        self.start_below = start_edges.below(start_edges.bands(start))
        self.state: list[int] = first.tolist()
        self.start: list[float] = start.tolist()
        self.length: list[float] = length.tolist()
        self.g: list[float] = g.tolist()
        self.h: list[float] = h.tolist()
        self.length_band: list[int] = length_band.tolist()
        self.gain_band: list[int] = gain_band.tolist()
        self.h_band: list[int] = h_band.tolist()
        self.asks_gain: list[int] = gain_edges.bands(h).tolist()  # g >= own h: this band on
        self.asks_h: list[int] = h_edges.bands(g).tolist()  # h > own g: this band on
        self.strong_band = gain_edges.band(1.0)  # g >= 1 exactly when the band is this or more
        self.waiting = (1 << n) - 1
        self.running = 0
        self.times: dict[int, EpochTimes] = {}  # for sizes beyond the tables
        # Jobs at 0 by min, largest last: they leave once their block cannot fit.
        self.lows = tables.lo
        self.by_min = sorted(zip(self.lows, range(n)))
        self.chain: list[int] = []  # the takeovers of the current walk, the winner last

    # ----- the pairwise rule -------------------------------------------------------------
    def _takes_over(self, c: int, incumbent: int) -> bool:
        """Does `c` (later in submit order) take over from `incumbent`?"""
        if self.x[incumbent] == 0:
            if self.x[c] == 0:
                return self.start[c] < self.start[incumbent]
            return self.g[self.state[c]] >= 1.0
        k = self.state[incumbent]
        if self.x[c] == 0:
            return self.g[k] < 1.0
        j = self.state[c]
        if self.length[j] < self.length[k]:
            return self.g[j] >= self.h[k]
        return self.h[j] > self.g[k]

    # ----- the walk ----------------------------------------------------------------------
    def _taker(self, incumbent: int, after: int) -> int | None:
        """The first job after position `after` that takes over from `incumbent`.

        The masks give every job that could (a superset: a job in the same band as a
        threshold may fall either side of it); the rule decides, in submit order."""
        later = -1 << (after + 1)
        x, state = self.x, self.state
        if x[incumbent] == 0:
            own = self.start[incumbent]
            band = self.start_edges.band(own)
            maybe = ((self.waiting & self.start_below[band + 1])
                     | (self.running & ~self.gain_below[self.strong_band])) & later
            start, gain = self.start, self.g
            while maybe:
                c = (maybe & -maybe).bit_length() - 1
                if (start[c] < own) if x[c] == 0 else (gain[state[c]] >= 1.0):
                    return c
                maybe &= maybe - 1
            return None
        k = state[incumbent]
        length, gain, lower = self.length, self.g, self.h
        own, g, h = length[k], gain[k], lower[k]
        maybe = (((self.shorter[self.length_band[k] + 1] & ~self.gain_below[self.asks_gain[k]])
                  | ~self.h_below[self.asks_h[k]]) & self.running & later)
        waiting = self.waiting & later if g < 1.0 else 0
        first_waiting = (waiting & -waiting).bit_length() - 1 if waiting else None
        while maybe:
            c = (maybe & -maybe).bit_length() - 1
            if first_waiting is not None and c > first_waiting:
                break
            j = state[c]
            if (gain[j] >= h) if length[j] < own else (lower[j] > g):
                return c
            maybe &= maybe - 1
        return first_waiting

    # ----- state changes -----------------------------------------------------------------
    def _grow(self, i: int, take: int) -> None:
        had = self.x[i]
        x = self.x[i] = had + take
        self.free -= take
        bit = 1 << i
        tables = self.tables
        if had == 0:
            self.waiting &= ~bit
            if self.state[i] >= 0:  # filed under its state at min already
                self.running |= bit
            return
        if x >= tables.end[i]:
            self.running &= ~bit
            return
        old = self.state[i]
        new = self.state[i] = self._state_index(i, x)
        for masks, bands in ((self.shorter, self.length_band), (self.gain_below, self.gain_band),
                             (self.h_below, self.h_band)):
            a, b = bands[old], bands[new]
            if b < a:  # a lower band: below more thresholds
                masks[b + 1:a + 1] = [m | bit for m in masks[b + 1:a + 1]]
            elif a < b:
                masks[a + 1:b + 1] = [m & ~bit for m in masks[a + 1:b + 1]]

    def _state_index(self, i: int, x: int) -> int:
        tables = self.tables
        k = x - tables.lo[i]
        if k < tables.tabled[i]:
            return tables.offset[i] + k
        job = self.jobs[i]
        length, g, h = state_at(job, self.times.setdefault(i, EpochTimes(job)), x)
        self.length.append(length)
        self.g.append(g)
        self.h.append(h)
        self.length_band.append(self.length_edges.band(length))
        self.gain_band.append(self.gain_edges.band(g))
        self.h_band.append(self.h_edges.band(h))
        self.asks_gain.append(self.gain_edges.band(h))
        self.asks_h.append(self.h_edges.band(g))
        return len(self.length) - 1

    def _drop_blocks_that_do_not_fit(self) -> int | None:
        """Jobs at 0 whose min exceeds the GPUs left leave; returns the earliest such."""
        earliest = None
        by_min = self.by_min
        while by_min and by_min[-1][0] > self.free:
            _, i = by_min.pop()
            if self.waiting >> i & 1:
                self.waiting &= ~(1 << i)
                earliest = i if earliest is None else min(earliest, i)
        return earliest

    def run(self) -> list[int]:
        """Hand out the GPUs; each job's count, in submit order.

        Each round: the winner (the last takeover of the walk) grows; jobs at 0 whose min
        no longer fits leave; the walk is redone from the first position that changed,
        keeping the takeovers before it (`chain`)."""
        chain, x, lows, by_min = self.chain, self.x, self.lows, self.by_min
        taker = self._taker
        position = 0
        while True:
            # Redo the walk after `position`: earlier takeovers stand; the job at
            # `position` challenges the last of them again, or starts the walk.
            while chain and chain[-1] >= position:
                chain.pop()
            if (self.running | self.waiting) >> position & 1:
                if not chain or self._takes_over(position, chain[-1]):
                    chain.append(position)
            elif not chain:
                rest = (self.running | self.waiting) >> position << position
                if not rest:
                    break
                chain.append((rest & -rest).bit_length() - 1)
            incumbent = chain[-1]
            while (c := taker(incumbent, max(incumbent, position))) is not None:
                chain.append(c)
                incumbent = c
            if self.free <= 0:
                break
            winner = chain[-1]
            self._grow(winner, lows[winner] if x[winner] == 0 else 1)
            position = winner
            if by_min and by_min[-1][0] > self.free:
                earliest = self._drop_blocks_that_do_not_fit()
                if earliest is not None and earliest < winner:
                    position = earliest
        return x
