"""FfDL's program over every admitted job: the reference the bounded program
(`ffdl_bounded`) must decide as.

Given `rest` GPUs beyond the mins and each job's integer objective at e = 0..span extra
GPUs, the extras with the largest total, at most `rest` in all; among optimal extras
the one taking the most for the first job, then the second, and so on."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np


def program_extras(rest: int, spans: Sequence[int], tables: Sequence[np.ndarray]) -> list[int]:
    """The extra GPUs per job (in the order given), by dynamic programming.

    Jobs are folded in reverse, so value[i][c] is the best objective of jobs i.. with at
    most c extra GPUs; the extras are then read forwards, each job taking the largest
    that keeps the objective optimal. A fold computes only the columns a decision reads
    (as counts.best_counts does; the same counts as a fold over every column,
    tests/counts_reference.py).
    """
    n = len(spans)
    if n == 0:
        return []
    width = rest + 1
    value = np.empty((n + 1, width), dtype=np.int64)
    value[n, :1] = 0
    # Columns past `reach` (the most the jobs folded so far can take) read its value;
    # below `lo` (the least the jobs before can leave) no decision reads them.
    before = list(itertools.accumulate(spans, initial=0))
    reaches = [0] * (n + 1)
    reach = 0
    for i in range(n - 1, -1, -1):
        following, best, table = value[i + 1], value[i], tables[i]
        size = min(rest, reach + spans[i]) + 1
        following[reach + 1:size] = following[reach]  # the columns this fold reads past it
        reach = reaches[i] = size - 1
        lo = min(max(rest - before[i], 0), reach)
        best[lo:size] = following[lo:size] + table[0]
        for e in range(1, spans[i] + 1):
            start = max(lo, e)
            if start < size:
                np.maximum(best[start:size], following[start - e:size - e] + table[e],
                           out=best[start:size])
    extras: list[int] = []
    c = rest
    for i in range(n):
        following, table, after = value[i + 1], tables[i], reaches[i + 1]
        target = value[i][min(c, reaches[i])]
        chosen = 0
        for e in range(min(spans[i], c), -1, -1):
            if table[e] + following[min(c - e, after)] == target:
                chosen = e
                break
        extras.append(chosen)
        c -= chosen
    return extras
