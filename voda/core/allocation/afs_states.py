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

import bisect
from collections.abc import Sequence

import numpy as np

from voda.core.estimate import EpochTimes, epoch_time_runs
from voda.core.model import Job

LENGTH_DIGITS = 6
GAIN_DIGITS = 12

# Sizes tabled per job beyond its min before the tournament (at least): a job that
# grows past them has its next states computed one at a time (`state_at`).
MIN_TABLED = 4

# Bands of gain (an index for the walk): a value's band is the number of these
# edges above it, so band 0 is g >= 1 and every band is a quarter of an octave.
# Any descending edges would do; the band only has to fall as the value rises.
BANDS_PER_OCTAVE = 4
_EDGES = [2.0 ** (-k / BANDS_PER_OCTAVE) for k in range(40 * BANDS_PER_OCTAVE)][::-1]
NO_GAIN_BAND = len(_EDGES)  # gains of at most 0 (and tiny ones) share the last band

State = tuple[float, float, float, int, int]  # length, g, h, band of g, band of h


def band_of(value: float) -> int:
    return NO_GAIN_BAND - bisect.bisect_right(_EDGES, value)


def rounded_as_python(values: np.ndarray, digits: int) -> np.ndarray:
    """`round(v, digits)` for every v, as floats.

    Python rounds the exact binary value of v to `digits` decimals and converts that
    decimal back to the nearest float. With P = v * 10**digits computed in floating
    point (error at most 2**-8 while |P| < 2**46), an integer q within 0.48 of P is the
    unique nearest integer to the exact product, so the decimal is q / 10**digits and
    its nearest float is the correctly rounded quotient q / 10**digits. Values not so
    placed (near a tie, huge, not finite) are rounded by Python itself.
    """
    scale = 10.0**digits
    scaled = values * scale
    nearest = np.rint(scaled)
    out = nearest / scale
    with np.errstate(invalid="ignore"):
        unsure = ~((np.abs(scaled - nearest) <= 0.48) & (np.abs(scaled) < 2.0**46))
    for k in np.flatnonzero(unsure).tolist():
        out[k] = round(float(values[k]), digits)
    return out


def state_at(job: Job, times: EpochTimes, x: int) -> State:
    """The job's state at x workers (x below max), computed on its own."""
    now, after = times(x), times(x + 1)
    g = round(now / after - 1.0, GAIN_DIGITS)
    h = round(1.0 - after / now, GAIN_DIGITS)
    return (round(job.remaining_epochs * now, LENGTH_DIGITS), g, h, band_of(g), band_of(h))


class StateTables:
    """Per job: its remaining time at min (`start`) and its states at the first sizes.

    The states of job i at x = lo[i] .. lo[i] + tabled[i] - 1 are
    `states[offset[i] + x - lo[i]]`; sizes from `end[i]` on are never asked for (the
    job is at max, or holds every GPU).
    """

    def __init__(self, jobs: Sequence[Job], capacity: int) -> None:
        lo = [job.min_workers for job in jobs]
        end = [min(job.max_workers, capacity) for job in jobs]
        span = max(MIN_TABLED, -(-4 * capacity // max(1, len(jobs))))
        tabled = [min(e - m, span) for m, e in zip(lo, end, strict=True)]
        # Epoch times at lo .. lo + tabled (the last one for the gain of the last state).
        counts = np.array([n + 1 for n in tabled], dtype=np.int64)
        times = epoch_time_runs(jobs, lo, counts.tolist())
        ends = np.cumsum(counts)
        firsts = ends - counts
        remaining = np.array([job.remaining_epochs for job in jobs], dtype=float)
        self.start: list[float] = rounded_as_python(
            remaining * times[firsts], LENGTH_DIGITS).tolist()
        # States: every time but each job's last, paired with the time after it.
        is_now = np.ones(len(times), dtype=bool)
        is_now[ends - 1] = False
        now, after = times[is_now], times[np.flatnonzero(is_now) + 1]
        owner = np.repeat(np.arange(len(jobs)), tabled)
        with np.errstate(divide="ignore", invalid="ignore"):
            length = rounded_as_python(remaining[owner] * now, LENGTH_DIGITS)
            g = rounded_as_python(now / after - 1.0, GAIN_DIGITS)
            h = rounded_as_python(1.0 - after / now, GAIN_DIGITS)
        edges = np.array(_EDGES)
        band_g = NO_GAIN_BAND - np.searchsorted(edges, g, side="right")
        band_h = NO_GAIN_BAND - np.searchsorted(edges, h, side="right")
        self.states: list[State] = list(zip(length.tolist(), g.tolist(), h.tolist(),
                                            band_g.tolist(), band_h.tolist(), strict=True))
        self.offset = (np.cumsum(counts - 1) - (counts - 1)).tolist()
        self.tabled = tabled
        self.lo = lo
        self.end = end
