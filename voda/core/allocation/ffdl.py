"""FfDL optimizer (Saxena et al., MASCOTS'20): maximize the sum of speedups.

A dynamic program over the jobs in submit order picks n_j in {0} U [min_j, max_j]
for every job so that sum(n_j) <= capacity and sum(S_j(n_j)) is largest. The
program is bounded so one allocation stays fast (docs/design/001-allocation.md):

- per-job counts are capped at min(max_j, capacity);
- only a prefix of the submit order (of the jobs whose min fits at all) is
  considered: the shortest prefix whose
  min workers add up to `horizon_factor` x capacity (and at most `max_jobs`
  jobs); later jobs get 0 in this round.

Speedups are scaled to integers (micro-units) so that equal objectives are
exactly equal; among allocations with the best objective, earlier jobs (in
submit order) get more GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from voda.core.allocation.base import by_submit
from voda.core.estimate import speed_model
from voda.core.model import Job

SPEEDUP_SCALE = 1_000_000  # speedups in micro-units: exact integer sums


@dataclass(frozen=True)
class FfDLOptimizer:
    """Largest total speedup, by dynamic programming over a bounded job prefix."""

    name: str = "FfDLOptimizer"
    horizon_factor: float = 2.0
    max_jobs: int | None = None

    def __post_init__(self) -> None:
        if not self.horizon_factor > 0:
            raise ValueError(f"horizon_factor: must be positive, got {self.horizon_factor}")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ValueError(f"max_jobs: must be at least 1 or None, got {self.max_jobs}")

    def horizon(self, ordered: Sequence[Job], capacity: int) -> int:
        """How many jobs, from the front of `ordered`, the program considers."""
        limit = len(ordered) if self.max_jobs is None else min(len(ordered), self.max_jobs)
        target = self.horizon_factor * capacity
        total = 0
        for i, job in enumerate(ordered[:limit]):
            total += job.min_workers
            if total >= target:
                return i + 1
        return limit

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        ordered = by_submit(jobs)
        allocation = {job.name: 0 for job in ordered}
        if capacity <= 0 or not ordered:
            return allocation
        fitting = [j for j in ordered if j.min_workers <= capacity]
        considered = fitting[: self.horizon(fitting, capacity)]
        counts = best_counts(considered, capacity)
        for job, n in zip(considered, counts, strict=True):
            allocation[job.name] = n
        return allocation


def _speedup_table(job: Job, top: int) -> np.ndarray:
    """Integer speedups S(k) * SPEEDUP_SCALE for k = 0..top."""
    model = speed_model(job)
    values = [0.0] + [model.speedup(k) for k in range(1, top + 1)]
    return np.rint(np.asarray(values) * SPEEDUP_SCALE).astype(np.int64)


def best_counts(jobs: Sequence[Job], capacity: int) -> list[int]:
    """The program itself: GPU counts per job (in the order given) of the best allocation.

    Jobs are folded in reverse, so value[i][c] is the best objective of jobs
    i.. with c GPUs; the counts are then read forwards, each job taking the
    largest count that keeps the objective optimal.
    """
    n = len(jobs)
    if n == 0:
        return []
    tops = [min(j.max_workers, capacity) for j in jobs]
    tables = [_speedup_table(j, top) for j, top in zip(jobs, tops, strict=True)]
    width = capacity + 1
    value = np.empty((n + 1, width), dtype=np.int64)
    value[n] = 0
    # Beyond the sum of the remaining jobs' max the value no longer grows with c.
    reach = 0
    for i in range(n - 1, -1, -1):
        job, top, table = jobs[i], tops[i], tables[i]
        following = value[i + 1]
        best = value[i]
        reach = min(capacity, reach + top)
        best[:] = following
        span = reach + 1
        for k in range(job.min_workers, top + 1):
            np.maximum(best[k:span], following[: span - k] + table[k], out=best[k:span])
        if span < width:
            best[span:] = best[reach]
    counts: list[int] = []
    c = capacity
    for i, job in enumerate(jobs):
        following, table = value[i + 1], tables[i]
        target = value[i][c]
        chosen = 0
        for k in range(min(tops[i], c), job.min_workers - 1, -1):
            if table[k] + following[c - k] == target:
                chosen = k
                break
        counts.append(chosen)
        c -= chosen
    return counts
