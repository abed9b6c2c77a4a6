"""The AFS-L tournament's rounds compiled (numba), for many jobs.

The same walk, takeovers and band moves as `afs._Tournament.run_interpreted`, which
stays the reference (tests/test_afs_kernel.py compares the two): the masks are rows of
64-bit words (bit i of word w is job 64 w + i) instead of Python integers, and a query
reads the words from the first position still to check on and stops at the first job
that takes over, so it costs what the jobs before that job cost, not the whole mask.

Imported only when a call has enough jobs (`afs.KERNEL_MIN_JOBS`) and numba is
installed: numba compiles the kernel on first use (cached on disk) and costs a
fraction of a second to import.

A state past a job's tabled sizes is computed in Python (`state_at`, a speed model of
its own): the kernel stops with that job in `reg[PENDING]`, the caller writes the
state at `reg[NEW_STATE]` (the arrays have room for one a GPU) and calls it again.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# The kernel's registers (an int64 array, kept across calls).
FREE, POSITION, DEPTH, PENDING, NEW_STATE, BY_MIN, WAITING = range(7)
REGISTERS = 7

Array = np.ndarray

_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
# The lowest set bit's index by a de Bruijn sequence: (b * DE_BRUIJN) >> 58 is distinct
# for every power of two b below 2**64.
_DE_BRUIJN = np.uint64(0x03F79D71B4CB0A89)
_BIT_INDEX = np.zeros(64, dtype=np.int64)
for _i in range(64):
    _BIT_INDEX[((1 << _i) * 0x03F79D71B4CB0A89 % 2**64) >> 58] = _i


def words(flags: np.ndarray) -> np.ndarray:
    """Per row of `flags` (n columns), the words of its bit mask: bit i % 64 of word
    i // 64 set where the row is true at i (a (rows, ceil(n / 64)) uint64 array)."""
    rows, n = flags.shape
    width = -(-n // 64)
    padded = np.zeros((rows, width * 64), dtype=bool)
    padded[:, :n] = flags
    packed = np.packbits(padded, axis=1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u8").astype(np.uint64, copy=False)


@njit(cache=True, inline="always")
def _lowest(m: np.uint64) -> int:
    """The index of the lowest set bit of m (not 0)."""
    return _BIT_INDEX[((m & (~m + _ONE)) * _DE_BRUIJN) >> np.uint64(58)]


@njit(cache=True, inline="always")
def _from(word: int, base: int, first: int) -> np.uint64:
    """The bits of word `word` at positions `base` and after (a mask)."""
    if word == first:
        return _ALL << np.uint64(base & 63)
    return _ALL


@njit(cache=True)
def _move(winner: int, old: int, new: int, state: Array, length_band: Array, gain_band: Array,
          shorter: Array, gain_from: Array) -> None:
    """Job `winner` moves from state `old` to `new`: its bit flips in the masks of the
    bands it moved past."""
    state[winner] = new
    word = winner >> 6
    bit = _ONE << np.uint64(winner & 63)
    a, b = length_band[old], length_band[new]
    for band in range(min(a, b) + 1, max(a, b) + 1):
        shorter[band, word] ^= bit
    a, b = gain_band[old], gain_band[new]
    for band in range(min(a, b) + 1, max(a, b) + 1):
        gain_from[band, word] ^= bit


@njit(cache=True)
def _first_takeover(incumbent: int, after: int, x: Array, state: Array, start: Array,
                    start_band: Array, length: Array, gain: Array, lower: Array,
                    length_band: Array, h_band: Array, least_band: Array, shorter: Array,
                    gain_from: Array, start_below: Array, strong: int, waiting: Array,
                    running: Array, waiting_count: int) -> int:
    """The first job after position `after` that takes over from `incumbent`, or -1."""
    base = after + 1
    first = base >> 6
    if x[incumbent] == 0:  # a job at 0 shorter at min, or one running at g >= 1
        own = start[incumbent]
        below = start_band[incumbent] + 1
        for w in range(first, waiting.shape[0]):
            m = ((waiting[w] & start_below[below, w]) | (running[w] & gain_from[strong, w])
                 ) & _from(w, base, first)
            while m != 0:
                c = w * 64 + _lowest(m)
                if (start[c] < own) if x[c] == 0 else (gain[state[c]] >= 1.0):
                    return c
                m &= m - _ONE
        return -1
    # at 0 when g < 1; shorter with g_c >= h; as long with h_c > g
    j = state[incumbent]
    own, g, h = length[j], gain[j], lower[j]
    shorter_row, h_row, least_row = length_band[j] + 1, h_band[j], least_band[j]
    cut = waiting_count > 0 and g < 1.0
    for w in range(first, waiting.shape[0]):
        keep = _from(w, base, first)
        m = ((shorter[shorter_row, w] & gain_from[h_row, w]) | gain_from[least_row, w]
             ) & running[w] & keep
        if cut:
            at_zero = waiting[w] & keep
            if at_zero != 0:  # the first job at 0 takes over unless one before it does
                at_zero &= ~at_zero + _ONE
                m = (m & (at_zero - _ONE)) | at_zero
        while m != 0:
            c = w * 64 + _lowest(m)
            if x[c] == 0:
                return c
            k = state[c]
            if (gain[k] >= h) if length[k] < own else (lower[k] > g):
                return c
            m &= m - _ONE
    return -1


@njit(cache=True)
def _first_at_or_after(position: int, waiting: Array, running: Array) -> int:
    """The first job at or after `position` that waits or runs below its end, or -1."""
    first = position >> 6
    for w in range(first, waiting.shape[0]):
        m = (waiting[w] | running[w]) & _from(w, position, first)
        if m != 0:
            return w * 64 + _lowest(m)
    return -1


@njit(cache=True)
def rounds(reg: Array, x: Array, state: Array, lows: Array, end: Array, last_tabled: Array,
           start: Array, start_band: Array, length: Array, gain: Array, lower: Array,
           length_band: Array, gain_band: Array, h_band: Array, least_band: Array,
           shorter: Array, gain_from: Array, start_below: Array, strong: int,
           waiting: Array, running: Array, chain: Array, by_min: Array) -> int:
    """Hand out GPUs until none is left or no job takes one (return 0), or until a job
    grows past its tabled states (return 1, the job in reg[PENDING]: write its state at
    reg[NEW_STATE] and call again). Every array but the tables' first part is changed in
    place, as `run_interpreted` changes its lists and masks."""
    free, position, depth = reg[FREE], reg[POSITION], reg[DEPTH]
    by_min_left, waiting_count = reg[BY_MIN], reg[WAITING]
    pending = reg[PENDING]
    n = x.shape[0]
    while True:
        if pending >= 0:  # the grant stopped for a state computed in Python
            _move(pending, state[pending], reg[NEW_STATE], state, length_band, gain_band,
                  shorter, gain_from)
            pending = -1
        else:
            # (1) the walk, from the last takeover before `position`
            if depth > 0:
                incumbent, after = chain[depth - 1], position - 1
            else:
                incumbent = _first_at_or_after(position, waiting, running)
                if incumbent < 0:
                    break
                after = incumbent
                chain[0] = incumbent
                depth = 1
            while True:
                c = _first_takeover(incumbent, after, x, state, start, start_band, length,
                                    gain, lower, length_band, h_band, least_band, shorter,
                                    gain_from, start_below, strong, waiting, running,
                                    waiting_count)
                if c < 0:
                    break
                chain[depth] = c
                depth += 1
                incumbent = after = c
            if free <= 0:
                break
            # (2) the winner grows
            depth -= 1
            winner = position = chain[depth]
            word = winner >> 6
            bit = _ONE << np.uint64(winner & 63)
            if x[winner] == 0:
                x[winner] = lows[winner]
                free -= lows[winner]
                waiting[word] ^= bit
                waiting_count -= 1
                if state[winner] >= 0:
                    running[word] |= bit
            else:
                grown = x[winner] + 1
                x[winner] = grown
                free -= 1
                if grown >= end[winner]:
                    running[word] ^= bit
                else:
                    old = state[winner]
                    if old < last_tabled[winner]:
                        _move(winner, old, old + 1, state, length_band, gain_band, shorter,
                              gain_from)
                    else:
                        reg[FREE], reg[POSITION], reg[DEPTH] = free, position, depth
                        reg[BY_MIN], reg[WAITING], reg[PENDING] = (
                            by_min_left, waiting_count, winner)
                        return 1
        # (3) jobs at 0 whose min no longer fits leave
        if waiting_count > 0 and lows[by_min[by_min_left - 1]] > free:
            gone = n
            while by_min_left > 0 and lows[by_min[by_min_left - 1]] > free:
                by_min_left -= 1
                i = by_min[by_min_left]
                if x[i] == 0:
                    bit = _ONE << np.uint64(i & 63)
                    if waiting[i >> 6] & bit:
                        waiting[i >> 6] ^= bit
                        waiting_count -= 1
                    gone = min(gone, i)
            if gone < n:
                position = min(position, gone)
                while depth > 0 and chain[depth - 1] >= position:
                    depth -= 1
    reg[FREE], reg[POSITION], reg[DEPTH] = free, position, depth
    reg[BY_MIN], reg[WAITING], reg[PENDING] = by_min_left, waiting_count, -1
    return 0
