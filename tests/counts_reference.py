"""The count dynamic programs as they were before their folds kept only the columns a
decision reads (voda.core.allocation.counts.best_counts, Pollux's and Voda's, and
voda.core.allocation.ffdl.best_counts): a column per GPU count from 0 to the capacity,
for every job. The references the faster programs must equal, to the last count."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from voda.core.allocation.ffdl import objective_tables
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


def ffdl_counts_every_column(jobs: Sequence[Job], capacity: int) -> list[int]:
    """FfDLOptimizer's program as it was: every column from 0 to `rest` in every fold,
    and the columns past a fold's reach filled with its last."""
    if not jobs:
        return []
    n = len(jobs)
    rest, spans, tables = objective_tables(jobs, capacity)
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
