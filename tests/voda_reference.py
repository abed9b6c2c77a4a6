"""Voda's rank order and restart charges, and the count program's bands, as they were at
7a1b80b: the references the versions for all jobs at once (voda.core.allocation.voda,
counts) are checked against, bit for bit (tests/test_voda_vectorised.py). Aged sizes,
inelastic factors and tail floors keep theirs in voda itself (`*_each`: the quicker for a
few jobs)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from voda.core.allocation.voda import restart_charge
from voda.core.model import Job


def rank_weights(sizes: Sequence[float], p: float) -> np.ndarray:
    m = len(sizes)
    weights = np.ones(m)
    if m == 0 or p <= 0:
        return weights
    c = 1.0 / (1.0 - p)
    order = sorted(range(m), key=lambda i: (sizes[i], i))
    rank = np.arange(1, m + 1)
    shares = ((m - rank + 1) / m) ** c - ((m - rank) / m) ** c
    weights[order] = shares ** (1.0 / c)
    return weights


def restart_charges(jobs: Sequence[Job], restart_penalty: float, horizon: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    charges = [restart_charge(j, restart_penalty, horizon) for j in jobs]
    return (np.array([c.penalty for c in charges]), np.array([c.horizon for c in charges]),
            np.array([c.lost for c in charges]))


def bands(tops: Sequence[int], capacity: int) -> list[tuple[int, int]]:
    """counts._bands as it was: per job, the columns its fold keeps."""
    import itertools
    after = list(itertools.accumulate(reversed(tops)))[::-1]
    before = itertools.accumulate(tops, initial=0)
    out = []
    for taken, most in zip(before, after, strict=False):
        hi = min(capacity, most)
        out.append((min(max(capacity - taken, 0), hi), hi))
    return out
