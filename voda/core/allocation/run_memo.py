"""What Voda works out for each problem of an `allocate_many` call, and, over one quota
decision, kept for the runs of the same queue at other offers (docs/design/013-queues.md,
"A queue's runs at several offers").

The quota layer runs a queue's jobs at each offer its water fill makes, and most of what
a run works out does not move with the offer: the curves move only with the capacity
where it is below a job's max and, with goodput models, with the nodes it spans; the
weights but for how the jobs scale at their share with the curves alone; the utilities
with the curves and weights; and the count program's table of the jobs after one with
their utilities alone (`counts.FoldTables`). A memo keeps each per problem under what it
depends on and reads it back by identity, so a run reads the same values, to the last
bit, as it would work out; `Priced` works everything out. `ProblemMemo` is the part
any algorithm that prices jobs per problem could keep (its utilities and fold tables).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from voda.core.allocation.counts import FoldTables, best_counts
from voda.core.model import Job

Curves = Callable[[Sequence[Job], Sequence[Any], Sequence[int]], list[Any]]
Utilities = Callable[[Sequence[Job], Sequence[Any], np.ndarray], list[np.ndarray]]
Floors = Callable[[Sequence[np.ndarray], Sequence[tuple[int, int]], Sequence[Sequence[bool]]],
                  list[np.ndarray]]
ManyWeights = Callable[[Sequence[tuple[Sequence[Job], Sequence[Any]]]], list[np.ndarray]]
TailFloors = Callable[[Sequence[Any], int, int], list[bool]]
_MAX, _GOODPUT = attrgetter("max_workers"), attrgetter("goodput")


class Priced:
    """Each step of a call worked out for every problem, the problems' jobs together."""

    def curves(self, problems: Sequence[tuple[Sequence[Job], Sequence[Any], int]], node: int,
               compute: Curves) -> list[list[Any]]:
        """Per problem (its jobs, their borrowed models, its capacity), its jobs' curves."""
        flat = compute([j for jobs, _, _ in problems for j in jobs],
                       [m for _, models, _ in problems for m in models],
                       [c for jobs, _, c in problems for _ in jobs])
        return split(flat, [len(jobs) for jobs, _, _ in problems])

    def weights_many(self, jobs: Sequence[Sequence[Job]], curves: Sequence[Sequence[Any]],
                     compute: ManyWeights) -> list[np.ndarray]:
        """Per problem, its jobs' weights from their curves, all problems in one call."""
        return compute(list(zip(jobs, curves, strict=True)))

    def floors(self, curves: Sequence[Any], budget: int, node: int,
               compute: TailFloors) -> list[bool]:
        """Per job of one problem, whether its tail floor holds (the first `budget`)."""
        return compute(curves, budget, node)

    def utilities(self, jobs: Sequence[Sequence[Job]], curves: Sequence[Sequence[Any]],
                  weights: Sequence[np.ndarray], compute: Utilities) -> list[list[np.ndarray]]:
        """Per problem, its jobs' utilities at their curves and weights."""
        flat = compute([j for part in jobs for j in part], [c for part in curves for c in part],
                       np.concatenate(weights))
        return split(flat, list(map(len, jobs)))

    def counts(self, rows: Sequence[np.ndarray], capacity: int) -> list[int]:
        """The count program's counts of one problem's utilities."""
        return best_counts(rows, capacity)

    def floored(self, rows: Sequence[Sequence[np.ndarray]], floored: Sequence[Sequence[bool]],
                compute: Floors) -> list[list[np.ndarray]]:
        """Per problem, its utilities with the floored jobs' value at no GPUs lowered."""
        lengths = list(map(len, rows))
        spans = list(itertools.pairwise(itertools.accumulate(lengths, initial=0)))
        return split(compute([r for part in rows for r in part], spans, floored), lengths)


class ProblemMemo:
    """Results kept per problem under a key, and the count program's fold tables. What it
    keeps holds the objects its keys name by id, so no id is reused meanwhile."""

    def __init__(self, table_min_jobs: int = 0) -> None:
        """`table_min_jobs`: a problem of fewer jobs is counted without the fold tables
        (naming its jobs' chain and storing its tables cost more than they save where a
        queue's later runs seldom read the same utilities)."""
        self.table_min_jobs = table_min_jobs
        self.tables = FoldTables()
        self.rows: dict[Hashable, tuple[Any, list[np.ndarray]]] = {}  # utilities
        # each list of jobs' priority classes (`base.allocate_many_by_priority`)
        self.classes: dict[int, tuple[Sequence[Job], list[list[Job]]]] = {}

    def counts(self, rows: Sequence[np.ndarray], capacity: int) -> list[int]:
        """The count program's counts, reading and storing the fold tables of a problem of
        `table_min_jobs` jobs or more (its rows kept here, so equal rows are one object)."""
        if len(rows) < self.table_min_jobs:
            return best_counts(rows, capacity)
        return best_counts(rows, capacity, self.tables, self.keys(rows))

    def keys(self, rows: Sequence[np.ndarray]) -> list[Hashable]:
        """The keys that name the rows in `tables`: equal rows kept here are one object."""
        return list(map(id, rows))

    @staticmethod
    def kept(store: dict[Hashable, tuple[Any, list[Any]]], keys: Sequence[Hashable],
             problems: Sequence[Any], compute: Callable[[list[Any]], list[list[Any]]]
             ) -> list[list[Any]]:
        """Per problem, what `store` keeps under its key, the rest computed together by
        `compute(problems)` and kept (with the problem, which holds what the key names)."""
        todo: dict[Hashable, int] = {}
        for p, key in enumerate(keys):
            if key not in store:
                todo.setdefault(key, p)
        if todo:
            made = compute([problems[p] for p in todo.values()])
            for (key, p), result in zip(todo.items(), made, strict=True):
                store[key] = (problems[p], result)
        return [store[key][1] for key in keys]


class VodaMemo(ProblemMemo, Priced):
    """`Priced` with Voda's curves, weights, utilities and floors kept per problem under
    what they depend on, and the count program's fold tables."""

    def __init__(self) -> None:
        super().__init__()
        self._curves: dict[Hashable, tuple[Any, list[Any]]] = {}
        self._weights: dict[int, tuple[Sequence[Any], np.ndarray]] = {}
        self._floored: dict[Hashable, tuple[Any, list[np.ndarray]]] = {}
        self._floors: dict[int, tuple[Sequence[Any], list[int]]] = {}

    def curves(self, problems: Sequence[tuple[Sequence[Job], Sequence[Any], int]], node: int,
               compute: Curves) -> list[list[Any]]:
        """A problem's curves depend on its capacity where it is below a job's max (a
        curve's cap) and, with a goodput model, through the nodes it spans."""
        keys = []
        for jobs, models, capacity in problems:
            modelled = any(map(_GOODPUT, jobs)) or any(models)
            keys.append((tuple(map(id, jobs)), tuple(map(id, models)),
                         capacity if capacity < max(map(_MAX, jobs)) else -1,
                         max(capacity // node, 1) if modelled else 0))
        return self.kept(self._curves, keys, problems,
                          lambda todo: super(ProblemMemo, self).curves(todo, node, compute))

    def weights_many(self, jobs: Sequence[Sequence[Job]], curves: Sequence[Sequence[Any]],
                     compute: ManyWeights) -> list[np.ndarray]:
        """Copies of the weights kept for the same curves (they name the jobs), those of
        the curves not seen yet worked out together."""
        todo = {id(part): (members, part) for members, part in zip(jobs, curves, strict=True)
                if id(part) not in self._weights}
        if todo:
            for (key, (_, part)), made in zip(todo.items(), compute(list(todo.values())),
                                              strict=True):
                self._weights[key] = (part, made)
        return [self._weights[id(part)][1].copy() for part in curves]

    def floors(self, curves: Sequence[Any], budget: int, node: int,
               compute: TailFloors) -> list[bool]:
        """The tail floors of the same curves at another budget: the first `budget` of
        the jobs floored on an unbounded one (`compute` floors them in order)."""
        held = self._floors.get(id(curves))
        if held is None:
            every = compute(curves, len(curves), node)
            held = self._floors[id(curves)] = (curves, [i for i, on in enumerate(every) if on])
        floored = [False] * len(curves)
        for i in held[1][:max(budget, 0)]:
            floored[i] = True
        return floored

    def utilities(self, jobs: Sequence[Sequence[Job]], curves: Sequence[Sequence[Any]],
                  weights: Sequence[np.ndarray], compute: Utilities) -> list[list[np.ndarray]]:
        """A problem's utilities depend on its curves (which name its jobs) and weights."""
        keys = [(id(part), w.tobytes()) for part, w in zip(curves, weights, strict=True)]
        problems = list(zip(jobs, curves, weights, strict=True))
        return self.kept(self.rows, keys, problems, lambda todo: super(ProblemMemo, self)
                          .utilities(*zip(*todo, strict=True), compute))

    def floored(self, rows: Sequence[Sequence[np.ndarray]], floored: Sequence[Sequence[bool]],
                compute: Floors) -> list[list[np.ndarray]]:
        """A problem's floored utilities depend on its utilities and which jobs are
        floored; a problem without floors keeps its utilities."""
        keys = [(id(part), tuple(floors)) for part, floors in zip(rows, floored, strict=True)]
        problems = list(zip(rows, floored, strict=True))
        return [list(part) if not any(floors) else done for part, floors, done in zip(
            rows, floored, self.kept(self._floored, keys, problems, lambda todo: super(
                VodaMemo, self).floored(*zip(*todo, strict=True), compute)), strict=True)]


def split(flat: Sequence[Any], lengths: Sequence[int]) -> list[list[Any]]:
    """`flat` cut into consecutive lists of `lengths`."""
    ends = list(itertools.accumulate(lengths))
    return [list(flat[a:b]) for a, b in zip([0, *ends[:-1]], ends, strict=True)]
