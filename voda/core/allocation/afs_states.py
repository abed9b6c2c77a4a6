"""What the AFS-L tournament reads of a job at each size, computed for all jobs at once.

For a running job at x workers the pairwise rule reads its remaining time at x
(`length`), its gain relative to S(x), g = t(x)/t(x+1) - 1, and relative to
S(x+1), h = 1 - t(x+1)/t(x) (t: epoch time). These depend on the job and x
alone, so they are tabled before the tournament starts: one batch of epoch
times (`epoch_time_runs`) and one batch of quantisations, where computing them
job by job, round by round, cost more than the whole tournament walk.

Quantisation keeps ties exact (a linear job's g is exactly 1, two equal lengths
are equal): lengths to microseconds and gains to 1e-12, with Python's `round`,
which rounds the exact binary value half-to-even. `rounded_as_python` gives the
same floats for a whole array and falls back to `round` for the values it cannot
prove it rounds the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from operator import attrgetter

import numpy as np

from voda.core.estimate import EpochTimes, epoch_time_runs, growth_limits, observation_points
from voda.core.model import Job

_FIELDS = attrgetter("min_workers", "max_workers", "epochs", "completed_epochs")

LENGTH_DIGITS = 6
GAIN_DIGITS = 12

# Sizes tabled per job: every size from its min below its end, where all jobs' together
# are at most about twice the capacity more than one a job (a call hands out at most the
# capacity); else its min and, shared out, about twice the capacity more. A job that grows
# past its tabled sizes has its next states computed one at a time (`state_at`).
GROWTH_TABLED = 2

# 10**d exactly, for the digits whose scale is exact in a float.
_POWERS = np.array([float(10**d) for d in range(23)])


def rounded_as_python(values: np.ndarray, digits: int | np.ndarray) -> np.ndarray:
    """`round(v, digits)` for every v, as floats (`digits`: one for all, or one per value,
    each from 0 to 22).

    Python rounds the exact binary value of v to `digits` decimals and converts that
    decimal back to the nearest float. P = v * 10**digits computed in floating point is
    within |P| * 2**-52 of the exact product, so an integer q nearer to P than 0.5 less
    that is the exact product's nearest integer, no tie: the decimal is q / 10**digits,
    and its nearest float is the correctly rounded quotient of the exact q by 10**digits.
    The few values not so placed (near a tie, huge, not finite) are rounded by Python.
    """
    scale = 10.0**digits if isinstance(digits, int) else _POWERS[digits]
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = values * scale
        nearest = np.rint(scaled)
        out = nearest / scale
        size = np.abs(scaled)
        sure = (np.abs(scaled - nearest) < 0.5 - size * 2.0**-51) & (size < 2.0**50)
    for k in np.flatnonzero(~sure).tolist():
        out[k] = round(float(values[k]), digits if isinstance(digits, int) else int(digits[k]))
    return out


def state_at(job: Job, times: EpochTimes, x: int) -> tuple[float, float, float]:
    """The job's length, g and h at x workers (x below max), computed on their own."""
    now, after = times(x), times(x + 1)
    return (round(job.remaining_epochs * now, LENGTH_DIGITS),
            round(now / after - 1.0, GAIN_DIGITS), round(1.0 - after / now, GAIN_DIGITS))


class JobReadings:
    """What the tables read of each job, read once: its min (`lo`), its max lowered to
    where its epoch time first rises from min (`top`: `base.without_slowdown`'s max, from
    `estimate.growth_limits`), its epochs left, and its measured epoch times (`points`).
    One pass over the jobs for the four numbers: each pass reads every job again, in
    submit order rather than memory order, and costs its cache misses."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        n = len(jobs)
        fields = np.fromiter(chain.from_iterable(map(_FIELDS, jobs)), dtype=float,
                             count=4 * n).reshape(n, 4)
        self.lo = fields[:, 0].astype(np.int64)
        self.points = observation_points(jobs)
        self.top = growth_limits(self.points, self.lo, fields[:, 1].astype(np.int64))
        left = fields[:, 2] - fields[:, 3]
        self.remaining = np.where(left > 0.0, left, 0.0)  # Job.remaining_epochs


class StateTables:
    """Per job: its remaining time at min (`start`) and its states at the first sizes.

    Job i at x = lo[i] .. lo[i] + tabled[i] - 1 workers has length, g and h
    `length[k]`, `g[k]`, `h[k]` with k = offset[i] + x - lo[i] (arrays); sizes from
    `end[i]` on are never asked for (the job is at max, or holds every GPU).
    """

    lo: list[int]
    end: list[int]
    tabled: list[int]
    offset: list[int]
    first: np.ndarray
    last: list[int]
    by_min: list[int]
    start: np.ndarray
    length: np.ndarray
    g: np.ndarray
    h: np.ndarray

    def __init__(self, jobs: Sequence[Job], capacity: int,
                 readings: JobReadings | None = None) -> None:
        _Columns([(jobs, capacity)], readings).fill(self, 0)

    @classmethod
    def many(cls, problems: Sequence[tuple[Sequence[Job], int]]) -> list[StateTables]:
        """The tables of each (jobs, capacity) problem, every problem's jobs worked out
        together (each value depends on its job and its problem's capacity alone: the
        same tables as one by one, for one pass of NumPy calls instead of one a problem).
        Every problem has jobs."""
        columns = _Columns(problems)
        out = []
        for k in range(len(problems)):
            tables = cls.__new__(cls)
            columns.fill(tables, k)
            out.append(tables)
        return out


class _Columns:
    """The state tables of several problems' jobs, one after another: each job's sizes
    tabled as its own problem's capacity allows, then one batch of epoch times."""

    def __init__(self, problems: Sequence[tuple[Sequence[Job], int]],
                 readings: JobReadings | None = None) -> None:
        jobs = [job for members, _ in problems for job in members]
        sizes = np.array([len(members) for members, _ in problems], dtype=np.int64)
        caps = np.array([capacity for _, capacity in problems], dtype=np.int64)
        read = JobReadings(jobs) if readings is None else readings
        lo = self.lo = read.lo
        end = self.end = np.minimum(read.top, np.repeat(caps, sizes))  # no further than top
        tabled = end - lo
        if len(jobs):  # a problem's sizes are cut where all of them would be too many
            over = (np.add.reduceat(tabled, np.cumsum(sizes) - sizes)
                    > GROWTH_TABLED * caps + sizes)
            if over.any():
                cut = 1 + -(-GROWTH_TABLED * caps // np.maximum(1, sizes))
                limit = np.where(over, cut, np.iinfo(np.int64).max)
                tabled = np.minimum(tabled, np.repeat(limit, sizes))
        self.tabled = tabled
        self.offset = np.cumsum(tabled) - tabled
        self.job_bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        self.state_bounds = np.concatenate([[0], np.cumsum(tabled)])[self.job_bounds].tolist()
        # Epoch times at lo .. lo + tabled (the last one for the gain of the last state).
        counts = tabled + 1
        times = epoch_time_runs(jobs, lo, counts, points=read.points)
        ends = np.cumsum(counts)
        remaining = read.remaining
        self.start = rounded_as_python(remaining * times[ends - counts], LENGTH_DIGITS)
        # States: every time but each job's last, paired with the time after it.
        is_now = np.ones(len(times), dtype=bool)
        is_now[ends - 1] = False
        now_at = np.flatnonzero(is_now)
        now, after = times[now_at], times[now_at + 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            self.length = rounded_as_python(
                np.repeat(remaining, tabled) * now, LENGTH_DIGITS)
            self.g = rounded_as_python(now / after - 1.0, GAIN_DIGITS)
            self.h = rounded_as_python(1.0 - after / now, GAIN_DIGITS)

    def fill(self, tables: StateTables, k: int) -> None:
        """Problem k's tables, its states numbered from 0."""
        a, b = self.job_bounds[k], self.job_bounds[k + 1]
        s, e = self.state_bounds[k], self.state_bounds[k + 1]
        lo, tabled = self.lo[a:b], self.tabled[a:b]
        offset = self.offset[a:b] - s
        tables.lo = lo.tolist()
        tables.end = self.end[a:b].tolist()
        tables.tabled = tabled.tolist()
        tables.offset = offset.tolist()
        # Each job's first state (at min), or -1 for a job that has none (it never runs
        # below max); each job's last tabled state.
        tables.first = np.where(tabled > 0, offset, -1)
        tables.last = (offset + tabled - 1).tolist()
        tables.by_min = np.argsort(lo, kind="stable").tolist()  # the jobs by min, stable
        tables.start = self.start[a:b]
        tables.length, tables.g, tables.h = self.length[s:e], self.g[s:e], self.h[s:e]

