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
takeovers before it still stand and only the part of the walk from the winner's
position on is replayed. Each step of a replay asks for the first job after a
position that takes over from the incumbent; `_Tournament` answers with set
operations on bit masks of positions (bit i is job i), checking one by one only
the jobs whose values sit in the same band as the incumbent's thresholds. With 64
jobs or more in a class the rounds run compiled (`afs_kernel`, numba) on the same
tables and masks; `_Tournament.run_interpreted` is the reference. See
docs/design/001-allocation.md. Several classes at once (`afs_l_many`, the quota
layer's queues) share one pass for their tables and one set of band edges.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from types import ModuleType

import numpy as np

from voda.core.allocation.afs_states import JobReadings, StateTables, state_at
from voda.core.allocation.base import (
    allocate_counts_by_priority,
    allocate_many_by_priority,
    by_submit,
)
from voda.core.allocation.reasons import (
    Reason,
    Terms,
    explain_in_order,
    priority_rule,
    slower_with_more,
)
from voda.core.compiled import compiled
from voda.core.estimate import EpochTimes, growth_limit
from voda.core.model import Job

_NAME = attrgetter("name")

# Bands per quantity: more bands leave fewer jobs to check one by one in a query, and
# cost more mask updates when a job moves to another band.
BANDS = 32
# Values sorted to place the band edges (about; see `_Edges`).
SAMPLE = 2048


# From this many jobs in a class the rounds run compiled (`afs_kernel`, where numba is
# installed): below it the interpreted rounds cost less than a call into the kernel
# and numba's import.
KERNEL_MIN_JOBS = 64


def _kernel() -> ModuleType | None:
    """`afs_kernel`, imported on first use; None without numba (voda.core.compiled)."""
    return compiled("voda.core.allocation.afs_kernel")


@dataclass(frozen=True)
class AFSL:
    """One GPU (or a starting block of min) at a time, to the winner of the pairwise rule."""

    name: str = "AFS-L"

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return allocate_counts_by_priority(jobs, capacity, afs_l)

    def allocate_many(self, problems: Sequence[tuple[Sequence[Job], int]]
                      ) -> list[dict[str, int]]:
        """`self(jobs, capacity)` of each problem, the same allocations: the classes of a
        rank in every problem decided together (`afs_l_many`)."""
        return allocate_many_by_priority(problems, _classes_at_once)

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> dict[str, Reason]:
        name = self.name

        def rule(loser: Job, taker: Job) -> str:
            said = priority_rule(loser, taker, name)
            if said:
                return said
            mine = relative_gain(loser, allocation.get(loser.name, 0))
            if taker.current_workers == 0:
                return (f"{name}: {taker.name} starts (a job at 0 has relative gain 1.00, "
                        f"{loser.name}'s is {mine:.2f})")
            theirs = relative_gain(taker, taker.current_workers)
            return f"{name}: {taker.name}'s relative gain {theirs:.2f} > {loser.name}'s {mine:.2f}"

        def best(job: Job, gpus: int) -> str | None:
            return slower_with_more(job, gpus, EpochTimes(job), name)

        terms = Terms(name, "submit order (each GPU to the winner of the pairwise rule)", rule,
                      share="gives each GPU to the job of larger relative gain in speed",
                      best_count=best)
        return explain_in_order(jobs, capacity, allocation, terms, lambda: by_submit(jobs))


def relative_gain(job: Job, x: int) -> float:
    """(S(x+1) - S(x)) / S(x): what one GPU more adds to the job's speed, relative (1 for a
    job at 0, which starts)."""
    if x <= 0:
        return 1.0
    times = EpochTimes(job)
    after = times(x + 1)
    return times(x) / after - 1.0 if after > 0 else 0.0


def afs_l(ordered: Sequence[Job], capacity: int) -> list[int]:
    """AFS-L on one priority class, `ordered` in submit order: each job's count, in that
    order (0 for a job whose min exceeds the capacity).

    A job takes GPUs only up to where one more would slow it down (`without_slowdown`):
    the paper assumes speedups that never fall, and the rule would hand a job alone every
    GPU left whatever its gain."""
    jobs = [job for job in ordered if job.min_workers <= capacity]
    # Each max lowered as by `without_slowdown`: for many jobs read all at once, for a few
    # one by one (kept per epoch-time map), which costs less than the readings.
    readings = JobReadings(jobs) if len(jobs) >= KERNEL_MIN_JOBS else None
    tops = _tops(jobs, readings)
    if int(tops.sum()) <= capacity:  # room for all at max
        counts = tops.tolist()
    else:
        counts = _Tournament(jobs, capacity,
                             readings if readings is not None else JobReadings(jobs)).run()
    return _in_order(ordered, capacity, jobs, counts)


def afs_l_many(classes: Sequence[tuple[Sequence[Job], int]]) -> list[list[int]]:
    """`afs_l` of each (class, capacity): the same counts, the tables of every class that
    holds a tournament worked out together (`StateTables.many`), which costs one pass of
    NumPy calls instead of one a class (the quota layer's queues: tens of small classes)."""
    fitting = [[job for job in ordered if job.min_workers <= capacity]
               for ordered, capacity in classes]
    readings = [JobReadings(jobs) if len(jobs) >= KERNEL_MIN_JOBS else None for jobs in fitting]
    tops = [_tops(jobs, read) for jobs, read in zip(fitting, readings, strict=True)]
    held = [k for k, (top, (_, capacity)) in enumerate(zip(tops, classes, strict=True))
            if int(top.sum()) > capacity]
    tables = StateTables.many([(fitting[k], classes[k][1]) for k in held])
    bands = _Bands(tables) if tables else None
    at = {k: n for n, k in enumerate(held)}
    out = []
    for k, (ordered, capacity) in enumerate(classes):
        n = at.get(k)
        counts = (tops[k].tolist() if n is None or bands is None else _Tournament(
            fitting[k], capacity, tables=tables[n], bands=bands.part(n)).run())
        out.append(_in_order(ordered, capacity, fitting[k], counts))
    return out


def _classes_at_once(classes: Sequence[tuple[Sequence[Job], int]]) -> list[dict[str, int]]:
    counts = afs_l_many(classes)
    return [dict(zip(map(_NAME, ordered), gpus, strict=True))
            for (ordered, _), gpus in zip(classes, counts, strict=True)]


def _tops(jobs: Sequence[Job], readings: JobReadings | None) -> np.ndarray:
    """Each job's max lowered as by `without_slowdown`."""
    if readings is not None:
        return readings.top
    return np.array([growth_limit(job, job.min_workers, job.max_workers) for job in jobs],
                    dtype=np.int64)


def _in_order(ordered: Sequence[Job], capacity: int, jobs: Sequence[Job],
              counts: list[int]) -> list[int]:
    """The counts of `jobs` (those of `ordered` whose min fits) for all of `ordered`."""
    if len(jobs) == len(ordered):
        return counts
    taken = iter(counts)
    return [next(taken) if job.min_workers <= capacity else 0 for job in ordered]


class _Edges:
    """Fixed cuts of one quantity: the band of v is the number of edges at or below v,
    so a larger value never has a lower band. Edges at quantiles of the values met, or of
    every k-th of them where there are many: the bands only narrow down the jobs the rule
    checks one by one, so any cuts give the same allocation, and these cost one sort of
    at most 2 x SAMPLE values."""

    def __init__(self, values: np.ndarray, also: Sequence[float] = ()) -> None:
        finite = values[np.isfinite(values)]
        finite = np.sort(finite[::max(1, len(finite) // SAMPLE)])
        cuts = finite[(np.arange(1, BANDS) * len(finite)) // BANDS] if len(finite) else finite
        self.edges = np.unique(np.concatenate([cuts, np.asarray(also, dtype=float)]))
        self.listed: list[float] = self.edges.tolist()

    def bands(self, values: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.edges, values, side="right")

    def band(self, value: float) -> int:
        return bisect_right(self.listed, value)

    def never(self) -> int:
        """The index of the empty mask in `at_least` (no value is in a band this high)."""
        return len(self.listed) + 1

    def below(self, bands: np.ndarray) -> np.ndarray:
        """below[j, i]: bands[i] < j, for j = 0 .. len(edges) + 1 (one row a mask)."""
        return bands[None, :] < np.arange(len(self.listed) + 2)[:, None]

    def at_least(self, bands: np.ndarray) -> np.ndarray:
        """at_least[j, i]: bands[i] >= j (the complement of below)."""
        return bands[None, :] >= np.arange(len(self.listed) + 2)[:, None]


# g and h of one state read one ratio r = t(x)/t(x+1) two ways: g = r - 1, h = 1 - 1/r.
# So h_c > g_X asks r_c > 1/(1 - g_X), that is g_c > 1/(1 - g_X) - 1, and nothing when
# g_X >= 1 (h is below 1). Margins of 1e-9, relative and absolute, stay below that bound
# whatever the 1e-12 quantisation and the floating-point rounding of the three did, so
# every job whose h exceeds g_X has a g at or above `least_g_with_h_above(g_X)`.
_MARGIN = 1e-9


def least_g_with_h_above(g: float) -> float:
    """A lower bound on g_c over every state c with h_c > g (inf: there is none)."""
    if g < 1.0 - _MARGIN:
        bound = 1.0 / (1.0 - g + _MARGIN) - 1.0
        return bound - _MARGIN * abs(bound) - _MARGIN
    return -math.inf if g < 1.0 else math.inf


def least_g_with_h_above_all(g: np.ndarray) -> np.ndarray:
    """`least_g_with_h_above` of every value of `g`."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        bound = 1.0 / (1.0 - g + _MARGIN) - 1.0
        bound = bound - _MARGIN * np.abs(bound) - _MARGIN
    return np.where(g < 1.0 - _MARGIN, bound, np.where(g < 1.0, -np.inf, np.inf))


def _masks(flags: np.ndarray) -> list[int]:
    """Per row of `flags`, the bit mask with bit i set where the row is true at i."""
    packed = np.packbits(flags, axis=1, bitorder="little")
    raw, width = packed.tobytes(), packed.shape[1]
    return [int.from_bytes(raw[r:r + width], "little") for r in range(0, len(raw), width)]


def _mask_of(positions: list[int], n: int) -> int:
    """The bit mask of `positions` (out of n)."""
    if len(positions) < 16:
        return sum(1 << i for i in positions)
    flags = np.zeros(n, dtype=bool)
    flags[positions] = True
    return _masks(flags[None, :])[0]


@dataclass(frozen=True, slots=True)
class _BandsOf:
    """One class's edges (length, gain, start) and the bands of its tables' values."""

    edges: tuple[_Edges, _Edges, _Edges]
    length: np.ndarray  # per state: the band of its length, of its g, of its h, and of
    gain: np.ndarray  # `least_g_with_h_above(g)`
    h: np.ndarray
    least: np.ndarray
    start: np.ndarray  # per job: the band of its remaining time at min


class _Bands:
    """The bands of several classes' tables on one set of edges, placed at the values of
    all of them: the bands only narrow down the jobs the rule checks one by one, so any
    edges give the same allocation (`_Edges`), and one set costs one pass for all."""

    def __init__(self, tables: Sequence[StateTables]) -> None:
        length = np.concatenate([t.length for t in tables])
        g = np.concatenate([t.g for t in tables])
        h = np.concatenate([t.h for t in tables])
        start = np.concatenate([t.start for t in tables])
        length_edges, gain_edges = _Edges(length), _Edges(np.concatenate([g, h]), also=[1.0])
        start_edges = _Edges(start)
        self.edges = (length_edges, gain_edges, start_edges)
        least = least_g_with_h_above_all(g)
        self.length, self.gain = length_edges.bands(length), gain_edges.bands(g)
        self.h = gain_edges.bands(h)
        self.least = np.where(least == np.inf, gain_edges.never(), gain_edges.bands(least))
        self.start = start_edges.bands(start)
        self.states = np.cumsum([0] + [len(t.length) for t in tables]).tolist()
        self.jobs = np.cumsum([0] + [len(t.start) for t in tables]).tolist()

    def part(self, k: int) -> _BandsOf:
        """Class k's bands."""
        s, e = self.states[k], self.states[k + 1]
        a, b = self.jobs[k], self.jobs[k + 1]
        return _BandsOf(self.edges, self.length[s:e], self.gain[s:e], self.h[s:e],
                        self.least[s:e], self.start[a:b])


class _Tournament:
    """The jobs in submit order (bit i of every mask is job i), the walk's takeovers,
    and the index the walk queries.

    Every state a job can be in (its size) has an entry in the state lists: length,
    g (gain relative to S(now)), h (relative to S(next)), the bands of its length and
    its g, and the g bands from which challengers may take over from it. `state[i]` is
    job i's current entry.

    `shorter[j]` is the mask of jobs whose current length band is below j, and
    `gain_from[j]` those whose g band is j or more: what the rule asks of a challenger
    is a lower bound on its g, whether it is shorter (g >= h of the incumbent) or as
    long (h > g of the incumbent, a bound on g by `least_g_with_h_above`). A job
    waiting is filed under its state at min, which is where it starts.
    `start_below[j]` holds the jobs whose remaining time at min is in a band below j.
    Masks hold jobs that left too: they are read through `running` and `waiting`.
    """

    def __init__(self, jobs: Sequence[Job], capacity: int,
                 readings: JobReadings | None = None,
                 tables: StateTables | None = None, bands: _BandsOf | None = None) -> None:
        """`jobs`: one class in submit order, each min within the capacity; each grows
        no further than its max lowered as by `without_slowdown` (`readings`, where the
        caller has them; or their `tables`, and the `bands` of those)."""
        self.jobs = jobs
        self.free = capacity
        n = len(jobs)
        if tables is None:
            tables = StateTables(jobs, capacity, readings)
        self.tables = tables
        if bands is None:
            bands = _Bands([tables]).part(0)
        self.length_edges, self.gain_edges, start_edges = bands.edges
        length_band, gain_band = self.length_band, self.gain_band = bands.length, bands.gain
        # Each job is filed under its first state (at min) while it waits.
        filed = np.maximum(tables.first, 0)
        empty = np.zeros(n, dtype=np.int64)
        # The masks, as rows of flags (row j, column i: job i is in mask j).
        self.shorter = self.length_edges.below(length_band[filed] if len(length_band) else empty)
        self.gain_from = self.gain_edges.at_least(gain_band[filed] if len(gain_band) else empty)
        self.start_band = bands.start
        self.start_below = start_edges.below(bands.start)
        # What a running incumbent in each state asks of a challenger besides its length,
        # g and h: where the masks of those that could take over from it start (shorter:
        # length band below its own; g >= own h: the g band of its h on; h > own g: the
        # g band of `least_g_with_h_above` on).
        self.h_band, self.least_band = bands.h, bands.least
        self.strong_band = self.gain_edges.band(1.0)  # g >= 1 exactly when the band is this or more
        self.times: dict[int, EpochTimes] = {}  # for sizes beyond the tables

    # ----- rare paths --------------------------------------------------------------------
    def _state_beyond(self, i: int, x: int) -> tuple[float, float, float, int, int, int, int]:
        """Job i's state at x workers, past its tabled sizes: length, g, h, and the bands
        of its length, g, h and `least_g_with_h_above(g)`."""
        job = self.jobs[i]
        length, g, h = state_at(job, self.times.setdefault(i, EpochTimes(job)), x)
        gain_edges = self.gain_edges
        least = least_g_with_h_above(g)
        return (length, g, h, self.length_edges.band(length), gain_edges.band(g),
                gain_edges.band(h),
                gain_edges.never() if least == math.inf else gain_edges.band(least))

    # ----- the rounds --------------------------------------------------------------------
    def run(self) -> list[int]:
        """Hand out the GPUs; each job's count, in submit order: compiled for many jobs
        where numba is installed (`afs_kernel`), else interpreted."""
        kernel = _kernel() if len(self.jobs) >= KERNEL_MIN_JOBS else None
        return self.run_interpreted() if kernel is None else self.run_compiled(kernel)

    def run_compiled(self, kernel: ModuleType) -> list[int]:
        """`run_interpreted`'s rounds in `afs_kernel.rounds`, which stops for each state
        past the tables: it is computed here and the rounds go on."""
        tables = self.tables
        n, tabled = len(self.jobs), len(tables.length)
        room = tabled + self.free + 1  # at most one state more a GPU handed out

        def widened(values: np.ndarray, dtype: type) -> np.ndarray:
            out = np.zeros(room, dtype=dtype)
            out[:tabled] = values
            return out

        floats = [widened(v, np.float64) for v in (tables.length, tables.g, tables.h)]
        bands = [widened(v, np.int64) for v in (
            self.length_band, self.gain_band, self.h_band, self.least_band)]
        reg = np.zeros(kernel.REGISTERS, dtype=np.int64)
        reg[kernel.FREE], reg[kernel.BY_MIN], reg[kernel.WAITING] = self.free, n, n
        reg[kernel.PENDING] = -1
        x = np.zeros(n, dtype=np.int64)
        state = tables.first.astype(np.int64)
        masks = [kernel.words(flags) for flags in (self.shorter, self.gain_from,
                                                   self.start_below)]
        waiting = kernel.words(np.ones((1, n), dtype=bool))[0]
        running = np.zeros_like(waiting)
        ints = [np.asarray(v, dtype=np.int64) for v in (tables.lo, tables.end, tables.last)]
        start_band = self.start_band.astype(np.int64)
        chain, by_min = np.zeros(n + 1, dtype=np.int64), np.asarray(tables.by_min, dtype=np.int64)
        while kernel.rounds(reg, x, state, *ints, tables.start, start_band, *floats, *bands,
                            *masks, self.strong_band, waiting, running, chain, by_min):
            i = int(reg[kernel.PENDING])
            for column, value in zip(floats + bands, self._state_beyond(i, int(x[i])),
                                     strict=True):
                column[tabled] = value
            reg[kernel.NEW_STATE] = tabled
            tabled += 1
        return x.tolist()

    def run_interpreted(self) -> list[int]:
        """Hand out the GPUs; each job's count, in submit order.

        A round: (1) redo the walk after the first position that changed, keeping the
        takeovers before it (`chain`); (2) the winner, the last takeover, grows (a job
        at 0 takes its min); (3) jobs at 0 whose min no longer fits leave. The loop
        reads everything through locals: attribute reads would cost as much as the work.
        """
        tables = self.tables
        chain: list[int] = []  # the takeovers of the current walk, the winner last
        x = [0] * len(self.jobs)
        state: list[int] = tables.first.tolist()
        start: list[float] = tables.start.tolist()
        lows = tables.lo
        # Lists of numbers rather than a tuple per state: tens of thousands of tuples
        # kept set off garbage collections every call.
        length: list[float] = tables.length.tolist()
        gain: list[float] = tables.g.tolist()
        lower: list[float] = tables.h.tolist()
        h_band: list[int] = self.h_band.tolist()
        least_band: list[int] = self.least_band.tolist()
        length_band: list[int] = self.length_band.tolist()
        gain_band: list[int] = self.gain_band.tolist()
        columns = (length, gain, lower, length_band, gain_band, h_band, least_band)
        start_band: list[int] = self.start_band.tolist()
        shorter, gain_from = _masks(self.shorter), _masks(self.gain_from)
        start_below, strong = _masks(self.start_below), self.strong_band
        # Jobs at 0 by min, largest last: they leave once their block cannot fit.
        by_min, end = list(tables.by_min), tables.end
        # A job's tabled states are consecutive entries: the next size is the next entry
        # up to its last tabled one; past them, each is computed and appended.
        last_tabled = tables.last
        free = self.free
        waiting, running = (1 << len(x)) - 1, 0
        position = 0
        while True:
            # (1) The last takeover before `position` stands, and no job between it and
            # `position` took over from it (none of them changed): the walk goes on
            # from `position`. With no takeover left, it starts at the first job.
            if chain:
                incumbent, after = chain[-1], position - 1
            else:
                rest = (running | waiting) >> position << position
                if not rest:
                    break
                incumbent = after = (rest & -rest).bit_length() - 1
                chain.append(incumbent)
            while True:
                # The first job after `after` that takes over from `incumbent`: the masks
                # give every job that could (one in the same band as a threshold may fall
                # either side of it), the rule decides, in submit order. Masks are shifted
                # down to the first position still to check (`base`), which keeps the
                # numbers short and every one non-negative.
                base = after + 1
                if x[incumbent] == 0:  # a job at 0 shorter at min, or one running at g >= 1
                    own = start[incumbent]
                    maybe = ((waiting & start_below[start_band[incumbent] + 1])
                             | (running & gain_from[strong])) >> base
                    while maybe:
                        low = maybe & -maybe
                        c = base + low.bit_length() - 1
                        if (start[c] < own) if x[c] == 0 else (gain[state[c]] >= 1.0):
                            break
                        maybe ^= low
                    else:
                        break  # no job takes over: the incumbent wins
                else:  # at 0 when g < 1; shorter with g_c >= h; as long with h_c > g
                    j = state[incumbent]
                    own, g, h = length[j], gain[j], lower[j]
                    maybe = (((shorter[length_band[j] + 1] & gain_from[h_band[j]])
                              | gain_from[least_band[j]]) & running) >> base
                    if waiting and g < 1.0 and (first := waiting >> base):
                        # The first job at 0 takes over unless a running job before it
                        # does: it is the last candidate, and `x[c] == 0` passes it (what
                        # the rule reads of its state is read and not used).
                        first &= -first
                        maybe = (maybe & (first - 1)) | first
                    while maybe:
                        low = maybe & -maybe
                        c = base + low.bit_length() - 1
                        j = state[c]
                        if ((gain[j] >= h) if length[j] < own else (lower[j] > g)) or x[c] == 0:
                            break
                        maybe ^= low
                    else:
                        break  # no job takes over: the incumbent wins
                chain.append(c)
                incumbent = after = c
            if free <= 0:
                break
            # (2) The winner grows. Its bit flips in the masks of the bands it moved past
            # (and in `waiting` or `running`, where it is set).
            winner = position = chain.pop()
            bit = 1 << winner
            if x[winner] == 0:
                x[winner] = lows[winner]
                free -= lows[winner]
                waiting ^= bit
                if state[winner] >= 0:  # filed under its state at min already
                    running |= bit
            else:
                grown = x[winner] = x[winner] + 1
                free -= 1
                if grown >= end[winner]:
                    running ^= bit
                else:
                    old = state[winner]
                    if old < last_tabled[winner]:
                        new = state[winner] = old + 1
                    else:
                        for column, value in zip(columns, self._state_beyond(winner, grown),
                                                 strict=True):
                            column.append(value)
                        new = state[winner] = len(length) - 1
                    a, b = length_band[old], length_band[new]
                    if a == b + 1:  # one band down, the common move
                        shorter[a] ^= bit
                    elif a != b:
                        for band in range(a + 1, b + 1) if a < b else range(b + 1, a + 1):
                            shorter[band] ^= bit
                    a, b = gain_band[old], gain_band[new]
                    if a == b + 1:
                        gain_from[a] ^= bit
                    elif a != b:
                        for band in range(a + 1, b + 1) if a < b else range(b + 1, a + 1):
                            gain_from[band] ^= bit
            # (3) Jobs at 0 whose min no longer fits leave; the walk is redone from the
            # earliest of them if it comes before the winner.
            if waiting and lows[by_min[-1]] > free:  # (jobs at 0 are all in `by_min`)
                gone = []
                while by_min and lows[by_min[-1]] > free:
                    i = by_min.pop()
                    if x[i] == 0:
                        gone.append(i)
                if gone:
                    waiting &= ~_mask_of(gone, len(x))
                    position = min(position, min(gone))
                    while chain and chain[-1] >= position:
                        chain.pop()
        return x
