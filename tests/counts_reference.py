"""The count dynamic program as it was before its folds kept only the columns read
(voda.core.allocation.counts.best_counts): a row per count a job may take and a column
per GPU count from 0 to the capacity, for every job. The reference the faster program
must equal, to the last count."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
