"""Which columns of `counts.best_counts`'s fold tables a decision can read: a Lagrangian
bound that lets the program drop the rest (docs/design/001-allocation.md, "Columns no
decision reads").

The program decides job j at column c_j = capacity - (what the jobs before it took), and
the total it reaches is T_0(capacity) = u_0(n_0) + (u_1(n_1) + ... + T_j(c_j)), summed
in that order. For any price p >= 0 of a GPU, each job's value is at most
g_i + p n_i with g_i = max_n (u_i(n) - p n), so along the decision, in real numbers,

    T_0(capacity) <= T_j(c_j) + p (capacity - c_j) + sum_{i<j} g_i  (+ rounding),

and T_0(capacity) is at least the total of any counts that fit, summed in the same order
(`floor`: those the price picks, p raised until they fit). A column c of T_j where
T_j(c) + p (capacity - c) + sum_{i<j} g_i + slack < floor is then not c_j. Likewise a
count n of job j with u_j(n) - p n + p capacity + sum_{i != j} g_i + slack < floor is in
no counts that reach the floor: not the decision's, and never tied with it, so the
program may leave it out (`ColumnBound.rows`). Every quantity above is a sum of at most a
million terms of magnitude at most `scale`, so the float rounding is below 1e-9 of
`scale`: SLACK of it covers it with room to spare.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

SLACK = 1e-8  # of the magnitudes summed: far above float rounding (<= 1e-9 of them)
PRICE_STEPS = 24  # bisection steps for the price (each halves its bracket's ratio)
BRACKET = 4.0  # the price is first looked for within this factor of its estimate


@dataclass(frozen=True)
class ColumnBound:
    """What `kept` tests a fold table against: per job j the sum of g_i of the jobs
    before it (`before[j]`), the floor, the slack, and per column what the price of a GPU
    makes of the GPUs the jobs before it took; and per job the counts that may be its
    decision (`rows`: the others fall below the floor whatever the other jobs take)."""

    before: np.ndarray
    floor: float
    slack: float
    priced: np.ndarray  # per column c, price x (capacity - c)
    rows: list[list[int]]  # per job, its finite counts the decision may take (ascending)

    def kept(self, job: int, lo: int, table: np.ndarray) -> tuple[int, int]:
        """The first and last offsets in `table` (job `job`'s fold table, from column `lo`)
        of the columns that may be the column it is decided at: all of them where the
        test keeps none (which the bound rules out)."""
        room = table + self.priced[lo:lo + len(table)]
        keep = np.flatnonzero(room >= self.floor - self.before[job] - self.slack)
        if not len(keep):
            return 0, len(table) - 1
        return int(keep[0]), int(keep[-1])


def column_bound(utilities: Sequence[np.ndarray], capacity: int,
                 values: Sequence[float]) -> ColumnBound | None:
    """The bound for `best_counts(utilities, capacity)`, or None where it cannot hold:
    a NaN or +inf value, a job with no finite value, or no counts from the finite ones
    that fit. `values`: the utilities end to end as Python floats."""
    lengths = np.fromiter(map(len, utilities), dtype=np.int64, count=len(utilities))
    if not len(lengths) or capacity < 0:
        return None
    flat = np.concatenate(utilities)
    finite = np.isfinite(flat)
    if np.isnan(flat).any() or np.isposinf(flat).any():
        return None
    owner = np.repeat(np.arange(len(lengths)), lengths)[finite]
    segment = np.flatnonzero(np.diff(owner, prepend=-1))
    if len(segment) != len(lengths):
        return None  # a job with no finite value
    starts = np.concatenate([[0], np.cumsum(lengths[:-1])])
    count = (np.flatnonzero(finite) - starts[owner]).astype(float)
    value = flat[finite]

    # Each job's finite values and counts in a row of its own, padded with -inf: a job's
    # largest count at its best reduced value is the first in the reversed row.
    place = np.arange(len(owner)) - segment[owner]
    width = int(place.max()) + 1
    row_values = np.full((len(lengths), width), -np.inf)
    row_counts = np.zeros((len(lengths), width))
    row_values[owner, place] = value
    row_counts[owner, place] = count
    row_values, row_counts = row_values[:, ::-1], row_counts[:, ::-1]
    jobs = np.arange(len(lengths))

    def choose(price: float) -> tuple[np.ndarray, np.ndarray]:
        """Per job, max of u(n) - price n over its finite counts, and the largest n at it."""
        reduced = row_values - price * row_counts
        first = reduced.argmax(axis=1)
        return reduced[jobs, first], row_counts[jobs, first]

    low, high = 0.0, float(value.max() - value.min()) + 1.0  # at high the least count wins
    if not np.isfinite(high):
        return None
    best, taken = choose(low)
    if taken.sum() > capacity:
        if choose(high)[1].sum() > capacity:
            return None
        low, high = price_bracket(value, count, owner, segment, capacity, choose, high)
        for _ in range(PRICE_STEPS):  # halving the bracket's ratio (its width, from 0)
            middle = math.sqrt(low * high) if low > 0 else high / 2
            if choose(middle)[1].sum() > capacity:
                low = middle
            else:
                high = middle
        low = high
        best, taken = choose(low)
    floor = 0.0
    for first, n in zip(reversed(starts.tolist()), reversed(taken.astype(np.int64).tolist()),
                        strict=True):
        floor = values[first + n] + floor  # summed as the program sums: last job first
    largest = np.maximum.reduceat(np.abs(value), segment)
    scale = (float(largest.sum()) + float(np.abs(best).sum()) + low * capacity
             + abs(floor) + 1.0)
    before = np.concatenate([[0.0], np.cumsum(best)])
    priced = low * np.arange(capacity, -1, -1, dtype=float)
    # A count n of job j is in no counts reaching the floor where even with every other
    # job at its best, u_j(n) - p n + p capacity + sum_{i != j} g_i + slack < floor.
    need = floor - low * capacity - float(before[-1]) - SLACK * scale
    useful = (value - low * count >= need + best[owner]) & (count <= capacity)
    found = count[useful].astype(np.int64).tolist()
    cuts = np.searchsorted(owner[useful], np.arange(len(lengths) + 1)).tolist()
    rows = [found[a:b] for a, b in itertools.pairwise(cuts)]
    return ColumnBound(before, floor, SLACK * scale, priced, rows)


def price_bracket(value: np.ndarray, count: np.ndarray, owner: np.ndarray,
                  segment: np.ndarray, capacity: int,
                  choose: Callable[[float], tuple[np.ndarray, np.ndarray]],
                  high: float) -> tuple[float, float]:
    """Prices (low, high) with the counts chosen at low above the capacity and at high
    within it: within BRACKET of the price where the steps between a job's consecutive
    finite counts, steepest first, fill the capacity, where that holds; else (0, high)."""
    same = owner[1:] == owner[:-1]
    gains = np.diff(count)[same]
    slopes = np.diff(value)[same] / gains
    order = np.argsort(-slopes, kind="stable")
    filled = count[segment].sum() + np.cumsum(gains[order])
    at = int(np.searchsorted(filled, capacity, side="right"))
    estimate = float(slopes[order][at]) if at < len(order) else 0.0
    if not (np.isfinite(estimate) and estimate > 0):
        return 0.0, high
    top = min(estimate * BRACKET, high)
    if choose(top)[1].sum() > capacity:
        top = high
    bottom = estimate / BRACKET
    if choose(bottom)[1].sum() <= capacity:
        bottom = 0.0
    return bottom, top
