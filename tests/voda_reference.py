"""Voda's weights and charges one job at a time, as they were at 7a1b80b: the references
the vectorised versions (voda.core.allocation.voda) are checked against, bit for bit
(tests/test_voda_vectorised.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from voda.core.allocation.counts import largest_packing
from voda.core.allocation.voda import (
    FLOOR_EFFICIENCY,
    FLOOR_NODES,
    Curve,
    hardware_efficiency,
    restart_charge,
    water_shares,
)
from voda.core.model import Job


def aged_sizes(jobs: Sequence[Job], curves: Sequence[Curve], aging: float,
               limit: float) -> list[float]:
    sizes = [c.size for c in curves]
    if aging <= 0 or limit <= 0:
        return sizes
    out = []
    for job, size in zip(jobs, sizes, strict=True):
        if math.isfinite(size):
            age = job.waiting_seconds + job.running_seconds
            size -= min(aging * age, limit * size)
        out.append(size)
    return out


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


def inelastic_first(jobs: Sequence[Job], curves: Sequence[Curve], capacity: int,
                    exponent: float, node: int, share_of: str = "between") -> np.ndarray:
    factors = np.ones(len(jobs))
    if exponent <= 0 or not len(jobs):
        return factors
    shares = water_shares(curves, capacity, share_of).tolist()  # (unchanged but the sort)
    for i, (job, curve) in enumerate(zip(jobs, curves, strict=True)):
        if curve.cap < 1 or not math.isfinite(curve.size):
            continue
        share = max(shares[i], min(job.min_workers, curve.cap), 1)
        n = largest_packing(min(share, curve.cap), node)
        speedup = curve.size / curve.seconds[n]
        if math.isfinite(speedup) and speedup > 0:
            factors[i] = (n / speedup) ** exponent if speedup < n else 1.0
    return factors


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


def tail_floors(curves: Sequence[Curve], budget: int, node: int) -> list[bool]:
    floored = [False] * len(curves)
    sizes = np.sort([c.size for c in curves])
    half = sizes[-(-len(sizes) // 2) - 1] if len(sizes) else math.inf
    for i, curve in enumerate(curves):
        if budget < 1:
            break
        if curve.cap < 1 or not math.isfinite(curve.size) or not curve.size > half:
            continue
        if hardware_efficiency(curve, curve.model, FLOOR_NODES * node, node) < FLOOR_EFFICIENCY:
            floored[i] = True
            budget -= 1
    return floored
