"""Exact allocation over GPU counts when the objective is a sum over jobs.

Several algorithms (Pollux, Voda) score each job by a function u_j(n) of the GPUs
it gets alone. The best allocation under a capacity is then a knapsack with one
choice per job, solved exactly by a dynamic program over (jobs x GPUs).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import TypeVar

import numpy as np

from voda.core.allocation.count_bounds import column_bound
from voda.core.model import Cluster

FROM_CLUSTER = 0  # `gpus_per_node`: the size of the nodes decide() allocates on
DEFAULT_GPUS_PER_NODE = 4  # what FROM_CLUSTER means when an algorithm is called without one

Algorithm = TypeVar("Algorithm")
# A fold table is trimmed by the bound (`best_counts`) once it has grown past TRIM_GROWTH
# times its width at the last trim and TRIM_MIN more columns: a trim costs a few passes.
TRIM_GROWTH, TRIM_MIN = 1.25, 64
# The bound pays for itself (a few passes over every job's values, a trim now and then)
# from about this many jobs: with it the program takes 0.83-0.87 x as long at 100 jobs on
# 512 GPUs, 0.62-0.75 x at 300 on 1,024, 0.53-0.97 x at 1,000 on 4,096 (Voda's and
# Pollux's utilities of bench/allocate.py's jobs); 1.04-2.35 x at 20 to 64 jobs.
BOUND_MIN_JOBS = 100
# A fold of fewer columns than this is worked out on Python floats (`_fold_max_narrow`):
# a NumPy call per count costs more than the few sums.
NARROW_COLUMNS = 12
PYTHON_LAYOUT_JOBS = 32  # `_layout`: below this many jobs, on Python floats
# A stored fold table reaches this many times the capacity of the call that made it (or the
# most its jobs take, if less): a later call at an offer up to that finds it whole, and a
# first call at a small capacity does not fold every column its jobs could take.
TABLE_REACH = 2
LOCAL_MIN_JOBS = 64  # `_options`, `_bands`: from this many jobs, NumPy passes beat a loop


def packs(cap: int, per_node: int) -> np.ndarray:
    """Counts 0..cap that pack onto nodes of `per_node` GPUs without fragmenting them:
    powers of two below a node (within one node), multiples of a node above."""
    return packing(cap, per_node).copy()


@functools.lru_cache(maxsize=1024)
def packing(cap: int, per_node: int) -> np.ndarray:
    """`packs`, computed once per (cap, per_node) and shared: read-only. A decision asks
    for the same few caps for every job."""
    n = np.arange(cap + 1)
    power_of_two = (n > 0) & ((n & (n - 1)) == 0)
    fits = (n % per_node == 0) | ((n < per_node) & power_of_two & (per_node % np.maximum(n, 1)
                                                                   == 0))
    fits.setflags(write=False)
    return fits


@functools.lru_cache(maxsize=1024)
def packing_counts(cap: int, per_node: int) -> np.ndarray:
    """The counts 1..cap that pack (`packs`), ascending; read-only, shared."""
    counts = np.flatnonzero(packing(cap, per_node)[1:]) + 1
    counts.setflags(write=False)
    return counts


@functools.lru_cache(maxsize=4096)
def largest_packing(most: int, per_node: int) -> int:
    """The largest count from 1 to `most` (>= 1) that packs: one GPU always does."""
    return int(packing_counts(most, per_node)[-1])


@functools.lru_cache(maxsize=256)
def largest_packings(most: int, per_node: int) -> np.ndarray:
    """`largest_packing(m, per_node)` of every m = 0..most (0 at m = 0); read-only, shared."""
    fits = packing(most, per_node)
    largest = np.maximum.accumulate(np.where(fits, np.arange(most + 1), 0))
    largest.setflags(write=False)
    return largest


def no_slower(seconds: np.ndarray, lo: int) -> np.ndarray:
    """Per count n = 0..len - 1, whether n >= lo and its time `seconds[n]` is no more than
    at any count from lo up to n: the counts a job may be given without one of fewer
    GPUs (it may take) being faster. `lo` (its min) always is, where it exists."""
    ok = np.zeros(len(seconds), dtype=bool)
    lo = max(lo, 0)
    if lo < len(seconds):
        tail = seconds[lo:]
        ok[lo:] = tail <= np.minimum.accumulate(tail)
        ok[lo] = True
    return ok


def that_pack(fast: np.ndarray, per_node: int) -> np.ndarray:
    """Of the counts a job may take (`fast`, as `no_slower` gives them; 0 aside), those
    that pack onto nodes of `per_node` GPUs; all of them when none packs, so a job whose
    sizes do not pack (a rigid 3 or 6) still runs rather than waits for ever."""
    packed = fast & packing(len(fast) - 1, per_node)
    packed[0] = False
    return packed if packed.any() else fast.copy()


def no_slower_rows(seconds: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """`counts.no_slower` of each row of `seconds` (jobs x counts) from its row's `lo`."""
    width = seconds.shape[1]
    lo = np.maximum(lo, 0)
    from_lo = np.arange(width) >= lo[:, None]
    # Counts below lo read +inf: min(inf, x) is x, so the running minimum from lo is
    # the one `no_slower` takes over seconds[lo:].
    tail = np.where(from_lo, seconds, np.inf)
    ok = from_lo & (tail <= np.minimum.accumulate(tail, axis=1))
    inside = np.flatnonzero(lo < width)
    ok[inside, lo[inside]] = True
    return ok


def that_pack_rows(fast: np.ndarray, per_node: int) -> np.ndarray:
    """`counts.that_pack` of each row of `fast` (jobs x counts, every row one cap)."""
    packed = fast & packing(fast.shape[1] - 1, per_node)
    packed[:, 0] = False
    none = ~packed.any(axis=1)
    packed[none] = fast[none]
    return packed


class FoldTables:
    """The fold tables of `best_counts` calls on the same jobs at other capacities, to
    reuse: the table of jobs j.. at column c (their best total within c GPUs) is the same
    whatever the capacity, so a call whose band a stored table covers reads it instead of
    folding again (the quota layer runs a queue at several offers in one decision).

    A job's utilities are named by a key the caller gives (equal keys: equal values, to
    the last bit); the jobs j.. by the chain of their keys."""

    def __init__(self) -> None:
        self._suffixes: dict[tuple[Hashable, int], int] = {}
        self._layouts: dict[int, Layout] = {}
        self._tables: dict[tuple[bool, int], tuple[int, Table]] = {}

    def chain(self, keys: Sequence[Hashable]) -> list[int]:
        """Per job, the id of the jobs from it to the last (named by their keys)."""
        ids = []
        after = -1
        for key in reversed(keys):
            after = self._suffixes.setdefault((key, after), len(self._suffixes))
            ids.append(after)
        return ids[::-1]

    def layout(self, jobs: int, utilities: Sequence[np.ndarray]) -> Layout:
        """`_layout(utilities)`, kept for the jobs named `jobs` (a `chain` id)."""
        held = self._layouts.get(jobs)
        if held is None:
            held = self._layouts[jobs] = _layout(utilities)
        return held

    def covering(self, key: tuple[bool, int], lo: int, hi: int
                 ) -> tuple[int, Table] | None:
        """A stored table of the jobs `key` (the fold that built it, a `chain` id) over
        columns lo..hi at least, and the column it starts at."""
        held = self._tables.get(key)
        if held is not None and held[0] <= lo and held[0] + len(held[1]) > hi:
            return held
        return None

    def keep(self, key: tuple[bool, int], lo: int, table: Table) -> None:
        """Store a table (columns lo..) where it reaches higher than the one held."""
        held = self._tables.get(key)
        if held is None or held[0] + len(held[1]) < lo + len(table):
            self._tables[key] = (lo, table)


def best_counts(utilities: Sequence[np.ndarray], capacity: int,
                tables: FoldTables | None = None,
                keys: Sequence[Hashable] = (), bounded: bool | None = None) -> list[int]:
    """Counts n_j maximising the sum of u_j(n_j) with sum n_j <= capacity (dynamic program).

    `utilities[j][n]` is job j's value at n GPUs (-inf: not allowed; n = 0 must be
    allowed). Exact. Jobs are folded from the last to the first, then decided from the
    first: among equal totals the earlier job takes the largest of the counts that tie
    (an idle GPU helps no one, and ties go to the job listed first).

    A fold reads only the counts a job may take (and its largest, which is what the
    tie rule picks where every count is -inf): a count at -inf never wins a column, so
    leaving its row out changes nothing, and the packing rules leave most counts out.

    A fold keeps only the columns the decisions can read (`_bands`): job j is decided
    with at least the capacity less the most the jobs before it can take, and at most
    the capacity; and the best total of jobs j.. is the same at every column past the
    most they can take together (every count fits there), so the columns above that
    are read off its last. Each column adds and compares the same numbers, in the same
    order, as the fold over every column: the same counts, to the last bit.

    A fold keeps only its table of best totals, not which count won each column: the
    decision works a job's count out again at the one column it reads, from the table
    of the jobs after it (the same sums, compared in the same order).

    `tables` with `keys` (one per job, naming its utilities): fold tables stored by
    earlier calls on the same jobs after j are read where they cover job j's band, and
    this call's are stored, each up to the most the jobs j.. can take on any capacity or
    TABLE_REACH times this capacity if less (so a call at up to that capacity finds it
    whole; a stored table is read where it covers the columns the call reads). A
    column's total is the same numbers compared in the same order in any band, so the
    counts are the same.

    `bounded` (without `tables`, whose folds are kept for other capacities; None: from
    BOUND_MIN_JOBS jobs): each fold table keeps only the columns the
    decision may read by a Lagrangian bound (voda.core.allocation.count_bounds), and the
    next fold only the columns those reach; a column left out reads -inf below the table
    and its last value above it, never more than its total, and the columns the decision
    reads keep theirs: the same counts.
    """
    if tables is not None and len(keys) != len(utilities):
        raise ValueError(f"keys: one per job, got {len(keys)} for {len(utilities)} jobs")
    apart = _counts_apart(utilities, capacity)
    if apart is not None:
        return apart
    room = max(capacity, 0)
    tops = ([min(len(u) - 1, room) for u in utilities] if len(utilities) < LOCAL_MIN_JOBS
            else np.minimum(np.fromiter(map(len, utilities), dtype=np.int64,
                                        count=len(utilities)) - 1, room).tolist())
    bands = needed = _bands(tops, capacity)
    if tables is not None:  # up to the most the jobs j.. take, within TABLE_REACH x capacity
        reach = TABLE_REACH * room
        most = itertools.accumulate(len(u) - 1 for u in reversed(utilities))
        bands = [(lo, min(top, max(reach, hi))) for (lo, hi), top in zip(
            needed, list(most)[::-1], strict=True)]
    chain = tables.chain(keys) if tables is not None else []
    starts, options, values, exact_max = (
        tables.layout(chain[0], utilities) if chain else _layout(utilities))
    if bounded is None:
        bounded = len(tops) >= BOUND_MIN_JOBS
    bound = (column_bound(utilities, capacity, values)
             if bounded and tables is None and exact_max else None)
    if bound is not None:  # the counts no decision takes left out (none: all kept)
        options = [kept or rows for kept, rows in zip(bound.rows, options, strict=True)]
        pads = _pads(options)
    best = np.zeros(1)  # the best of no jobs: 0 at every column from 0 up
    below = 0  # `best` holds the columns from `below` up; past its end, its last value
    folded = []  # per job, last first: the table of the jobs after it, from column `below`
    # Per job folded on Python floats, the count it takes at each column of its fold,
    # from the column in `picked_from`.
    picked: dict[int, list[int | None]] = {}
    picked_from: dict[int, int] = {}
    trimmed = TRIM_MIN  # a table is trimmed by the bound once it is wider (a test costs)
    end = 0  # the last column `best` holds (past it, padding that holds its value)
    for j in range(len(starts) - 1, -1, -1):
        first, rows, (lo, hi) = starts[j], options[j], bands[j]
        extra = 0
        if bound is not None:  # below `below` no column is read; past the top, the top's
            if len(rows) == 1:  # one count: the table after it, moved and added to
                n = rows[0]
                if type(best) is list:  # a fold on floats made it
                    best = np.array(best)
                folded.append((best, below))
                np.add(best, values[first + n], out=best)  # (no pick reads it: one count)
                below, end = below + n, end + n
                bands[j] = (below, end)
                continue
            # (a decision past the columns its counts reach from the table reads its last:
            # at least one column is worked out, every count reading the table's last)
            lo = max(lo, below)
            hi = max(min(hi, end + rows[-1]), lo)
            bands[j] = (lo, hi)
            if j:  # padded for the next folds' reads past the end
                extra = min(pads[j], capacity)
        if tables is not None:
            key = (exact_max, chain[j])
            held = tables.covering(key, lo, needed[j][1])  # the columns this call reads
            if held is not None:  # (a decision reads past a table's end its last value)
                folded.append((best, below))
                below, best = held
                continue
        if exact_max and hi - lo < NARROW_COLUMNS:  # a few columns: on Python floats
            folded.append((best, below))
            value, picked[j] = _fold_max_narrow(best, below, lo, hi, rows, values, first,
                                                extra)
            picked_from[j] = lo
            if tables is not None:
                tables.keep(key, lo, value)
            end = hi
            best, below = value, lo
            continue
        reach = hi - below + 1  # sources c - n for n = 0 reach up to hi
        if type(best) is list:  # a fold on floats made it
            best = np.array(best)
        if reach > len(best):
            best = np.concatenate((best, best[-1:].repeat(reach - len(best))))
        folded.append((best, below))
        if exact_max:
            value = _fold_max(best, below, lo, hi, rows, values, first, extra)
        else:
            value = _fold_in_order(best, below, lo, hi, rows, values, first)
        if tables is not None:
            tables.keep(key, lo, value)
        end = hi
        if bound is not None and j and hi - lo + 1 > trimmed:
            a, b = bound.kept(j, lo, value[:hi - lo + 1])
            value, lo, end = value[a:b + 1], lo + a, lo + b
            trimmed = TRIM_GROWTH * len(value) + TRIM_MIN
        best, below = value, lo
    counts = []
    left = capacity
    if not picked:  # every count worked out again at its column
        for first, rows, (_, hi), (after, base) in zip(starts, options, bands,
                                                        reversed(folded), strict=True):
            n = _pick(after, base, min(left, hi), rows, values, first)
            counts.append(n)
            left -= n
        return counts
    for j, (first, rows, (_, hi), (after, base)) in enumerate(
            zip(starts, options, bands, reversed(folded), strict=True)):
        column = min(left, hi)
        picks = picked.get(j)
        at = column - picked_from[j] if picks is not None else -1
        n = picks[at] if 0 <= at < len(picks) else None
        if n is None:  # not noted: worked out again at its column
            n = _pick(after, base, column, rows, values, first)
        counts.append(n)
        left -= n
    return counts


def _counts_apart(utilities: Sequence[np.ndarray], capacity: int) -> list[int] | None:
    """The counts where the capacity holds every job at its largest count and no value is
    NaN or +inf (None otherwise): each job is then decided apart from the others.

    Every column a fold reads is past what the jobs after it can take, so it holds their
    best total T_{j+1}, and the best total of jobs j.. is the maximum over n of
    T_{j+1} + u_j(n). Rounding to nearest never reverses an order, so that maximum is
    T_{j+1} + max_n u_j(n): the same sum the fold keeps. The decision reads the same
    totals, T_{j+1} + u_j(n), and takes the largest count of the highest (every count of
    a job at -inf ties at -inf, so it takes its largest, as the fold does)."""
    lengths = np.fromiter(map(len, utilities), dtype=np.int64, count=len(utilities))
    if not len(lengths) or int(lengths.sum()) - len(lengths) > capacity or not lengths.all():
        return None
    flat = np.concatenate(utilities) if len(utilities) > 1 else np.asarray(utilities[0])
    if not flat.max() < math.inf:  # NaN or +inf: the fold's own rules for them
        return None
    starts = np.cumsum(lengths) - lengths
    highest = np.maximum.reduceat(flat, starts).tolist()
    after = [0.0] * len(highest)  # T_{j+1}: from the last job, as the folds add them
    total = 0.0
    for j in range(len(highest) - 1, -1, -1):
        after[j] = total
        total = total + highest[j]
    if not total < math.inf:  # a sum past the largest float: the fold's rules for inf
        return None
    behind = np.repeat(after, lengths)
    best = np.repeat(np.add(after, highest), lengths)
    at = np.where(flat + behind == best, np.arange(len(flat)), -1)
    return (np.maximum.reduceat(at, starts) - starts).tolist()


Layout = tuple[list[int], list[list[int]], list[float], bool]
# A fold table: an array, or a list of Python floats where a fold on floats made it.
Table = np.ndarray | list[float]


def _layout(utilities: Sequence[np.ndarray]) -> Layout:
    """What the folds read of the utilities: where each job's start end to end, the counts
    each fold reads (`_options`), all values as Python floats, and whether none is NaN."""
    if len(utilities) < PYTHON_LAYOUT_JOBS:
        return _layout_each(utilities)
    flat, starts, options = _options(utilities)
    # Without NaN, the running maximum a fold keeps is the plain maximum of its rows, in
    # any order (max is exact); with one, the fold compares row by row as it reads them.
    return starts, options, flat.tolist(), not np.isnan(flat).any()


def _layout_each(utilities: Sequence[np.ndarray]) -> Layout:
    """`_layout` one job at a time, on Python floats (for a few jobs, the quicker)."""
    values: list[float] = []
    starts, options = [], []
    for u in utilities:
        own = u.tolist()
        starts.append(len(values))
        rows = [n for n, value in enumerate(own) if value != -math.inf]  # NaN kept
        if not rows or rows[-1] != len(own) - 1:
            rows.append(len(own) - 1)
        options.append(rows)
        values += own
    return starts, options, values, not any(map(math.isnan, values))


def _pads(options: Sequence[Sequence[int]]) -> list[int]:
    """Per job j, the columns past its table's end that the folds after it read there (its
    table is added to in place by the jobs of one count that follow, each moving it by
    that count, up to the next fold, which reads as far as its largest count)."""
    pads = [0] * len(options)
    for j in range(1, len(options)):
        rows = options[j - 1]
        pads[j] = rows[0] + pads[j - 1] if len(rows) == 1 else rows[-1]
    return pads


def _options(utilities: Sequence[np.ndarray]) -> tuple[np.ndarray, list[int], list[list[int]]]:
    """All utilities end to end, where each starts there, and each one's counts that a
    fold reads: those not -inf, and its largest (what the tie rule picks where every
    count is -inf), ascending. One pass for all jobs, not a few calls per job."""
    lengths = [len(u) for u in utilities]
    flat = np.concatenate(utilities) if utilities else np.zeros(0)
    starts = list(itertools.accumulate(lengths, initial=0))
    found = np.flatnonzero(flat != -np.inf)
    cuts = np.searchsorted(found, starts).tolist()
    local = len(lengths) >= LOCAL_MIN_JOBS  # counts from each job's start in one pass
    if local:
        owner = np.searchsorted(starts, found, side="right") - 1  # each found count's job
        found_at = (found - np.asarray(starts)[owner]).tolist()
    else:
        found_at = found.tolist()
    options = []
    for j, length in enumerate(lengths):
        rows = (found_at[cuts[j]:cuts[j + 1]] if local
                else [k - starts[j] for k in found_at[cuts[j]:cuts[j + 1]]])
        if not rows or rows[-1] != length - 1:
            rows.append(length - 1)
        options.append(rows)
    return flat, starts[:-1], options


def _fold_max(best: np.ndarray, below: int, lo: int, hi: int, rows: Sequence[int],
              values: Sequence[float], first: int, extra: int = 0) -> np.ndarray:
    """Columns lo..hi of the best total of a job (counts `rows`, ascending, its values
    at values[first + n]) and the jobs after it (`best`, from column `below`), by the
    maximum over its counts: no NaN among the totals. `extra` columns more hold the
    last one's value (as a read past the end finds it), for the next fold to read."""
    width = hi - lo + 1
    value: np.ndarray | None = None
    for n in rows:
        start = max(lo, n + below)  # (a column whose source is below `below` reads -inf)
        if start > hi:
            break
        source = best[start - n - below:hi - n - below + 1]
        if value is None:
            value = np.empty(width + extra)
            if start == lo:
                np.add(source, values[first + n], out=value[:width])
                continue
            value[:width] = -np.inf
        held = value[start - lo:width]
        np.maximum(held, source + values[first + n], out=held)
    if value is None:
        return np.full(width + extra, -np.inf)
    if extra:
        value[width:] = value[width - 1]
    return value


def _fold_max_narrow(best: Table, below: int, lo: int, hi: int, rows: Sequence[int],
                     values: Sequence[float], first: int, extra: int = 0
                     ) -> tuple[list[float], list[int | None]]:
    """`_fold_max` of a few columns, on Python floats: the same sums and the same maximum,
    a NaN total (inf less inf) making the column NaN as NumPy's maximum does, without a
    NumPy call per count; kept as a list (a table a later fold on arrays reads is made an
    array first). A source past the end of `best` reads its last value, as the padding
    `_fold_max` reads does.

    Also, per column, the count `_pick` takes there from `best`: the largest count of the
    highest total, the largest count where no total is above -inf; None where a total is
    NaN or a count is worth +inf (`_pick` then works it out, as it reads those)."""
    last = len(best) - 1
    item = best.__getitem__ if type(best) is list else best.item
    own = [(n, values[first + n]) for n in rows]
    unusual = any(value == math.inf for _, value in own)  # -inf + inf reads NaN in _pick
    totals: list[float] = []
    picks: list[int | None] = []
    for column in range(lo - below, hi - below + 1):  # the columns, from `below`
        top, pick, nan = -math.inf, rows[-1], False
        for n, value in own:  # ascending: the sources go down, a tie goes to the larger
            source = column - n
            if source < 0:
                break
            total = item(source if source < last else last) + value
            if total != total:
                nan = True
            elif total >= top and total != -math.inf:
                top, pick = total, n
        totals.append(math.nan if nan else top)
        picks.append(None if nan or unusual else pick)
    if extra:
        totals += [totals[-1]] * extra
    return totals, picks


def _fold_in_order(best: np.ndarray, below: int, lo: int, hi: int, rows: Sequence[int],
                   values: Sequence[float], first: int) -> np.ndarray:
    """As `_fold_max`, reading the counts from the largest down, a later one replacing
    only a strictly greater total (a NaN total replaces nothing, and stays put once
    the largest count wrote it)."""
    value = np.full(hi - lo + 1, -np.inf)
    for row in range(len(rows) - 1, -1, -1):  # the larger count first: it wins ties
        n = rows[row]
        start = max(lo, n)
        if start > hi:
            continue
        total = best[start - n - below:hi - n - below + 1] + values[first + n]
        if row == len(rows) - 1:  # the first row read: nothing to beat yet
            value[start - lo:] = total
            continue
        held = value[start - lo:]
        np.copyto(held, total, where=total > held)
    return value


def _pick(after: Table, below: int, column: int, rows: Sequence[int],
          values: Sequence[float], first: int) -> int:
    """The count a job takes at `column`: its fold's choice there, worked out again for
    that column alone (the same sums, compared in the same order): among equal totals
    the largest count; the largest where none is above -inf."""
    last = len(after) - 1
    item = after.__getitem__ if type(after) is list else after.item
    held, pick = -math.inf, len(rows) - 1
    for row in range(len(rows) - 1, -1, -1):
        n = rows[row]
        if n > column:
            continue
        source = column - n - below  # below the table (left out by a bound): -inf
        # .item: a Python float, the same sum as numpy's for a fraction of the time
        total = (item(min(source, last)) if source >= 0 else -math.inf) + values[first + n]
        if row == len(rows) - 1:
            held = total
        elif total > held:
            held, pick = total, row
    return rows[pick]


def _bands(tops: Sequence[int], capacity: int) -> list[tuple[int, int]]:
    """Per job, the columns [lo, hi] its fold keeps: hi, the capacity or the most it and
    the jobs after it can take, if less; lo, what is left after the jobs before it take
    their most (at least 0), and at most hi (every column past hi reads hi)."""
    if not len(tops):
        return []
    if len(tops) < LOCAL_MIN_JOBS:  # a few jobs: on Python integers, the same sums
        after = list(itertools.accumulate(reversed(tops)))[::-1]  # the most jobs j.. take
        bands = []
        before = 0  # the most jobs ..j-1 take
        for top, most_after in zip(tops, after, strict=True):
            hi = min(capacity, most_after)
            bands.append((min(max(capacity - before, 0), hi), hi))
            before += top
        return bands
    most = np.asarray(tops, dtype=np.int64)
    after = np.cumsum(most[::-1])[::-1]  # the most jobs j.. take
    before = np.cumsum(most) - most  # the most jobs ..j-1 take
    hi = np.minimum(capacity, after)
    lo = np.minimum(np.maximum(capacity - before, 0), hi)
    return list(zip(lo.tolist(), hi.tolist(), strict=True))


def check_gpus_per_node(value: object) -> None:
    """The `gpus_per_node` knob of the algorithms that pack: an integer in [1, 1024], or 0
    (FROM_CLUSTER) for the size of the cluster's nodes."""
    if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1024):
        raise ValueError(f"gpus_per_node: must be an integer in [1, 1024], or 0 for the "
                         f"cluster's node size, got {value!r}")


def per_node(gpus_per_node: int) -> int:
    """The node size an algorithm packs for (FROM_CLUSTER outside decide(): the default)."""
    return gpus_per_node or DEFAULT_GPUS_PER_NODE


def node_size(cluster: Cluster) -> int:
    """The GPUs of the cluster's most common node (ties: the larger; 0 without nodes)."""
    sizes = Counter(n.gpus for n in cluster.nodes if n.gpus > 0)
    if not sizes:
        return 0
    return max(sizes, key=lambda gpus: (sizes[gpus], gpus))


def sized_to(algorithm: Algorithm, cluster: Cluster) -> Algorithm:
    """`algorithm` packing for the cluster's nodes where its `gpus_per_node` says
    FROM_CLUSTER (the default of Voda and Pollux); otherwise `algorithm` itself."""
    if getattr(algorithm, "gpus_per_node", None) != FROM_CLUSTER:
        return algorithm
    size = node_size(cluster)
    if not size or not dataclasses.is_dataclass(algorithm) or isinstance(algorithm, type):
        return algorithm
    return dataclasses.replace(algorithm, gpus_per_node=size)


def check_seconds(knob: str, value: object) -> None:
    """A knob that is a finite number of seconds >= 0."""
    if not (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0):
        raise ValueError(f"{knob}: must be a number of seconds >= 0, got {value!r}")
