"""Speed estimates from observed epoch times.

A job reports seconds per epoch at some worker counts. From those we estimate
the epoch time at any count k:

- observed counts are used as observed;
- between two observed counts, throughput (epochs per second) is interpolated
  linearly;
- outside the observed range, Amdahl's law t(k) = serial + parallel / k is fitted
  to the observations by least squares (one observation: purely parallel, that is
  linear speedup from that point).

With no observation at all speed is unknown and speedup is taken as linear,
with `default_epoch_seconds` at one worker for remaining-time estimates.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass

from voda.core.model import Job

DEFAULT_EPOCH_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class SpeedModel:
    """Epoch time as a function of worker count, fitted once per job snapshot."""

    counts: tuple[int, ...]  # observed worker counts, ascending
    times: tuple[float, ...]  # seconds per epoch at those counts
    serial: float  # Amdahl fit, for extrapolation
    parallel: float
    known: bool

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
        return max(self.serial + self.parallel / workers, 1e-9)

    def speedup(self, workers: int) -> float:
        """S(k) relative to one worker; S(0) = 0."""
        if workers <= 0:
            return 0.0
        return self.epoch_time(1) / self.epoch_time(workers)


def fit_speed(
    epoch_time_by_workers: Mapping[int, float],
    default_epoch_seconds: float = DEFAULT_EPOCH_SECONDS,
) -> SpeedModel:
    points = sorted((k, t) for k, t in epoch_time_by_workers.items() if k >= 1 and t > 0)
    if not points:
        return SpeedModel((), (), 0.0, default_epoch_seconds, known=False)
    counts = tuple(k for k, _ in points)
    times = tuple(t for _, t in points)
    serial, parallel = _amdahl_fit(counts, times)
    return SpeedModel(counts, times, serial, parallel, known=True)


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


def speed_model(job: Job, default_epoch_seconds: float = DEFAULT_EPOCH_SECONDS) -> SpeedModel:
    return fit_speed(job.epoch_time_by_workers, default_epoch_seconds)


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
    return EpochTimes(job)(workers)
