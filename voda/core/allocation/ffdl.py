"""FfDL optimizer (Saxena et al., MASCOTS'20): maximize the sum of speedups.

Admission is FIFO, as in FfDL: in submit order, jobs are admitted while their
min workers fit in the capacity (a job whose min exceeds the whole capacity can
never run and is passed over); the first job that does not fit closes the round,
so a large job at the head of the queue is not overtaken forever by small ones.
Every admitted job gets at least its min; a dynamic program shares the GPUs left
so that the sum of speedups S_j(n_j), n_j in [min_j, max_j], is largest
(`max_jobs` caps how many jobs one round admits).

Speedups are scaled to integers (micro-units) so that equal objectives are
exactly equal; among allocations of equal total speedup the most even one wins
(smallest sum of squared counts: unknown, linear speeds spread GPUs instead of
giving everything to the oldest job), then the one giving earlier jobs more.
The program runs only on the choices a Lagrangian bound leaves each job
(`ffdl_bounded`): the same optima and the same pick as over every job
(`ffdl_program`, `reference_counts`). See docs/design/001-allocation.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from voda.core.allocation.base import (
    allocate_by_priority,
    allocate_many_by_priority,
    by_submit,
)
from voda.core.allocation.ffdl_bounded import bounded_extras
from voda.core.allocation.ffdl_program import program_extras
from voda.core.allocation.reasons import (
    Reason,
    Terms,
    explain_in_order,
    priority_rule,
    slower_with_more,
)
from voda.core.estimate import epoch_time_runs, speed_model
from voda.core.model import Job

SPEEDUP_SCALE = 1_000_000  # speedups in micro-units: exact integer sums
_NAME = attrgetter("name")


@dataclass(frozen=True)
class FfDLOptimizer:
    """FIFO admission at min, then the largest total speedup by dynamic programming."""

    name: str = "FfDLOptimizer"
    max_jobs: int | None = None

    def __post_init__(self) -> None:
        limit = self.max_jobs
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):
            raise ValueError(f"max_jobs: must be a whole number >= 1 or None, got {limit!r}")

    def admitted(self, ordered: Sequence[Job], capacity: int) -> list[Job]:
        """The FIFO prefix (in `ordered`) whose min workers fit in `capacity`."""
        admitted: list[Job] = []
        free = capacity
        for job in ordered:
            if job.min_workers > capacity:
                continue  # can never run here: it does not hold the queue up
            if job.min_workers > free or (self.max_jobs is not None
                                          and len(admitted) >= self.max_jobs):
                break
            admitted.append(job)
            free -= job.min_workers
        return admitted

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return allocate_by_priority(jobs, capacity, self._allocate_class)

    def allocate_many(self, problems: Sequence[tuple[Sequence[Job], int]]) -> list[dict[str, int]]:
        """`self(jobs, capacity)` of each problem, the speedups of all jobs in one batch
        (the quota layer runs one problem per queue, docs/design/013-queues.md)."""
        return allocate_many_by_priority(problems, self._allocate_classes)

    def _allocate_class(self, ordered: Sequence[Job], capacity: int) -> dict[str, int]:
        allocation = {job.name: 0 for job in ordered}
        admitted = self.admitted(ordered, capacity)
        for job, n in zip(admitted, best_counts(admitted, capacity), strict=True):
            allocation[job.name] = n
        return allocation

    def _allocate_classes(self, problems: Sequence[tuple[Sequence[Job], int]]
                          ) -> list[dict[str, int]]:
        admitted = [self.admitted(ordered, capacity) for ordered, capacity in problems]
        running = [k for k, jobs in enumerate(admitted) if jobs]
        tables = flat_tables_many([(admitted[k], problems[k][1]) for k in running])
        out = [{job.name: 0 for job in ordered} for ordered, _ in problems]
        for k, table in zip(running, tables, strict=True):
            out[k].update(zip(map(_NAME, admitted[k]), counts_of(admitted[k], table),
                              strict=True))
        return out

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> dict[str, Reason]:
        name = self.name

        def rule(loser: Job, taker: Job) -> str:
            said = priority_rule(loser, taker, name)
            if said:
                return said
            if taker.current_workers == 0:
                return (f"{name}: {taker.name} was admitted at its min of {taker.min_workers} "
                        f"GPUs in submit order (t={taker.submit_time:g})")
            gpus = allocation.get(taker.name, 0)
            model = speed_model(taker)
            return (f"{name}: the sum of speedups is largest with {taker.name} on {gpus} GPUs "
                    f"(speedup {model.speedup(gpus):.2f}, from "
                    f"{model.speedup(taker.current_workers):.2f} on {taker.current_workers})")

        def best(job: Job, gpus: int) -> str | None:
            return slower_with_more(job, gpus, speed_model(job).epoch_time, name)

        terms = Terms(name, "submit order (it admits jobs while their min fits)", rule,
                      share="shares the GPUs beyond the admitted jobs' mins so that the sum "
                      "of their speedups is largest", best_count=best)
        return explain_in_order(jobs, capacity, allocation, terms, lambda: by_submit(jobs))


def _running_max_from_start(values: np.ndarray, starts: np.ndarray,
                            lengths: np.ndarray) -> np.ndarray:
    """Per segment of `values` (segment i: `lengths[i]` values from `starts[i]`), whether
    each value is at least every one before it in its segment (`counts.no_slower` of its
    negation from 0: NaN is never), for all segments at once: the segments of one length
    are rows of one array."""
    ok = np.zeros(len(values), dtype=bool)
    for length in np.unique(lengths).tolist():
        rows = starts[lengths == length][:, None] + np.arange(length)
        negated = -values[rows]
        ok[rows] = negated <= np.minimum.accumulate(negated, axis=1)
    ok[starts] = True
    return ok


Tables = tuple[int, list[int], list[np.ndarray]]
# The same as one array: rest, spans, every job's objectives job after job, where each starts.
FlatTables = tuple[int, np.ndarray, np.ndarray, np.ndarray]


def objective_tables(jobs: Sequence[Job], capacity: int) -> Tables:
    """What the program folds: the GPUs beyond the jobs' mins (`rest`), each job's span
    of extra GPUs (its max less its min, at most `rest`), and each job's integer
    objective at min + e GPUs, e = 0..span.

    A job's speedup at k is t(1) / t(k), scaled to micro-units; a count slower than a
    smaller one (`counts.no_slower`) is worth -1 (in speedup): the program never gives
    it, as the smaller count is worth more on fewer GPUs. The epoch times of every job
    come in one batch (`epoch_time_runs`, bit for bit the speed model's), not a model
    fitted per job."""
    return objective_tables_many([(jobs, capacity)])[0]


def objective_tables_many(problems: Sequence[tuple[Sequence[Job], int]]) -> list[Tables]:
    """`objective_tables(jobs, capacity)` of each problem, in one batch."""
    return [(rest, spans.tolist(), np.split(values, starts[1:].tolist()) if len(spans) else [])
            for rest, spans, values, starts in flat_tables_many(problems)]


def flat_tables_many(problems: Sequence[tuple[Sequence[Job], int]]) -> list[FlatTables]:
    """`objective_tables(jobs, capacity)` of each problem as `FlatTables`, the epoch times
    and speedups of every problem's jobs in one batch (a job's are the same operations
    on the same operands in any batch)."""
    rests = [capacity - sum(j.min_workers for j in jobs) for jobs, capacity in problems]
    if any(rest < 0 for rest in rests):
        raise ValueError("the jobs' min workers exceed the capacity")
    every = [job for jobs, _ in problems for job in jobs]
    none = np.zeros(0, dtype=np.int64)
    if not every:
        return [(rest, none, none, none) for rest in rests]
    count = len(every)
    lows = np.fromiter((j.min_workers for j in every), dtype=np.int64, count=count)
    highs = np.fromiter((j.max_workers for j in every), dtype=np.int64, count=count)
    sizes = [len(jobs) for jobs, _ in problems]
    span_of = np.minimum(highs, lows + np.repeat(rests, sizes)) - lows
    lengths = span_of + 1
    starts = np.cumsum(lengths) - lengths
    times = epoch_time_runs(every, lows, lengths)
    one = epoch_time_runs(every, np.ones(count, dtype=np.int64), np.ones(count, dtype=np.int64))
    raw = np.repeat(one, lengths) / times
    ok = _running_max_from_start(raw, starts, lengths)
    speedups = np.where(ok, np.rint(raw * SPEEDUP_SCALE), -SPEEDUP_SCALE).astype(np.int64)
    out: list[FlatTables] = []
    at = 0
    for (_, capacity), rest, size in zip(problems, rests, sizes, strict=True):
        if not size:
            out.append((rest, none, none, none))
            continue
        mine = slice(int(starts[at]), int(starts[at + size - 1] + lengths[at + size - 1]))
        own_starts = starts[at:at + size] - starts[at]
        own_lengths = lengths[at:at + size]
        counts = (np.repeat(lows[at:at + size] - own_starts, own_lengths)
                  + np.arange(mine.stop - mine.start, dtype=np.int64))
        values = _weighted(speedups[mine], counts, own_starts, capacity)
        out.append((rest, span_of[at:at + size], values, own_starts))
        at += size
    return out


def _weighted(speedups: np.ndarray, counts: np.ndarray, starts: np.ndarray,
              capacity: int) -> np.ndarray:
    """One problem's objectives from its jobs' speedups (job after job, from `starts`) and
    the GPU count each is at."""
    # One micro-unit of speedup outweighs any difference in the sum of squared counts,
    # as long as the weighted objective fits in 64 bits (else speedup alone decides).
    weight = capacity * capacity + 1
    most = sum(np.maximum.reduceat(speedups, starts).tolist())
    if most * weight >= 2**62:
        return speedups
    return speedups * weight - counts * counts


def best_counts(jobs: Sequence[Job], capacity: int) -> list[int]:
    """The program itself: GPU counts per job (in the order given), each in [min, max],
    the sum of their objectives (`objective_tables`) largest, and among those the most
    for the first job, then the second... (`ffdl_program.program_extras`, run on only
    the choices an optimum can take: `ffdl_bounded`). The jobs' mins must fit in
    `capacity`."""
    return counts_of(jobs, flat_tables_many([(jobs, capacity)])[0])


def counts_of(jobs: Sequence[Job], tables: FlatTables) -> list[int]:
    """`best_counts` of `jobs` from their `FlatTables`."""
    rest, spans, values, starts = tables
    extras = bounded_extras(rest, spans, values, starts, program_extras)
    if extras is None:
        extras = program_extras(rest, spans.tolist(), np.split(values, starts[1:].tolist()))
    return [job.min_workers + e for job, e in zip(jobs, extras, strict=True)]


def reference_counts(jobs: Sequence[Job], capacity: int) -> list[int]:
    """`best_counts` by the program over every admitted job (what it must equal)."""
    rest, spans, tables = objective_tables(jobs, capacity)
    extras = program_extras(rest, spans, tables)
    return [job.min_workers + e for job, e in zip(jobs, extras, strict=True)]
