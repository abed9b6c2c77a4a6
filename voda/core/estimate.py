"""Speed estimates from observed epoch times.

A job reports seconds per epoch at some worker counts. From those we estimate
the epoch time at any count k, working in throughput x(k) = 1 / t(k) (speedup
S(k) = x(k) / x(1) is proportional to it):

- observed counts are used as observed;
- between two observed counts, throughput is interpolated linearly;
- outside the observed range, the shape of Amdahl's law t(k) = serial + parallel / k,
  fitted to every observation by least squares, is *anchored at the nearest
  observation*: x(k) = x_near * (serial + parallel / k_near) / (serial + parallel / k).
  One observation fits a purely parallel law (linear speedup from it).
- beyond the largest observed count the speed-up stays concave: each extra worker
  adds at most what a worker added on the last measured segment, and nothing once
  that segment measured a slow-down (no speed-up is ever predicted past one).

So the estimate is continuous at the edge of what was measured, and the marginal
gain of a worker beyond it never exceeds the last measured marginal gain.

With no observation at all speed is unknown and speedup is taken as linear,
with `default_epoch_seconds` at one worker for remaining-time estimates.
See docs/design/001-allocation.md.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from types import MappingProxyType

import numpy as np

from voda.core.model import Job

DEFAULT_EPOCH_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class SpeedModel:
    """Epoch time as a function of worker count, fitted once per job snapshot."""

    counts: tuple[int, ...]  # observed worker counts, ascending
    times: tuple[float, ...]  # seconds per epoch at those counts
    serial: float  # Amdahl shape, for extrapolation
    parallel: float
    known: bool
    # Most throughput one worker may add beyond the largest observed count (inf: no cap).
    last_slope: float = math.inf

    def epoch_time(self, workers: int) -> float:
        if workers <= 0:
            return float("inf")
        if not self.known:
            return self.parallel / workers
        i = bisect.bisect_left(self.counts, workers)
        if i < len(self.counts) and self.counts[i] == workers:
            return self.times[i]
        if 0 < i < len(self.counts):
            k0, k1 = self.counts[i - 1], self.counts[i]
            x0, x1 = 1.0 / self.times[i - 1], 1.0 / self.times[i]
            x = x0 + (x1 - x0) * (workers - k0) / (k1 - k0)
            return 1.0 / x
        return 1.0 / self._extrapolated_throughput(i, workers)

    def epoch_times(self, first: int, count: int) -> list[float]:
        """`[self.epoch_time(k) for k in range(first, first + count)]`, the counts'
        place among the observed ones found by walking them rather than by a search each."""
        counts, times = self.counts, self.times
        if not self.known or not counts or first <= 0:
            return [self.epoch_time(k) for k in range(first, first + count)]
        n = len(counts)
        i = bisect.bisect_left(counts, first)
        out: list[float] = []
        for workers in range(first, first + count):
            while i < n and counts[i] < workers:
                i += 1
            if i < n and counts[i] == workers:
                out.append(times[i])
            elif 0 < i < n:
                k0, k1 = counts[i - 1], counts[i]
                x0, x1 = 1.0 / times[i - 1], 1.0 / times[i]
                x = x0 + (x1 - x0) * (workers - k0) / (k1 - k0)
                out.append(1.0 / x)
            else:
                out.append(1.0 / self._extrapolated_throughput(i, workers))
        return out

    def _extrapolated_throughput(self, i: int, workers: int) -> float:
        """Throughput at `workers` outside [counts[0], counts[-1]] (i: the bisect index)."""
        near = 0 if i == 0 else len(self.counts) - 1
        k_near, x_near = self.counts[near], 1.0 / self.times[near]
        ratio = self._amdahl_time(k_near) / self._amdahl_time(workers)
        if i == 0:  # fewer workers than ever measured
            return x_near * ratio
        gain = min(x_near * (ratio - 1.0), self.last_slope * (workers - k_near))
        return x_near + max(gain, 0.0)

    def _amdahl_time(self, workers: int) -> float:
        return self.serial + self.parallel / workers

    def speedup(self, workers: int) -> float:
        """S(k) relative to one worker; S(0) = 0."""
        if workers <= 0:
            return 0.0
        return self.epoch_time(1) / self.epoch_time(workers)


def fit_speed(
    epoch_time_by_workers: Mapping[int, float],
    default_epoch_seconds: float = DEFAULT_EPOCH_SECONDS,
) -> SpeedModel:
    return _model_of_points(epoch_time_by_workers, default_epoch_seconds, _fit_and_slope)


Fit = Callable[[tuple[int, ...], tuple[float, ...]], tuple[float, float, float]]


def _model_of_points(epoch_time_by_workers: Mapping[int, float], default_epoch_seconds: float,
                     fit: Fit) -> SpeedModel:
    """The SpeedModel of the measured points a model keeps, fitted by `fit` (serial,
    parallel, last slope)."""
    points = sorted((k, t) for k, t in epoch_time_by_workers.items() if k >= 1 and t > 0)
    if not points:
        return SpeedModel((), (), 0.0, default_epoch_seconds, known=False)
    counts = tuple(k for k, _ in points)
    times = tuple(t for _, t in points)
    serial, parallel, last_slope = fit(counts, times)
    return SpeedModel(counts, times, serial, parallel, known=True, last_slope=last_slope)


def _fit_and_slope(counts: tuple[int, ...], times: tuple[float, ...]
                   ) -> tuple[float, float, float]:
    serial, parallel = _amdahl_fit(counts, times)
    last_slope = math.inf
    if len(counts) >= 2:
        last_slope = max(0.0, (1.0 / times[-1] - 1.0 / times[-2]) / (counts[-1] - counts[-2]))
    return serial, parallel, last_slope


def _amdahl_fit(counts: tuple[int, ...], times: tuple[float, ...]) -> tuple[float, float]:
    """Least-squares t = a + b/k with a, b >= 0 (closed form for two unknowns)."""
    if len(counts) == 1:
        return 0.0, times[0] * counts[0]
    xs = [1.0 / k for k in counts]
    n = len(xs)
    mx, my = sum(xs) / n, sum(times) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, times, strict=True))
    b = sxy / sxx if sxx > 0 else 0.0
    a = my - b * mx
    if b <= 0:  # more workers never helped: flat epoch time
        return my, 0.0
    if a < 0:  # superlinear observations: fall back to a purely parallel fit
        b = sum(x * y for x, y in zip(xs, times, strict=True)) / sum(x * x for x in xs)
        return 0.0, b
    return a, b


def amdahl_fits(point_job: np.ndarray, point_k: np.ndarray, point_t: np.ndarray,
                jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`amdahl_fits_together`'s values, one job at a time in Python floats: a decision
    fits a few jobs, most of them with the very points they had at the last decision (so
    each job's fit is remembered by its points), and NumPy's cost per call outweighs
    the arithmetic."""
    first = np.searchsorted(point_job, jobs).tolist()
    size = np.searchsorted(point_job, jobs, side="right").tolist()
    ks, ts = point_k.tolist(), point_t.tolist()
    fits = [_fit_of_points(tuple(ks[lo:hi]), tuple(ts[lo:hi]))
            for lo, hi in zip(first, size, strict=True)]
    if not fits:
        return np.empty(0), np.empty(0), np.empty(0)
    serial, parallel, slope = (np.array(column, dtype=float) for column in zip(*fits, strict=True))
    return serial, parallel, slope


@functools.lru_cache(maxsize=8192)
def _fit_of_points(k: tuple[float, ...], t: tuple[float, ...]) -> tuple[float, float, float]:
    """(serial, parallel, last slope) of one job's points (counts ascending), as
    `amdahl_fits_together` works them out; it answers where Python's arithmetic would
    raise instead of giving an infinity or a NaN."""
    try:
        return _fit_in_python(k, t)
    except ArithmeticError:
        serial, parallel, slope = amdahl_fits_together(
            np.zeros(len(k), dtype=np.int64), np.array(k, dtype=float),
            np.array(t, dtype=float), np.zeros(1, dtype=np.int64))
        return float(serial[0]), float(parallel[0]), float(slope[0])


def _fit_in_python(k: tuple[float, ...], t: tuple[float, ...]) -> tuple[float, float, float]:
    m = len(k)
    if m == 1:
        return 0.0, t[0] * k[0], math.inf
    x = [1.0 / c for c in k]
    mx, my = _left_sum(x) / m, _left_sum(t) / m
    apart = [v - mx for v in x]
    sxx = _left_sum([v ** 2 for v in apart])
    sxy = _left_sum([v * (y - my) for v, y in zip(apart, t, strict=True)])
    b = sxy / sxx if sxx > 0 else 0.0
    a = my - b * mx
    last = (1.0 / t[-1] - 1.0 / t[-2]) / (k[-1] - k[-2])
    slope = last if last > 0.0 else 0.0
    if b <= 0:
        return my, 0.0, slope
    if a < 0:
        through_zero = (_left_sum([v * y for v, y in zip(x, t, strict=True)])
                        / _left_sum([v * v for v in x]))
        return 0.0, through_zero, slope
    return a, b, slope


def _left_sum(values: list[float] | tuple[float, ...]) -> float:
    """The values added left to right from the first (as `in_order` adds columns)."""
    total = values[0]
    for v in values[1:]:
        total += v
    return total


def amdahl_fits_together(point_job: np.ndarray, point_k: np.ndarray, point_t: np.ndarray,
                         jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`fit_speed`'s serial, parallel and last slope for each of `jobs` (ascending job
    numbers, each with a point), from the points of all jobs (`point_job` ascending, then
    `point_k`; counts >= 1 and times > 0, as fit_speed keeps them): the jobs with as many
    points fitted together, each sum taken in the same order, so the same values, to the
    last bit."""
    first = np.searchsorted(point_job, jobs)
    size = np.searchsorted(point_job, jobs, side="right") - first
    serial, parallel, slope = (np.empty(len(jobs)) for _ in range(3))
    for m in np.unique(size).tolist():
        at = np.flatnonzero(size == m)
        cells = first[at, None] + np.arange(m)
        k, t = point_k[cells], point_t[cells]
        if m == 1:
            serial[at], parallel[at], slope[at] = 0.0, t[:, 0] * k[:, 0], math.inf
            continue
        x = 1.0 / k
        mx, my = in_order(x) / m, in_order(t) / m
        # (x - mx) ** 2 as Python takes it (libm's pow), one value at a time
        apart = x - mx[:, None]
        square = np.array([v ** 2 for v in apart.ravel().tolist()]).reshape(apart.shape)
        sxx, sxy = in_order(square), in_order(apart * (t - my[:, None]))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            b = np.where(sxx > 0, sxy / sxx, 0.0)
            a = my - b * mx
            flat, superlinear = b <= 0, ~(b <= 0) & (a < 0)
            through_zero = in_order(x * t) / in_order(x * x)
            serial[at] = np.where(flat, my, np.where(superlinear, 0.0, a))
            parallel[at] = np.where(flat, 0.0, np.where(superlinear, through_zero, b))
            last = (1.0 / t[:, -1] - 1.0 / t[:, -2]) / (k[:, -1] - k[:, -2])
            slope[at] = np.where(last > 0.0, last, 0.0)  # max(0.0, last) as Python takes it
    return serial, parallel, slope


def in_order(columns: np.ndarray) -> np.ndarray:
    """Each row's sum, added left to right (as Python's sum), not pairwise."""
    total = columns[:, 0].copy()
    for c in range(1, columns.shape[1]):
        total += columns[:, c]
    return total


def speed_model(job: Job, default_epoch_seconds: float = DEFAULT_EPOCH_SECONDS) -> SpeedModel:
    return fit_speed(job.epoch_time_by_workers, default_epoch_seconds)


def throughput_speed_model(job: Job) -> SpeedModel | None:
    """Epoch time by count from the training throughput the job measured per layout
    (`Job.layout_throughput`, samples/s, its category's too), scaled to an epoch time it
    measured; None without a count that has both.

    Throughput is the hardware's speed at a count and stays put while the job trains; an
    epoch time can also change with the phase of training (a simulated epoch is a unit of
    progress: early ones take longer), so epoch times measured at different counts at
    different times do not compare, and an early slow epoch at a large count can make a
    count look slower than a smaller one. The epoch time at the job's current count (else
    at the largest count measured both ways) sets the scale: the time an epoch takes now.
    Each count's best layout counts (the allocation assumes the best even layout).
    """
    rates: dict[int, float] = {}
    for (workers, _nodes), rate in job.layout_throughput.items():
        if workers >= 1 and rate > 0:
            rates[workers] = max(rates.get(workers, 0.0), rate)
    observed = job.epoch_time_by_workers
    both = [k for k, seconds in observed.items() if k in rates and seconds > 0]
    if not both:
        return None
    anchor = job.current_workers if job.current_workers in both else max(both)
    samples = observed[anchor] * rates[anchor]  # samples in an epoch, at today's pace
    return fit_speed({k: samples / rate for k, rate in rates.items()})


def remaining_time(job: Job, workers: int, model: SpeedModel | None = None) -> float:
    """Estimated seconds to finish at `workers` (infinite at 0)."""
    m = model or speed_model(job)
    if job.remaining_epochs <= 0:
        return 0.0
    return job.remaining_epochs * m.epoch_time(workers)


class EpochTimes:
    """A job's epoch time by worker count, equal to `speed_model(job).epoch_time`.

    Observed counts return their observation and a job with no observation the
    default time over the workers, as the fitted model would; the model is
    fitted only when another count is asked for, and then once.
    """

    __slots__ = ("_job", "_model")

    def __init__(self, job: Job) -> None:
        self._job = job
        self._model: SpeedModel | None = None

    def __call__(self, workers: int) -> float:
        observed = self._job.epoch_time_by_workers
        if not observed:
            return DEFAULT_EPOCH_SECONDS / workers if workers > 0 else float("inf")
        seconds = observed.get(workers)
        if seconds is not None and workers >= 1 and seconds > 0:
            return seconds
        if self._model is None:
            self._model = speed_model(self._job)
        return self._model.epoch_time(workers)


def epoch_time_at(job: Job, workers: int) -> float:
    """`EpochTimes(job)(workers)` for one count, without the object."""
    observed = job.epoch_time_by_workers
    if not observed:
        return DEFAULT_EPOCH_SECONDS / workers if workers > 0 else float("inf")
    seconds = observed.get(workers)
    if seconds is not None and workers >= 1 and seconds > 0:
        return seconds
    return speed_model(job).epoch_time(workers)


def _turning_points(job: Job, lo: int, hi: int) -> list[int]:
    """`lo`, the counts measured between `lo` and `hi`, and `hi` (lo <= hi), ascending.

    Between two consecutive ones the estimate is monotone: below the smallest measured
    count it follows Amdahl's shape (more workers, never slower); between two measured
    counts throughput is linear in the count; beyond the largest it never slows down.
    So the estimate over [lo, hi] is least, and first rises, at one of these counts.
    """
    inner = sorted(k for k, t in job.epoch_time_by_workers.items() if lo < k < hi and t > 0)
    return [lo, *inner, hi] if hi > lo else [lo]


# What never_slower and growth_limit read off a Job's measured epoch times, by id() of
# the read-only map: a Job's map is its own copy (Job.__post_init__, the engine's
# snapshots), handed again while the job measures nothing new, so the answer is worked
# out once per map rather than per job per decision. Held maps keep their ids; the memo
# starts over when it holds _MEMO_SIZE of them.
_MEMO_SIZE = 8192
_never_slower_memo: dict[int, tuple[Mapping[int, float], bool]] = {}
# Read directly by a caller that asks of many jobs in a loop (fill_at_rigid_size): a hit,
# `kept[0] is job.epoch_time_by_workers`, is never_slower's answer without its call.
NEVER_SLOWER_KNOWN = _never_slower_memo
_growth_memo: dict[int, tuple[Mapping[int, float], int, int, int]] = {}


def never_slower(job: Job) -> bool:
    """Whether no measured count is slower than a smaller measured one (true with none
    measured): then the estimate never rises with the count, anywhere (Amdahl's shape
    below the measured counts, linear throughput between, no slow-down beyond)."""
    observed = job.epoch_time_by_workers
    if type(observed) is not MappingProxyType:  # a map that may change: read each time
        return never_slower_of(observed)
    kept = _never_slower_memo.get(id(observed))
    if kept is not None and kept[0] is observed:
        return kept[1]
    answer = never_slower_of(observed)
    if len(_never_slower_memo) >= _MEMO_SIZE:
        _never_slower_memo.clear()
    _never_slower_memo[id(observed)] = (observed, answer)
    return answer


def never_slower_of(observed: Mapping[int, float]) -> bool:
    """`never_slower` of the measured epoch times themselves (no memo)."""
    before = math.inf
    for k, seconds in sorted(observed.items()):
        if k >= 1 and seconds > 0:
            if seconds > before:
                return False
            before = seconds
    return True


def fastest_count(job: Job, lo: int, hi: int) -> int:
    """The largest count in [lo, hi] (lo <= hi) whose estimated epoch time is least: no
    count of the range is faster, and no smaller one as fast. `hi` when the job has
    measured nothing (linear speedup)."""
    if hi <= lo or never_slower(job):
        return max(lo, hi)
    times = EpochTimes(job)
    best, least = lo, math.inf
    for k in _turning_points(job, lo, hi):
        seconds = times(k)
        if seconds <= least:
            best, least = k, seconds
    return best


def growth_limit(job: Job, lo: int, hi: int) -> int:
    """The largest count n in [lo, hi] (lo <= hi) up to which the estimated epoch time
    never rises (t(k + 1) <= t(k) for lo <= k < n): how far a job grown one GPU at a time
    from `lo` may grow before a GPU more would slow it down. `hi` when the job has
    measured nothing (linear speedup), and whenever no measured slow-down lies in between.

    Read off the measured counts alone, without fitting a model: below the smallest the
    estimate never rises (Amdahl's shape), beyond the largest neither; between two
    measured counts throughput is linear in the count, so the estimate rises all along a
    segment whose far end is slower than its near end, from right after the near end
    (or from `lo`, inside it)."""
    observed = job.epoch_time_by_workers
    if not observed or hi <= lo:
        return max(lo, hi)
    if type(observed) is not MappingProxyType:  # a map that may change: read each time
        return growth_limit_of(observed, lo, hi)
    kept = _growth_memo.get(id(observed))
    if kept is not None and kept[0] is observed and kept[1] is lo and kept[2] is hi:
        return kept[3]  # the same counts (`is`: small ints; others are worked out again)
    answer = growth_limit_of(observed, lo, hi)
    if len(_growth_memo) >= _MEMO_SIZE:
        _growth_memo.clear()
    _growth_memo[id(observed)] = (observed, lo, hi, answer)
    return answer


def growth_limit_of(observed: Mapping[int, float], lo: int, hi: int) -> int:
    """`growth_limit` of the measured epoch times themselves, not empty, and lo < hi (no
    memo)."""
    before: tuple[int, float] | None = None
    for k, seconds in sorted(observed.items()):
        if k < 1 or not seconds > 0:
            continue
        if before is not None and k > lo and seconds > before[1]:
            return max(before[0], lo)
        if k >= hi:
            break
        before = (k, seconds)
    return hi


_OBSERVED = attrgetter("epoch_time_by_workers")
# Job keeps its epoch times in a MappingProxyType (Job.__post_init__): its own `values`
# skips the look-up by name that methodcaller makes on every job.
_VALUES = MappingProxyType.values


# Up to this many epoch times in all, `epoch_time_runs` asks each job's SpeedModel in
# Python: NumPy's cost per call (about 0.1 ms) is more than the work for these.
SMALL_RUNS = 256
_model_memo: dict[tuple[int, float], tuple[Mapping[int, float], SpeedModel]] = {}


def epoch_time_runs_one_by_one(
    jobs: Sequence[Job], first: Sequence[int] | np.ndarray, count: Sequence[int] | np.ndarray,
    default_epoch_seconds: float = DEFAULT_EPOCH_SECONDS,
) -> np.ndarray:
    """`epoch_time_runs`'s values from each job's `fit_speed` model (what `epoch_time_at`
    reads), the model kept per read-only epoch-time map as `never_slower`'s answer is."""
    out: list[float] = []
    for job, lo, n in zip(jobs, _as_list(first), _as_list(count), strict=True):
        if n > 0:
            out.extend(_kept_model(job.epoch_time_by_workers, default_epoch_seconds)
                       .epoch_times(lo, n))
    return np.array(out, dtype=float)


def _fit_speed_of_kept_points(observed: Mapping[int, float],
                              default_epoch_seconds: float) -> SpeedModel:
    """`fit_speed(observed)` with the fit remembered by the points (`_fit_of_points`,
    whose sums run from the first term rather than from 0: the same values)."""
    return _model_of_points(observed, default_epoch_seconds, _fit_of_points)


def _as_list(values: Sequence[int] | np.ndarray) -> list[int]:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _kept_model(observed: Mapping[int, float], default_epoch_seconds: float) -> SpeedModel:
    if type(observed) is not MappingProxyType:  # a map that may change: fit each time
        return fit_speed(observed, default_epoch_seconds)
    key = (id(observed), default_epoch_seconds)
    kept = _model_memo.get(key)
    if kept is not None and kept[0] is observed:
        return kept[1]
    model = _fit_speed_of_kept_points(observed, default_epoch_seconds)
    if len(_model_memo) >= _MEMO_SIZE:
        _model_memo.clear()
    _model_memo[key] = (observed, model)
    return model


Points = tuple[np.ndarray, np.ndarray, np.ndarray]


def observation_points(jobs: Sequence[Job]) -> Points:
    """The measured epoch times of all jobs that a model keeps (count >= 1, seconds > 0),
    as three arrays: the job's index, the count, the seconds; job after job."""
    observed = list(map(_OBSERVED, jobs))
    sizes = list(map(len, observed))
    point_k = np.fromiter(chain.from_iterable(observed), dtype=float, count=sum(sizes))
    point_t = np.fromiter(chain.from_iterable(map(_VALUES, observed)), dtype=float,
                          count=len(point_k))
    point_job = np.repeat(np.arange(len(jobs)), sizes)
    keep = (point_k >= 1) & (point_t > 0)
    return point_job[keep], point_k[keep], point_t[keep]


def growth_limits(points: Points, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """`growth_limit(job, lo[i], hi[i])` of every job i at once, read off its
    `observation_points`: hi, or max(lo, hi) where hi <= lo or nothing is measured, unless
    a measured count k > lo is slower than the measured count before it, k', while k' <
    hi (`growth_limit_of` stops at the first count >= hi): then max(k', lo) for the first
    such k."""
    point_job, point_k, point_t = points
    out = np.maximum(lo, hi)
    order = np.lexsort((point_k, point_job))
    job, k, t = point_job[order], point_k[order], point_t[order]
    after = job[1:]
    rises = np.flatnonzero((after == job[:-1]) & (t[1:] > t[:-1]) & (k[1:] > lo[after])
                           & (k[:-1] < hi[after]) & (hi[after] > lo[after]))
    if len(rises):
        first = rises[np.unique(after[rises], return_index=True)[1]]  # each job's first
        rising = after[first]
        out[rising] = np.maximum(k[first].astype(np.int64), lo[rising])
    return out


def epoch_time_runs(
    jobs: Sequence[Job], first: Sequence[int] | np.ndarray, count: Sequence[int] | np.ndarray,
    default_epoch_seconds: float = DEFAULT_EPOCH_SECONDS, points: Points | None = None,
) -> np.ndarray:
    """Epoch times of each job i at first[i], first[i] + 1, ... (count[i] worker counts,
    first[i] >= 1), concatenated job after job (`points`: the jobs'
    `observation_points`, where the caller has them).

    Each value is bit for bit `epoch_time_at(job, k)`: the same floating-point
    operations in the same order, done for all jobs at once. The model is fitted only
    for the jobs asked for counts outside what they observed.
    """
    if sum(count) <= SMALL_RUNS:
        return epoch_time_runs_one_by_one(jobs, first, count, default_epoch_seconds)
    n = len(jobs)
    asked = np.asarray(count, dtype=np.int64)
    job = np.repeat(np.arange(n), asked)
    starts = np.cumsum(asked) - asked
    workers = (np.repeat(np.asarray(first, dtype=np.int64) - starts, asked)
               + np.arange(len(job))).astype(float)
    # Observations of all jobs (the ones a model keeps), keyed by (job, count) so that
    # one search finds, for every asked count, the first observation at or above it.
    point_job, point_k, point_t = observation_points(jobs) if points is None else points
    top = max(point_k.max(initial=0.0), workers.max(initial=0.0)) + 2.0
    stride = 2.0 ** math.ceil(math.log2(top))
    if n * stride >= 2.0**52:  # keys would not be exact: one job at a time
        return np.array([epoch_time_at(jobs[j], int(w)) for j, w in zip(job, workers, strict=True)])
    point_key = point_job * stride + point_k
    order = np.argsort(point_key)
    point_key, point_job = point_key[order], point_job[order]
    point_k, point_t = point_k[order], point_t[order]
    above = np.searchsorted(point_key, job * stride + workers)
    below = above - 1
    point_count = len(point_key)
    has_above = above < point_count
    has_above[has_above] = point_job[above[has_above]] == job[has_above]
    has_below = below >= 0
    has_below[has_below] = point_job[below[has_below]] == job[has_below]
    above, below = np.minimum(above, point_count - 1), np.maximum(below, 0)
    out = np.empty(len(workers))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        unknown = ~has_below & ~has_above
        out[unknown] = default_epoch_seconds / workers[unknown]
        if not point_count:
            return out
        k0, t0, k1, t1 = point_k[below], point_t[below], point_k[above], point_t[above]
        observed = has_above & (k1 == workers)
        out[observed] = t1[observed]
        between = has_below & has_above & ~observed
        w = workers[between]
        x0, x1 = 1.0 / t0[between], 1.0 / t1[between]
        c0, c1 = k0[between], k1[between]
        out[between] = 1.0 / (x0 + (x1 - x0) * (w - c0) / (c1 - c0))
        # Outside the observations: Amdahl's shape anchored at the nearest one.
        outside = ~unknown & ~observed & ~between
        if outside.any():
            serial, parallel, slope = (np.zeros(n) for _ in range(3))
            fitted = np.unique(job[outside])
            serial[fitted], parallel[fitted], slope[fitted] = amdahl_fits(
                point_job, point_k, point_t, fitted)
            low = outside & ~has_below  # fewer workers than ever measured
            high = outside & has_below
            for part, k_near, t_near in ((low, k1, t1), (high, k0, t0)):
                w, j = workers[part], job[part]
                x_near, k = 1.0 / t_near[part], k_near[part]
                ratio = (serial[j] + parallel[j] / k) / (serial[j] + parallel[j] / w)
                if part is low:
                    out[part] = 1.0 / (x_near * ratio)
                else:
                    gain = np.minimum(x_near * (ratio - 1.0), slope[j] * (w - k))
                    out[part] = 1.0 / (x_near + np.maximum(gain, 0.0))
    return out
