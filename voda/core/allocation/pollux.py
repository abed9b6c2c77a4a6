"""Pollux (Qiao et al., OSDI'21): goodput-driven allocation with a fairness exponent.

Each job's speedup on n GPUs is its goodput there (voda.core.goodput: throughput x
statistical efficiency, at the batch the job would pick, on the best of the even
layouts of n GPUs in aligned shares of a node, e.g. 8 GPUs as 2 x 4, 4 x 2 or
8 x 1) over its goodput at a fair share, ceil(GPUs / jobs)
GPUs on one node. The allocation maximises the power mean with exponent
`fairness` (p = -1: the harmonic mean) of the jobs' speedups scaled to one node's
share (plus 1e-3, so a job left at 0 counts), where a job whose count changes
has its speedup multiplied by the restart factor
max(age - penalty x restarts, 0) / (age + penalty): a young job, or one restarted
often, is not worth moving.

The Pollux artifact searches job-by-node matrices with an unseeded genetic
algorithm. Here the objective is maximised exactly over GPU counts by a dynamic
program (it is a sum over jobs of a function of each job's count), with counts
restricted to sizes that pack without fragmenting nodes: powers of two below a
node, whole nodes above (`aligned`). The placer then packs
(voda.core.placement.repack in the simulator's Pollux preset). The artifact's
search reaches the same end by scoring real node counts and allowing one
multi-node job per node; docs/design/009-elastic-baselines.md compares the two.

Per-job limits, as in the artifact: a job may take at most twice the most GPUs it
has measured a step on, and one GPU before it has measured any (so it grows by
doubling while it learns its throughput), and no more than its largest valid batch
allows. A job that reports no goodput model is judged
by its epoch times (voda.core.estimate): speedup t(fair) / t(n), linear while
unknown.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import ClassVar

import numpy as np

from voda.core.allocation.base import (
    allocate_by_priority,
    allocate_many_by_priority,
    live_problems,
)
from voda.core.allocation.counts import (
    FROM_CLUSTER,
    best_counts,
    check_gpus_per_node,
    check_seconds,
    no_slower,
    no_slower_rows,
    per_node,
    that_pack,
    that_pack_rows,
)
from voda.core.allocation.reasons import (
    Reason,
    Terms,
    by_priority,
    explain_in_order,
    priority_rule,
    slower_with_more,
)
from voda.core.allocation.run_memo import ProblemMemo
from voda.core.estimate import EpochTimes, epoch_time_runs
from voda.core.goodput import GoodputModel, best_goodput
from voda.core.model import Job

SPEEDUP_FLOOR = 1e-3  # added to every scaled speedup, as in Pollux (a job at 0 counts)

_MAX, _GOODPUT = attrgetter("max_workers"), attrgetter("goodput")
# A queue's problem of fewer jobs is counted without fold tables: its utilities move with
# its fair share, so its later runs seldom read the same ones (`bench/allocate.py --queues`'s
# decision, two runs at each of three seeds: 0.0-1.9 ms less than with tables for every
# problem, median 0.8).
TABLE_MIN_JOBS = 32


@dataclass(frozen=True)
class Pollux:
    """Maximise the power mean of goodput speedups over GPU counts (exact dynamic program).

    Knobs: `fairness` (the power mean's exponent p; -1 in Pollux, 0 the geometric
    mean), `restart_penalty` (seconds a restart costs in the restart factor; 30),
    `gpus_per_node` (GPUs a packed job finds on one node; 0: the cluster's, 4
    when called without one) and `aligned` (only
    counts that pack: powers of two below a node, multiples of a node above).
    """

    name: str = "Pollux"
    fairness: float = -1.0
    restart_penalty: float = 30.0
    gpus_per_node: int = FROM_CLUSTER
    aligned: bool = True
    # Remaining work and goodput change as jobs run: decide again on progress reports.
    decides_on_progress: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not (isinstance(self.fairness, int | float) and -10 <= self.fairness <= 1):
            raise ValueError(f"fairness: must be a number in [-10, 1], got {self.fairness!r}")
        check_seconds("restart_penalty", self.restart_penalty)
        check_gpus_per_node(self.gpus_per_node)

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return allocate_by_priority(jobs, capacity, self._allocate_class)

    def allocate_many(self, problems: Sequence[tuple[Sequence[Job], int]],
                      memo: ProblemMemo | None = None) -> list[dict[str, int]]:
        """`self(jobs, capacity)` of each problem, the jobs of all of them priced together
        (utilities are per job): the same allocations, for a fraction of the calls (the
        quota layer runs Pollux once per queue, docs/design/013-queues.md).

        `memo` (from `self.memo()`): the utilities earlier calls with it worked out, read
        back for a job at the same fair share and cap (`_kept_utilities`)."""
        return allocate_many_by_priority(
            problems, functools.partial(self._allocate_classes, memo=memo),
            None if memo is None else memo.classes)

    def memo(self) -> ProblemMemo:
        """A store for `allocate_many` calls on the same jobs at other capacities."""
        return ProblemMemo(table_min_jobs=TABLE_MIN_JOBS)

    def _allocate_class(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        """One priority class on what the classes above left (the whole cluster when all
        jobs share one priority, as in Pollux)."""
        return self._allocate_classes([(jobs, capacity)])[0]

    def _allocate_classes(self, problems: Sequence[tuple[Sequence[Job], int]],
                          memo: ProblemMemo | None = None) -> list[dict[str, int]]:
        out, live = live_problems(problems, by_attained)
        if not live:
            return out
        scale = 1.0 / per_node(self.gpus_per_node)  # one GPU's share of the cluster -> one node's
        every = [job for _, ordered, _ in live for job in ordered]
        fairs = [math.ceil(capacity / len(ordered)) for _, ordered, capacity in live
                 for _ in ordered]
        capacities = [capacity for _, ordered, capacity in live for _ in ordered]
        utilities = (self._utilities(every, fairs, capacities, scale) if memo is None
                     else self._kept_utilities(memo, every, fairs, capacities, scale))
        at = 0
        for k, ordered, capacity in live:
            rows = utilities[at:at + len(ordered)]
            counts = best_counts(rows, capacity) if memo is None else memo.counts(rows, capacity)
            at += len(ordered)
            out[k] = {job.name: n for job, n in zip(ordered, counts, strict=True)}
        return out

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> dict[str, Reason]:
        name, fairness = self.name, self.fairness

        def rule(loser: Job, taker: Job) -> str:
            said = priority_rule(loser, taker, name)
            if said:
                return said
            return (f"{name}: the power mean (p = {fairness:g}) of the jobs' goodput speedups "
                    f"is highest with {taker.name} on {allocation.get(taker.name, 0)} GPUs; "
                    f"{loser.name} has attained {loser.attained_gpu_seconds:.0f} GPU-seconds, "
                    f"{taker.name} {taker.attained_gpu_seconds:.0f}")

        def best(job: Job, gpus: int) -> str | None:
            return slower_with_more(job, gpus, EpochTimes(job), name)

        def cap(job: Job) -> int | None:
            return replica_cap(job) if job.goodput is not None else None

        terms = Terms(name, "order of least attained service", rule,
                      share="shares the GPUs so that the power mean of goodput speedups is "
                      "highest", best_count=best, cap=cap)
        return explain_in_order(jobs, capacity, allocation, terms, lambda: by_priority(sorted(
            jobs, key=lambda j: (j.attained_gpu_seconds, j.submit_time, j.name))))

    def utilities(self, jobs: Sequence[Job], fair: int, capacity: int,
                  scale: float) -> list[np.ndarray]:
        """`utility` of every job, the jobs of one cap priced together as a (jobs x
        counts) array and the speedups of those without a goodput model from their epoch
        times in one pass (`epoch_time_runs`): the same values, to the last bit."""
        return self._utilities(jobs, [fair] * len(jobs), [capacity] * len(jobs), scale)

    def _kept_utilities(self, memo: ProblemMemo, jobs: Sequence[Job], fairs: Sequence[int],
                        capacities: Sequence[int], scale: float) -> list[np.ndarray]:
        """`_utilities`, a job's read from `memo` where it was worked out at the same fair
        share and cap: what its row depends on, with the capacity itself for a job with a
        goodput model (its speedups read the nodes the capacity spans). The rows are read,
        never written, by the count program."""
        # a job's cap without a model is min(max, capacity) (`_utilities`: its min is at
        # most its max)
        caps = [capacity if capacity < most or model is not None else most
                for capacity, most, model in zip(capacities, map(_MAX, jobs),
                                                 map(_GOODPUT, jobs), strict=True)]
        keys = list(zip(map(id, jobs), fairs, caps, strict=True))
        asked = list(zip(jobs, fairs, capacities, strict=True))

        def compute(todo: list[tuple[Job, int, int]]) -> list[np.ndarray]:
            picked, fair, capacity = zip(*todo, strict=True)
            return self._utilities(picked, fair, capacity, scale)

        return memo.kept(memo.rows, keys, asked, compute)

    def _utilities(self, jobs: Sequence[Job], fairs: Sequence[int], capacities: Sequence[int],
                   scale: float) -> list[np.ndarray]:
        """`utilities`, each job with its own fair share and capacity."""
        node = per_node(self.gpus_per_node)
        caps = [self.cap(job, capacity) if job.goodput is not None
                else max(min(job.max_workers, capacity),  # `cap`, with no model to cap it
                         min(job.min_workers, job.max_workers, capacity))
                for job, capacity in zip(jobs, capacities, strict=True)]
        # Every job's speedups at 0..cap end to end (0 at no GPUs), read per cap below.
        starts = np.cumsum([0, *caps[:-1]]) + np.arange(len(caps))
        speedup = np.zeros(sum(caps) + len(caps))
        plain = []
        for i, (job, cap) in enumerate(zip(jobs, caps, strict=True)):
            if cap < 1:
                continue
            if job.goodput is not None and job.goodput.perf is not None:
                speedup[starts[i] + 1:starts[i] + cap + 1] = speedups(
                    job, fairs[i], cap, node, max(capacities[i] // node, 1))
            else:
                plain.append(i)
        if plain:
            picked = [jobs[i] for i in plain]
            asked = [caps[i] for i in plain]
            # Times at 1..cap and at the fair share, in one pass (each value is the
            # job's own at that count, whatever else is asked).
            runs = epoch_time_runs(picked + picked,
                                   [1] * len(plain) + [fairs[i] for i in plain],
                                   asked + [1] * len(plain))
            times, bases = runs[:-len(plain)], runs[-len(plain):]
            times = np.repeat(bases, asked) / times  # base / times(n), as `speedups`
            first = np.repeat(starts[plain] + 1 - np.cumsum([0, *asked[:-1]]), asked)
            speedup[first + np.arange(len(times))] = times
        out: list[np.ndarray | None] = [None] * len(jobs)
        for rows in cap_groups(caps):
            row_caps = [caps[i] for i in rows]
            width = max(row_caps) + 1
            members = [jobs[i] for i in rows]
            if min(row_caps) == max(row_caps):  # one cap: no padding
                values = self._group_utilities(
                    members, row_caps, None, speedup[starts[rows][:, None] + np.arange(width)],
                    scale)
                out_rows = list(values)
            else:
                inside = np.arange(width) <= np.array(row_caps)[:, None]  # counts 0..cap
                cells = np.where(inside, starts[rows][:, None] + np.arange(width), 0)
                values = self._group_utilities(members, row_caps, inside,
                                               np.where(inside, speedup[cells], 0.0), scale)
                out_rows = [row[:cap + 1] for row, cap in zip(values, row_caps, strict=True)]
            for i, row in zip(rows, out_rows, strict=True):
                out[i] = row
        return out  # type: ignore[return-value]

    def _group_utilities(self, jobs: Sequence[Job], caps: Sequence[int],
                         inside: np.ndarray | None, speedup: np.ndarray,
                         scale: float) -> np.ndarray:
        """`utility` of each job (its cap in `caps`) from its speedups (jobs x counts):
        every row one cap (`inside` None), or each row's counts past its cap padding
        (`inside` false there): every operation is per count or runs along a row from
        count 0, so a row's counts up to its cap are `utility`'s."""
        rows = np.arange(len(jobs))
        scaled = speedup * scale
        factor = restart_factors(jobs, self.restart_penalty)
        value = scaled * factor[:, None]
        kept = np.array([job.current_workers if 0 < job.current_workers <= cap else 0
                         for job, cap in zip(jobs, caps, strict=True)], dtype=np.int64)
        value[rows, kept] = scaled[rows, kept]  # no change, no restart
        u = power_utility(value + SPEEDUP_FLOOR, self.fairness)
        lo = np.array([job.min_workers for job in jobs], dtype=np.int64)
        fast = np.arange(speedup.shape[1]) >= lo[:, None]
        by_times = np.array([job.goodput is None for job in jobs])
        if by_times.any():
            fast[by_times] = no_slower_rows(-speedup[by_times], lo[by_times])
        if inside is not None:  # (past its cap a row's min may be set: no count of the job)
            fast &= inside
        allowed = that_pack_rows(fast, per_node(self.gpus_per_node)) if self.aligned else fast
        allowed[rows, kept] |= fast[rows, kept]
        allowed[:, 0] = True
        u[~allowed] = -np.inf
        return u

    def cap(self, job: Job, capacity: int) -> int:
        """The most GPUs the job may take (`replica_cap`), at least its min if it fits."""
        cap = min(job.max_workers, capacity, replica_cap(job))
        return max(cap, min(job.min_workers, job.max_workers, capacity))

    def utility(self, job: Job, fair: int, capacity: int, scale: float) -> np.ndarray:
        """u(n) for n = 0..cap: the job's term of the objective (-inf where not allowed)."""
        cap = self.cap(job, capacity)
        speedup = np.zeros(cap + 1)
        if cap >= 1:
            size = per_node(self.gpus_per_node)
            speedup[1:] = speedups(job, fair, cap, size, max(capacity // size, 1))
        scaled = speedup * scale
        value = scaled * restart_factor(job, self.restart_penalty + job.rescale_delay)
        kept = job.current_workers if 0 < job.current_workers <= cap else 0
        value[kept] = scaled[kept]  # no change, no restart
        u = power_utility(value + SPEEDUP_FLOOR, self.fairness)
        # Never a count slower than a smaller one, by epoch times. A job that reports a
        # goodput model is left to the goodput objective, as in the Pollux artifact (the
        # published reproductions, 009): only ties could pick a lower goodput there.
        fast = (no_slower(-speedup, job.min_workers) if job.goodput is None
                else np.arange(cap + 1) >= job.min_workers)
        allowed = that_pack(fast, per_node(self.gpus_per_node)) if self.aligned else fast
        allowed[kept] |= fast[kept]
        allowed[0] = True
        u[~allowed] = -np.inf
        return u


# Jobs whose caps are below PADDED_CAP are priced in one array padded to the largest cap
# where that adds at most PAD_CELLS cells for each array it saves: an array costs about
# fifteen NumPy calls, a padded cell about fifteen operations on it.
PADDED_CAP, PAD_CELLS = 64, 1_500


def cap_groups(caps: Sequence[int]) -> list[list[int]]:
    """The jobs (positions) priced together: by cap, or every cap below PADDED_CAP in one
    group where its padding is cheaper than the arrays it saves."""
    groups: dict[int, list[int]] = {}
    for i, cap in enumerate(caps):
        groups.setdefault(cap, []).append(i)
    small = [cap for cap in groups if cap < PADDED_CAP]
    if len(small) < 2:
        return list(groups.values())
    rows = sum(len(groups[cap]) for cap in small)
    cells = sum(len(groups[cap]) * (cap + 1) for cap in small)
    if rows * (max(small) + 1) - cells > PAD_CELLS * (len(small) - 1):
        return list(groups.values())
    merged = [i for cap in small for i in groups.pop(cap)]
    return [sorted(merged), *groups.values()]


def by_attained(jobs: Sequence[Job]) -> list[Job]:
    """Least attained service first (ties: submit time, name): the order Pollux reads."""
    return sorted(jobs, key=lambda j: (j.attained_gpu_seconds, j.submit_time, j.name))


def replica_cap(job: Job) -> int:
    """At most twice the most GPUs the job has measured (one before it has measured any),
    and what its batch range allows; a job that reports no model: its max."""
    model = job.goodput
    if model is None:
        return job.max_workers
    batch = model.fixed_batch if model.fixed_batch is not None else model.max_batch
    by_batch = max(batch // max(model.min_local, 1), 1)
    return min(max(2 * model.max_profiled_replicas, 1), by_batch)


def speedups(job: Job, fair: int, cap: int, per_node: int, max_nodes: int) -> np.ndarray:
    """Speedup on n = 1..cap GPUs (at the job's best even layout, voda.core.goodput) against
    a fair share of `fair` GPUs on one node."""
    model = job.goodput
    if model is not None and model.perf is not None:
        return _goodput_speedups(model, fair, cap, per_node, max_nodes)
    times = EpochTimes(job)
    base = times(fair)
    return np.array([base / times(n) for n in range(1, cap + 1)])


def _goodput_speedups(model: GoodputModel, fair: int, cap: int, per_node: int, max_nodes: int
                      ) -> np.ndarray:
    goodput = best_goodput(model, cap, per_node, max_nodes)
    base = float(model.optimize([1], [fair])[0][0])
    if not base > 0:
        base = float(goodput[0])
    if not base > 0:
        return np.arange(1, cap + 1) / fair
    return goodput / base


def restart_factor(job: Job, penalty: float) -> float:
    """max(age - penalty x restarts, 0) / (age + penalty): what a change of allocation keeps."""
    age = job.running_seconds + job.waiting_seconds
    if age + penalty <= 0:
        return 1.0
    return max(age - penalty * job.restarts, 0.0) / (age + penalty)


def restart_factors(jobs: Sequence[Job], restart_penalty: float) -> np.ndarray:
    """`restart_factor` of each job at `restart_penalty` plus its rescale delay, for all
    at once: the same operations on the same values."""
    penalty = restart_penalty + np.array([job.rescale_delay for job in jobs], dtype=float)
    age = np.array([job.running_seconds + job.waiting_seconds for job in jobs], dtype=float)
    restarts = np.array([job.restarts for job in jobs], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        kept = age - penalty * restarts
        kept = np.where(kept < 0.0, 0.0, kept)  # max(kept, 0.0) as Python takes it
        return np.where(age + penalty <= 0, 1.0, kept / (age + penalty))


def power_utility(x: np.ndarray, p: float) -> np.ndarray:
    """An increasing function whose sum is maximised where the power mean with exponent p is."""
    if p == 0:
        return np.log(x)
    return np.power(x, p) / p
