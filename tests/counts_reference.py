"""The count dynamic programs as they were before their folds kept only the columns a
decision reads (voda.core.allocation.counts.best_counts, Pollux's and Voda's, and
voda.core.allocation.ffdl.best_counts): a column per GPU count from 0 to the capacity,
for every job; and Pollux's and Voda's with the columns it keeps but an array of picks
per fold and a row-by-row running maximum, as it was before it kept only the tables
(6417be5); and FfDLOptimizer's objective tables as they were before one batch of epoch
times built them (a speed model fitted per job). The references the faster programs
must equal, to the last count."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from voda.core.allocation.counts import _bands, no_slower
from voda.core.allocation.ffdl import SPEEDUP_SCALE
from voda.core.estimate import speed_model
from voda.core.model import Job


def best_counts_every_column(utilities: Sequence[np.ndarray], capacity: int) -> list[int]:
    width = capacity + 1
    columns = np.arange(width)
    best = np.zeros(width)  # best total of the jobs folded so far with at most c GPUs
    choices = []
    for u in reversed(utilities):
        options = np.flatnonzero(u != -np.inf)
        if not len(options) or options[-1] != len(u) - 1:
            options = np.append(options, len(u) - 1)
        candidate = np.full((len(options), width), -np.inf)
        for row, n in enumerate(options.tolist()):
            if n < width:  # n GPUs on top of the best of the rest with c - n
                candidate[row, n:] = best[:width - n] + u[n]
        pick = len(options) - 1 - np.argmax(candidate[::-1], axis=0)  # ties: the larger count
        best = candidate[pick, columns]
        choices.append(options[pick])
    counts = []
    left = capacity
    for pick in reversed(choices):
        n = int(pick[left])
        counts.append(n)
        left -= n
    return counts


def _ffdl_values(job: Job, top: int) -> tuple[np.ndarray, np.ndarray]:
    model = speed_model(job)
    counts = np.arange(job.min_workers, top + 1, dtype=np.int64)
    one = model.epoch_time(1)
    raw = np.asarray([one / model.epoch_time(k) for k in range(job.min_workers, top + 1)])
    speedups = np.where(no_slower(-raw, 0), np.rint(raw * SPEEDUP_SCALE), -SPEEDUP_SCALE)
    return speedups.astype(np.int64), counts * counts


def ffdl_tables_per_job(jobs: Sequence[Job], capacity: int
                        ) -> tuple[int, list[int], list[np.ndarray]]:
    """voda.core.allocation.ffdl.objective_tables as it was: a speed model per job."""
    rest = capacity - sum(j.min_workers for j in jobs)
    if rest < 0:
        raise ValueError("the jobs' min workers exceed the capacity")
    spans = [min(j.max_workers, j.min_workers + rest) - j.min_workers for j in jobs]
    values = [_ffdl_values(j, j.min_workers + span) for j, span in zip(jobs, spans, strict=True)]
    weight = capacity * capacity + 1
    if sum(int(speedups.max()) for speedups, _ in values) * weight >= 2**62:
        return rest, spans, [speedups for speedups, _ in values]
    return rest, spans, [speedups * weight - squares for speedups, squares in values]


def ffdl_counts_every_column(jobs: Sequence[Job], capacity: int) -> list[int]:
    """FfDLOptimizer's program as it was: every column from 0 to `rest` in every fold,
    and the columns past a fold's reach filled with its last; its tables as they were."""
    if not jobs:
        return []
    n = len(jobs)
    rest, spans, tables = ffdl_tables_per_job(jobs, capacity)
    width = rest + 1
    value = np.empty((n + 1, width), dtype=np.int64)
    value[n] = 0
    reach = 0  # beyond the sum of the remaining jobs' spans the value no longer grows
    for i in range(n - 1, -1, -1):
        following, best, table = value[i + 1], value[i], tables[i]
        reach = min(rest, reach + spans[i])
        size = reach + 1
        best[:size] = following[:size] + table[0]
        for e in range(1, spans[i] + 1):
            np.maximum(best[e:size], following[: size - e] + table[e], out=best[e:size])
        if size < width:
            best[size:] = best[reach]
    counts: list[int] = []
    c = rest
    for i, job in enumerate(jobs):
        following, table = value[i + 1], tables[i]
        target = value[i][c]
        chosen = 0
        for e in range(min(spans[i], c), -1, -1):
            if table[e] + following[c - e] == target:
                chosen = e
                break
        counts.append(job.min_workers + chosen)
        c -= chosen
    return counts


def best_counts_with_pick_arrays(utilities: Sequence[np.ndarray], capacity: int) -> list[int]:
    """counts.best_counts as it was at 6417be5: a pick array per fold."""
    tops = [min(len(u) - 1, max(capacity, 0)) for u in utilities]
    bands = _bands(tops, capacity)
    best = np.zeros(1)  # the best of no jobs: 0 at every column from 0 up
    below = 0  # `best` holds the columns from `below` up; past its end, its last value
    folds = []
    for u, (lo, hi) in zip(reversed(utilities), reversed(bands), strict=True):
        options = np.flatnonzero(u != -np.inf)
        if not len(options) or options[-1] != len(u) - 1:
            options = np.append(options, len(u) - 1)
        reach = hi - below + 1  # sources c - n for n = 0 reach up to hi
        if reach > len(best):
            best = np.concatenate([best, np.full(reach - len(best), best[-1])])
        value = np.full(hi - lo + 1, -np.inf)
        index = np.uint8 if len(options) <= 256 else np.int32
        pick = np.full(hi - lo + 1, len(options) - 1, dtype=index)
        for row in range(len(options) - 1, -1, -1):  # the larger count first: it wins ties
            n = int(options[row])
            start = max(lo, n)
            if start > hi:
                continue
            total = best[start - n - below:hi - n - below + 1] + u[n]
            if row == len(options) - 1:  # the first row read: nothing to beat yet
                value[start - lo:] = total
                continue
            held = value[start - lo:]
            better = total > held
            np.copyto(held, total, where=better)
            pick[start - lo:][better] = row
        best, below = value, lo
        folds.append((options, pick, lo, hi))
    counts = []
    left = capacity
    for options, pick, lo, hi in reversed(folds):
        n = int(options[pick[min(left, hi) - lo]])
        counts.append(n)
        left -= n
    return counts
