"""Weighted water-filling of GPUs over queues (docs/design/013-queues.md, rule 4).

Each open queue q sits at a share S_q between a floor and a ceiling; the level L puts it
at clamp(G_q + L w_q, floor_q, ceiling_q), so the GPUs beyond the guarantees G_q are
shared in proportion to the weights w_q. A queue consumes max(S_q, keep_q) of the
capacity: `keep_q` is the part of its guarantee it does not lend, held for it even when
idle. The level is found exactly: consumption is piecewise linear in L, so it is read off
at the sorted break points and interpolated in the segment where it reaches the capacity.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def water_fill(capacity: int, guarantee: Sequence[int], weight: Sequence[float],
               floor: Sequence[int], ceiling: Sequence[float], keep: Sequence[int],
               open_: Sequence[bool]) -> list[int]:
    """Integer shares: closed queues stay at their floor; open ones rise to the highest
    common level that fits, rounded down; the GPUs the rounding left go one each to the
    open queues lowest in (share + 1 - guarantee) / weight (ties: the earlier queue)."""
    f = np.asarray(floor, dtype=float)
    on = np.asarray(open_, dtype=bool)
    if not on.any():
        return list(floor)
    g = np.asarray(guarantee, dtype=float)
    w = np.asarray(weight, dtype=float)
    c = np.minimum(np.asarray(ceiling, dtype=float), float(capacity))
    k = np.asarray(keep, dtype=float)
    fixed = float(np.maximum(f[~on], k[~on]).sum())
    go, wo, fo, co, ko = g[on], w[on], f[on], np.maximum(c[on], f[on]), k[on]

    def used(levels: np.ndarray) -> np.ndarray:
        shares = np.clip(go[:, None] + levels[None, :] * wo[:, None], fo[:, None], co[:, None])
        return fixed + np.maximum(shares, ko[:, None]).sum(axis=0)

    points = np.unique(np.concatenate([(fo - go) / wo, (co - go) / wo, (ko - go) / wo]))
    totals = used(points)
    if totals[0] > capacity:
        return list(floor)  # even the floors do not fit: nobody grows
    fits = np.flatnonzero(totals <= capacity)
    last = int(fits[-1])
    level = float(points[last])
    if last + 1 < len(points):  # linear between two break points: interpolate
        lo, hi = totals[last], totals[last + 1]
        if hi > lo:
            level += (capacity - lo) / (hi - lo) * (points[last + 1] - points[last])
    shares = np.floor(np.clip(go + level * wo + 1e-9, fo, co)).astype(int)
    out = np.asarray(floor, dtype=int).copy()
    out[on] = shares
    left = capacity - int(np.maximum(out, np.asarray(keep)).sum())
    index = np.flatnonzero(on)
    if left <= 0:
        return out.tolist()
    # the rounding's leftover, one GPU each per pass: on Python numbers (NumPy scalars
    # cost more per comparison than the pass saves), the same comparisons
    held, top, kept = out.tolist(), c.tolist(), k.tolist()
    members = index.tolist()
    gi, wi = g[index], w[index]
    while left > 0:
        if not any(held[i] < top[i] for i in members):
            break
        keys = (np.asarray([held[i] for i in members]) + 1 - gi) / wi
        rank = np.lexsort((index, keys)).tolist()
        given = False
        for j in rank:
            i = members[j]
            if left <= 0:
                break
            if held[i] >= top[i]:
                continue
            left -= 1 if held[i] >= kept[i] else 0
            held[i] += 1
            given = True
        if not given:
            break
    return held
