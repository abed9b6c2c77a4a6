"""Every leaf's largest free rooms as running totals in one NumPy table, to find at once
how many nodes of each leaf a request needs.

For a per-node cap (a node's room is its free GPUs up to the cap), row `leaf` holds
the running totals of the leaf's rooms, largest first, then a value above any request.
`parts(k)` is, for every leaf, how many of its largest rooms hold k GPUs: what
Packer._leaf_parts gives for one leaf; `fits` and `fewest_parts` answer what
Packer._best_leaf asks of it from a few columns (`parts` stays as their reference).
Rows are refreshed only for the leaves whose free GPUs changed since the last query
(FreeIndex.leaf_changes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

# Above any request: a request is at most the GPUs of one GPU type.
_ABOVE = int(np.iinfo(np.int64).max)
# Below this many leaves a scan leaf by leaf costs less than NumPy's calls.
MANY_LEAVES = 64
# Up to this many changed rows, each is written on its own (a few leaves change between
# two reads; one conversion of them all costs more).
_ROW_BY_ROW = 16
# The table's cells at most (leaves x nodes of the largest leaf); above, callers scan.
MAX_CELLS = 1 << 20


class LeafRooms:
    """Running totals of each leaf's rooms under one per-node cap."""

    def __init__(self, leaf_sizes: Sequence[int]) -> None:
        width = max(leaf_sizes, default=0)
        self.totals = np.full((len(leaf_sizes), max(width, 1)), _ABOVE, dtype=np.int64)
        self.count = np.zeros(len(leaf_sizes), dtype=np.int64)  # rooms per leaf
        self.room = np.zeros(len(leaf_sizes), dtype=np.int64)  # their GPUs per leaf
        self._seen: int | None = None  # the changes read so far (None: no row built)

    def refresh(self, changes: list[int], prefix_of: Callable[[int], list[int]]) -> None:
        """Rebuild the rows of the leaves changed since the last refresh; `changes`: the
        ids of the leaves changed, in order, one per change, never cut (FreeIndex's
        leaf_changes); `prefix_of(leaf)`: the running totals of its rooms, largest first."""
        if self._seen is None:
            changed = list(range(len(self.count)))
        else:
            changed = sorted(set(changes[self._seen:]))
        self._seen = len(changes)
        width = self.totals.shape[1]
        if len(changed) <= _ROW_BY_ROW:
            totals, count, room = self.totals, self.count, self.room
            for leaf in changed:
                prefix = prefix_of(leaf)
                totals[leaf] = prefix + [_ABOVE] * (width - len(prefix))
                count[leaf] = len(prefix)
                room[leaf] = prefix[-1] if prefix else 0
        else:
            rows, counts, rooms = [], [], []
            for leaf in changed:
                prefix = prefix_of(leaf)
                counts.append(len(prefix))
                rooms.append(prefix[-1] if prefix else 0)
                rows.append(prefix + [_ABOVE] * (width - len(prefix)))
            self.totals[changed] = rows  # one conversion for every changed row
            self.count[changed] = counts
            self.room[changed] = rooms

    def parts(self, k: int, max_nodes: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Per leaf: how many of its largest rooms hold k GPUs, and whether they do
        (within `max_nodes` rooms when given)."""
        parts = np.count_nonzero(self.totals < k, axis=1) + 1
        limit = self.count if max_nodes is None else np.minimum(self.count, max_nodes)
        return parts, parts <= limit

    def fits(self, k: int, within: int, max_nodes: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Per leaf (k >= 1): whether `parts(k, max_nodes)` says it holds k GPUs, and
        whether it does on at most `within` of its rooms; from two columns of the table,
        not all of it."""
        fits = self.room >= k
        width = self.totals.shape[1]
        # Past a leaf's rooms a row holds a value above any request: `fits` rules it out.
        if max_nodes is not None and max_nodes < width:
            fits &= self.totals[:, max_nodes - 1] >= k
        if within > width:
            return fits, fits
        return fits, fits & (self.totals[:, within - 1] >= k)

    def fewest_parts(self, leaves: np.ndarray, k: int, start: int) -> np.ndarray | None:
        """The leaves (a mask, each holding k GPUs: `fits`) that hold k on the fewest of
        their rooms, at least `start` of them, in id order; None when there are none.
        The same as the least of `parts(k, ...)[0]` over them, a column at a time."""
        if not leaves.any():
            return None
        for parts in range(max(start, 1), self.totals.shape[1] + 1):
            # A leaf holding k on fewer rooms left the loop before: past its rooms a
            # row's value above any request does not count.
            at = leaves & (self.totals[:, parts - 1] >= k)
            if at.any():
                return np.flatnonzero(at)
        raise AssertionError("a leaf holding k GPUs holds them on at most all its rooms")
