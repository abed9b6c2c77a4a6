"""Weighted water-filling of GPUs over queues (docs/design/013-queues.md, rule 4).

Each queue q sits at a share S_q between a floor and a ceiling; the level L puts it at
clamp(G_q + L w_q, floor_q, ceiling_q), so the GPUs beyond the guarantees G_q are shared
in proportion to the weights w_q. A queue consumes max(S_q, keep_q) of the capacity:
`keep_q` is the part of its guarantee it does not lend, held for it even when idle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

_ROUNDS = 64  # bisection steps: L to within 2^-64 of its range


def water_fill(capacity: int, guarantee: Sequence[int], weight: Sequence[float],
               floor: Sequence[int], ceiling: Sequence[float], keep: Sequence[int],
               open_: Sequence[bool]) -> list[int]:
    """Integer shares: closed queues stay at their floor; open ones rise to the highest
    common level that fits, then the GPUs the rounding left go one at a time to the open
    queue lowest in (share + 1 - guarantee) / weight (ties: the earlier queue)."""
    n = len(guarantee)
    shares = list(floor)

    def used(level: float) -> float:
        total = 0.0
        for i in range(n):
            s = shares[i]
            if open_[i]:
                s = min(max(guarantee[i] + level * weight[i], floor[i]), ceiling[i])
                s = math.floor(s)
            total += max(s, keep[i])
        return total

    if used(_lowest(guarantee, weight)) > capacity:
        return shares  # even the floors do not fit: nobody grows
    lo, hi = _lowest(guarantee, weight), _highest(capacity, guarantee, weight)
    if used(hi) <= capacity:
        lo = hi
    else:
        for _ in range(_ROUNDS):
            mid = (lo + hi) / 2
            if used(mid) <= capacity:
                lo = mid
            else:
                hi = mid
    for i in range(n):
        if open_[i]:
            shares[i] = int(min(max(math.floor(guarantee[i] + lo * weight[i]), floor[i]),
                                ceiling[i]))
    left = capacity - sum(max(s, k) for s, k in zip(shares, keep, strict=True))
    while left > 0:
        growing = [i for i in range(n) if open_[i] and shares[i] < ceiling[i]]
        if not growing:
            break
        i = min(growing, key=lambda i: ((shares[i] + 1 - guarantee[i]) / weight[i], i))
        cost = 1 if shares[i] >= keep[i] else 0
        shares[i] += 1
        left -= cost
    return shares


def _lowest(guarantee: Sequence[int], weight: Sequence[float]) -> float:
    return -max((g / w for g, w in zip(guarantee, weight, strict=True)), default=0.0) - 1.0


def _highest(capacity: int, guarantee: Sequence[int], weight: Sequence[float]) -> float:
    return (capacity + 1) / min(weight, default=1.0) + 1.0
