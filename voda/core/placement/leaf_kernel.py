"""The leaves that tie for a request in Packer._best_leaf, compiled (numba).

Every leaf's rooms come from a histogram of its nodes' free GPUs (FreeIndex.hist: row
`leaf` counts its nodes with f free GPUs at column f), which the index keeps up to date
on every take and release, so nothing is rebuilt between two requests. How many nodes
of a leaf hold k GPUs is read from the histogram, the freest nodes first, each node's
room capped. `winners` returns what the leaf table's queries give (LeafRooms.fits and
fewest_parts: Packer._best_leaf's reference, tests/test_placement_leaf_kernel.py).

Imported only on clusters of many leaves (leaf_rooms.MANY_LEAVES) and where numba is
installed: numba compiles the kernel on first use (cached on disk).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _parts(hist: np.ndarray, base: int, stride: int, k: int, cap: int) -> int:
    """How many of a leaf's largest rooms hold k GPUs (each node's room: its free GPUs up
    to `cap`); 0 when all of them do not. `hist[base + f]`: the leaf's nodes with f free."""
    left, parts = k, 0
    for free in range(stride - 1, 0, -1):
        nodes = hist[base + free]
        if nodes == 0:
            continue
        room = free if free < cap else cap
        if nodes * room >= left:
            return parts + (left + room - 1) // room
        parts += nodes
        left -= nodes * room
    return 0


@njit(cache=True)
def winners(hist: np.ndarray, stride: int, first: np.ndarray, then_rest: bool, k: int,
            cap: int, max_nodes: int, fewest: int, candidates: int, out: np.ndarray) -> int:
    """The leaves `_best_leaf` scores, written to `out`; their count (0: none holds k).

    The leaves are scanned in order: `first`, then (`then_rest`) every other leaf by id.
    A leaf holds k GPUs on `parts` of its rooms (at most `max_nodes`, where not negative).
    The first `candidates` leaves needing at most `fewest` rooms win, in scan order; when
    none does, the scanned leaves needing the fewest rooms win, in id order."""
    leaves = len(hist) // stride
    parts_of = np.zeros(leaves, dtype=np.int64)  # 0: not scanned or not holding k
    scanned = np.zeros(leaves, dtype=np.bool_)
    for leaf in first:
        scanned[leaf] = True
    count, least = 0, 0
    for pos in range(len(first) + (leaves if then_rest else 0)):
        if pos < len(first):
            leaf = first[pos]
        else:
            leaf = pos - len(first)
            if scanned[leaf]:
                continue
        parts = _parts(hist, leaf * stride, stride, k, cap)
        if parts == 0 or (max_nodes >= 0 and parts > max_nodes):
            continue
        if parts <= fewest:
            out[count] = leaf
            count += 1
            if count >= candidates:
                return count
        parts_of[leaf] = parts
        if least == 0 or parts < least:
            least = parts
    if count or least == 0:
        return count
    for leaf in range(leaves):
        if parts_of[leaf] == least:
            out[count] = leaf
            count += 1
    return count


@njit(cache=True)
def _leaf_free(hist: np.ndarray, base: int, stride: int) -> int:
    total = 0
    for free in range(1, stride):
        total += free * hist[base + free]
    return total


@njit(cache=True)
def best_node(free: np.ndarray, hist: np.ndarray, leaves: np.ndarray, history: np.ndarray,
              weights: np.ndarray, near_a: int, near_b: int, spine_a: int, spine_b: int,
              k: int, candidates: int, spread: bool, seen: np.ndarray, stamp: int) -> int:
    """Packer._best_node of a request that is neither latency-sensitive nor limited to a
    domain, on a cluster whose leaves hold consecutive node ids in leaf order (its
    reference: the same candidates in the same order, scored by the same operations in
    the same order, so the same floats); -1 where no node has room.

    `leaves`: per leaf its first node, node count, spine and capacity (rows 0-3);
    `near_a` < `near_b`: the request's near leaves (at most two; -1 for none), `spine_a`
    and `spine_b` its near spines (the same); `seen`: a scratch array of a cell per
    (leaf, free GPUs), a cell being seen in this call when it holds `stamp`."""
    stride = len(hist) // leaves.shape[1]
    max_cap = stride - 1
    rw, tw, uw, hw = weights[0], weights[1], weights[2], weights[3]
    best, best_score = -1, 0.0
    left = candidates
    # the tightest nodes with room, `candidates` of them, by free GPUs then id; then
    # the nodes with room of the near leaves, leaf by leaf
    near_count = (near_a >= 0) + (near_b >= 0)
    for turn in range(2):
        rounds = (max_cap - k + 1) if turn == 0 else near_count
        for r in range(max(rounds, 0)):
            if turn == 0:
                if left == 0:
                    break
                want, first_leaf, last_leaf = k + r, 0, leaves.shape[1]
            else:
                leaf = near_a if r == 0 and near_a >= 0 else near_b
                want, first_leaf, last_leaf = -1, leaf, leaf + 1
            for leaf in range(first_leaf, last_leaf):
                base = leaf * stride
                if turn == 0:
                    if hist[base + want] == 0:
                        continue
                    leaf_free = -1
                else:
                    leaf_free = _leaf_free(hist, base, stride)
                    if leaf_free < k:
                        continue
                start = leaves[0, leaf]
                for i in range(start, start + leaves[1, leaf]):
                    f = free[i]
                    if (turn == 0 and f != want) or f < k:
                        continue
                    if turn == 0:
                        left -= 1
                    if seen[base + f] != stamp:
                        seen[base + f] = stamp
                        if leaf_free < 0:
                            leaf_free = _leaf_free(hist, base, stride)
                        fit = 1.0 - (f - k) / max_cap
                        spine = leaves[2, leaf]
                        if leaf in (near_a, near_b):
                            alignment = 1.0
                        elif spine in (spine_a, spine_b):
                            alignment = 0.5
                        else:
                            alignment = 0.0
                        utilization = 1.0 - leaf_free / leaves[3, leaf]
                        if spread:
                            fit, utilization = 1.0 - fit, 1.0 - utilization
                        score = rw * fit + tw * alignment + uw * utilization + hw * history[leaf]
                        if best < 0 or score > best_score or (score == best_score and i < best):
                            best_score, best = score, i
                    if turn == 0 and left == 0:
                        break
                if turn == 0 and left == 0:
                    break
    return best


@njit(cache=True)
def spread_first(hist: np.ndarray, leaf_spine: np.ndarray, rank: np.ndarray, near_a: int,
                 near_b: int, spine_a: int, spine_b: int, count: int, out: np.ndarray) -> int:
    """The first `count` leaves with free GPUs in Packer._spread_order's order, written to
    `out`; how many there are. A leaf's place is (rank[alignment, free GPUs], id), its
    alignment 0 for a near leaf (`near_a`, `near_b`; -1 for none), 1 for a leaf of a near
    spine (`spine_a`, `spine_b`), 2 else; `rank`: the order of those (alignment, free)
    pairs by score then free GPUs, equal pairs equal."""
    leaves = len(leaf_spine)
    stride = len(hist) // leaves
    keys = np.empty(leaves, dtype=np.int64)
    found = 0
    for leaf in range(leaves):
        free = _leaf_free(hist, leaf * stride, stride)
        if free == 0:
            continue
        if leaf in (near_a, near_b):
            alignment = 0
        elif leaf_spine[leaf] in (spine_a, spine_b):
            alignment = 1
        else:
            alignment = 2
        keys[found] = rank[alignment, free] * leaves + leaf
        found += 1
    order = np.sort(keys[:found])
    taken = min(count, found)
    for pos in range(taken):
        out[pos] = order[pos] % leaves
    return taken


@njit(cache=True)
def tightest(hist: np.ndarray, stride: int, leaves: np.ndarray) -> tuple[int, int, int]:
    """Of these leaves (not none): the fewest free GPUs of one, the fewest above that (-1
    where none has more) and the lowest id of those with the fewest."""
    least, above, lowest = -1, -1, -1
    for leaf in leaves:
        free = _leaf_free(hist, leaf * stride, stride)
        if least < 0 or free < least:
            if least >= 0:
                above = least
            least, lowest = free, leaf
        elif free == least:
            lowest = min(lowest, leaf)
        elif above < 0 or free < above:
            above = free
    return least, above, lowest
