"""Voda's utilities for many jobs at once: one row per job, jobs of one cap together.

`Voda.utility` prices one job's counts with a dozen small NumPy calls; at thousands of
jobs the calls, not the arithmetic, are the cost. Here the jobs that share a cap (so a
row length) are priced together, as a (jobs x counts) array: every value is the same
floating-point operation on the same operands as `Voda.utility` does, elementwise (no
sum or other reduction reorders anything), so each row equals its job's utility to the
last bit (tests/test_utility_rows.py).
"""

from __future__ import annotations

import numpy as np

from voda.core.allocation.counts import no_slower_rows, that_pack_rows

RATE_SCALE = 1e6  # completion rates (1/s) are small: scaled so float noise does not decide


def best_sizes(speedup: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """`voda.best_size` of each row: the first allowed count (from 1) of highest speedup,
    0 where none is allowed."""
    counts = allowed[:, 1:]
    knee = np.argmax(np.where(counts, speedup[:, 1:], -np.inf), axis=1) + 1
    rows = np.arange(len(knee))
    # A row whose allowed speedups are all -inf would pick a count it may not take:
    # argmax over its allowed counts alone, as best_size does.
    for r in np.flatnonzero(~allowed[rows, knee]).tolist():
        options = np.flatnonzero(counts[r]) + 1
        knee[r] = options[np.argmax(speedup[r, options])] if len(options) else 0
    return knee


def group_utilities(seconds: np.ndarray, pace: np.ndarray, size: np.ndarray,
                    lo: np.ndarray, kept: np.ndarray, penalty: np.ndarray,
                    weight: np.ndarray, horizon: np.ndarray, lost: np.ndarray,
                    per_node: int, aligned: bool,
                    caps: np.ndarray | None = None) -> np.ndarray:
    """Utilities (jobs x counts 0..cap) of jobs that share a cap, as `Voda.utility` gives
    each: `seconds` and `pace` their curves' (pace: seconds where a curve has none),
    `size` their sizes, `lo` their min workers, `kept` their counts kept without a
    change (0: none), `weight` their weights, and per job its restart charge
    (voda.restart_charge): `penalty` what a change costs, paid back over `horizon`, on
    top of the share `lost` of its life already spent restarting.

    `caps`: jobs of several caps together, each row's cap; its columns past it (any
    values) are left out of every choice, so its first cap + 1 values are what a call on
    the jobs of its cap alone gives (the rest are -inf): one call for a few small caps."""
    jobs, width = seconds.shape
    cap = width - 1
    rows = np.arange(jobs)
    rate = np.zeros((jobs, width))
    fast = no_slower_rows(pace, lo)
    if caps is not None:
        fast &= np.arange(width) <= caps[:, None]
    allowed = that_pack_rows(fast, per_node) if aligned else fast
    valid = np.flatnonzero(np.isfinite(size)) if cap >= 1 else np.zeros(0, dtype=np.int64)
    if caps is not None:
        valid = valid[caps[valid] >= 1]
    if len(valid):
        speedup = np.zeros((len(valid), width))
        speedup[:, 1:] = size[valid, None] / seconds[valid, 1:]
        knee = best_sizes(speedup, allowed[valid])
        top = speedup[np.arange(len(valid)), knee][:, None]
        within = np.minimum(speedup, top)
        beyond = np.maximum(speedup - top, 0.0)
        rate[valid] = RATE_SCALE * (within * weight[valid, None] + 1e-9 * beyond)
    share = penalty[:, None] / np.minimum(seconds, horizon[:, None]) + lost[:, None]
    changed = rate * np.clip(1.0 - share, 0.0, 1.0)
    changed[rows, kept] = rate[rows, kept]  # no change, no restart
    held = np.flatnonzero(kept)
    if len(held):
        k = kept[held]
        changed[held, 0] = -rate[held, k] * np.minimum(share[held, k], 1.0)
    allowed[rows, kept] |= fast[rows, kept]
    allowed[:, 0] = True
    return np.where(allowed, changed, -np.inf)
