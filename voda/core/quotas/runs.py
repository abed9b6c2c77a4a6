"""The queues' algorithm runs of one quota decision, memoised, and what each queue's
algorithm takes on its guarantee, worked out only when a decision needs it
(docs/design/013-queues.md, "Cost").

A queue's demand is the sum of its jobs' max (no allocation of its jobs can hold more),
or less where the algorithm says so: `most_gpus(jobs)`, the most it gives them on any
capacity (a rigid-size algorithm runs a job at its preferred size or not at all).
What its algorithm takes on its guarantee G is at most min(G, demand), so a queue whose
jobs want more than G starts the decision at that bound (it lends nothing of G) and its
algorithm is run on G only when a run on a larger share takes less than the bound, or
when the figure is reported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter

from voda.core.allocation.base import (
    checked_allocate,
    checked_allocate_many,
    checked_result,
)
from voda.core.allocation.registry import is_builtin
from voda.core.model import Job

Allocate = Callable[[Sequence[Job], int], Mapping[str, int]]
_MAX, _NAME = attrgetter("max_workers"), attrgetter("name")


class QueueRuns:
    """Queue i's jobs under the algorithm on g GPUs, each (i, g) run once."""

    def __init__(self, algorithm: Allocate, members: Sequence[Sequence[Job]],
                 guarantee: Sequence[int]) -> None:
        self.algorithm = algorithm
        self.name = str(getattr(algorithm, "name", type(algorithm).__name__))
        # a built-in algorithm's results keep the contract: not checked run by run
        self.trusted = is_builtin(algorithm)
        self.members = members
        self.guarantee = guarantee
        most = getattr(algorithm, "most_gpus", None)  # the algorithm's own bound, if any
        self.demand = [min(sum(map(_MAX, jobs)), most(jobs) if most else math.inf)
                       for jobs in members]
        self._runs: dict[tuple[int, int], Mapping[str, int]] = {}
        # a built-in algorithm's store for runs of the same jobs at other offers, if any
        memo = getattr(algorithm, "memo", None) if self.trusted else None
        self._memo = memo() if memo is not None else None
        # a queue whose guarantee covers its demand is never offered more: its run on the
        # guarantee is its allocation (run with the first offers, `share._fill`)
        self.covered = [bool(jobs) and g > 0 and d <= g
                        for jobs, g, d in zip(members, guarantee, self.demand, strict=True)]
        self.exact = [not jobs or g == 0 for jobs, g in zip(members, guarantee, strict=True)]
        # what each queue's algorithm takes on its guarantee: 0 where it has no jobs or no
        # guarantee, else (until it is run there) the bound min(G, demand)
        self.base = [0 if exact else min(g, d)
                     for exact, g, d in zip(self.exact, guarantee, self.demand, strict=True)]

    def prefetch(self, wanted: Iterable[tuple[int, int]], keep: bool = True) -> None:
        """Run the (queue, GPUs) pairs not yet run together, where the algorithm has
        `allocate_many` (the same allocations as one call each, for less); `keep=False`:
        without the store (the queues are not run again at other offers, or seldom)."""
        if not hasattr(self.algorithm, "allocate_many"):
            return
        todo = [key for key in dict.fromkeys(wanted)
                if key not in self._runs and self.members[key[0]]]
        if len(todo) < 2:
            return
        problems = [(self.members[i], gpus) for i, gpus in todo]
        if self.trusted:
            raws = self._allocate_many(problems, keep)
            runs = [self._whole(jobs, raw, gpus)
                    for (jobs, gpus), raw in zip(problems, raws, strict=True)]
        else:
            runs = checked_allocate_many(self.algorithm, problems)  # type: ignore[arg-type]
        self._runs.update(zip(todo, runs, strict=True))

    def __call__(self, i: int, gpus: int) -> Mapping[str, int]:
        key = (i, gpus)
        if key not in self._runs:
            jobs = self.members[i]
            if not jobs or gpus == 0:  # every job at 0: the only allocation there is
                self._runs[key] = dict.fromkeys(map(_NAME, jobs), 0)
            elif self._memo is not None:
                self._runs[key] = self._whole(jobs, self._allocate_many([(jobs, gpus)])[0], gpus)
            elif self.trusted:
                self._runs[key] = self._whole(jobs, self.algorithm(jobs, gpus), gpus)
            else:
                self._runs[key] = checked_allocate(self.algorithm, jobs, gpus)
        return self._runs[key]

    def _allocate_many(self, problems: Sequence[tuple[Sequence[Job], int]], keep: bool = True
                       ) -> Sequence[Mapping[str, int]]:
        """A built-in algorithm's `allocate_many`, with its store where it has one (and
        `keep`: the store reads back only what it worked out, so a run without it has the
        same result)."""
        many = self.algorithm.allocate_many  # type: ignore[attr-defined]
        if self._memo is None or not keep:
            return many(problems)
        return many(problems, memo=self._memo)

    def _whole(self, jobs: Sequence[Job], counts: Mapping[str, int],
               gpus: int) -> Mapping[str, int]:
        """A built-in algorithm's result in the jobs' order where it names every job (they
        all do), else checked and completed."""
        if len(counts) == len(jobs):
            try:  # a plain try: a context manager costs more than the lookups, run by run
                return {name: counts[name] for name in map(_NAME, jobs)}
            except KeyError:
                pass
        return checked_result(self.name, jobs, gpus, counts)

    def used(self, i: int, gpus: int) -> int:
        return sum(self(i, gpus).values())

    def exact_base(self, i: int) -> int:
        """What queue i's algorithm takes on its guarantee, run if it was not yet."""
        if not self.exact[i]:
            self.base[i] = self.used(i, self.guarantee[i])
            self.exact[i] = True
        return self.base[i]

    def may_take_more(self, i: int, counts: Mapping[str, int], gpus: int) -> bool:
        """Whether queue i's jobs could hold more than in `counts` on `gpus` GPUs: one is
        running below its max, or one waits whose min fits in the `gpus` (not only in
        what `counts` leaves: with more GPUs an algorithm may start it in place of jobs
        it ran, as FfDLOptimizer's admission in submit order does)."""
        free = gpus - sum(counts.values())
        return free > 0 and any(
            counts.get(j.name, 0) < j.max_workers
            and (counts.get(j.name, 0) > 0 or j.min_workers <= gpus)
            for j in self.members[i])
