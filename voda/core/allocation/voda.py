"""Voda: finish jobs sooner by knowing how much work each has left and how it scales.

Pollux shares GPUs fairly by goodput; it does not know how long a job is. Voda
does: a job asks for its epochs, reports each one, and (when it adapts its batch)
its goodput model. From that, each job's remaining time on n GPUs is

    T(n) = remaining epochs x epoch time(n),

with the epoch time measured where the job ran and carried to other counts by
the ratio of goodputs (throughput x statistical efficiency, voda.core.goodput);
without a goodput model, by the throughput (samples/s) measured per layout, scaled to
the epoch time measured now, or from measured epoch times alone (voda.core.estimate).
A job's epoch under way counts as partly done, by the time it has run in it at the GPUs
it held there (epochs are reported at their end, and a bert job trains only 2).

The allocation maximises the sum over jobs of a weighted speedup, w_j T_j(1) / T_j(n_j).
The weight puts the jobs with the least work left first, and those that scale poorly:

- by rank: the k-th shortest of m jobs weighs as the share of the GPUs heSRPT gives it
  (Berg, Vesilo and Harchol-Balter: the mean completion time is least, for speedups
  k^p and no arrivals, when the k-th shortest holds ((m-k+1)/m)^c - ((m-k)/m)^c,
  c = 1 / (1 - p)); only the order of the sizes counts, so of two long jobs of almost
  the same size one finishes first instead of both finishing late (`rank_exponent`, p);
- by age: the rank goes by T(1) less `aging` seconds for each second since the job was
  submitted, by at most AGING_LIMIT of it, as earliest-deadline-first with a job due
  at its arrival plus T(1) / `aging`: a long job that has waited overtakes shorter jobs
  that arrived much later, so the longest jobs, which set the p99, are not deferred
  behind every later arrival, and a short job's rank moves by a bounded factor only;
- by size: T(1)^-e (e = SIZE_EXPONENT), so a job far shorter than the next one counts
  for more than its rank says;
- by how it scales: divided by its parallel efficiency at its share of the GPUs
  (`inelastic_first`; the share between the even one now and the one it would hold once
  the shorter jobs have finished, `inelastic_share`): a job that scales well can take the
  GPUs left over later, one that scales poorly cannot make up later for being kept waiting.

The speedup is capped at its best: GPUs past the count where a job runs fastest go to
other jobs first (a dip on the way, such as crossing to a second node, does not stop it
growing to where more nodes pay). A job whose count changes pays its restart: its value
counts for (1 - penalty / h) with h = min(T(n), `horizon`), so short jobs are not
restarted for little and long ones not for nothing. A waiting job short enough to finish
within that horizon is worth more than its speed says: started now, it is spared the wait
until a running job's GPUs free up without a restart (`short_start`). Past the most GPUs
a job has measured, its fitted network time is not extrapolated but held (`explore`): a job
grows to measure a larger count, and its next fit corrects the model. The optimum is
exact over counts that pack (powers of two below a node, whole nodes above;
voda.core.allocation.counts).

For the tail (`tail_floor`): the rank order defers the longest jobs behind shorter
arrivals, and those whose hardware scales poorly cannot make up for it later on more GPUs,
so they set the p99. On up to an eighth of the GPUs, such jobs hold one GPU from their
arrival (`tail_floors`), where they run efficiently: the p99 falls, the mean pays a little.

Voda uses only what the service observes: epochs asked for and done, epoch times
by worker count (per job, and per category for a job that has not run yet), the
goodput model an adaptive job reports, attained service. Jobs of one category
train the same model on the same GPUs, so a job's throughput model is borrowed
from the job of its category that measured the most GPUs (`share_models`), active
or finished (`Job.category_goodput`, kept by the engine: `category_history`); its
own gradient statistics are kept. A job may take at most twice the GPUs its
category has measured, as a measured model is trusted only that far.

See docs/design/010-voda-policy.md (and docs/experiments/voda-policy-trials.md for the
trials and the ablation).
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from voda.core.allocation.base import (
    allocate_by_priority,
    allocate_many_by_priority,
    live_problems,
    water_level,
)
from voda.core.allocation.counts import (
    FROM_CLUSTER,
    check_gpus_per_node,
    check_seconds,
    largest_packing,
    largest_packings,
    no_slower,
    per_node,
    that_pack,
)
from voda.core.allocation.reasons import (
    Reason,
    Terms,
    by_priority,
    explain_in_order,
    priority_rule,
    seconds,
    slower_with_more,
)
from voda.core.allocation.run_memo import Priced, VodaMemo
from voda.core.allocation.voda_rows import RATE_SCALE, group_utilities
from voda.core.estimate import (
    DEFAULT_EPOCH_SECONDS,
    EpochTimes,
    epoch_time_runs,
    throughput_speed_model,
)
from voda.core.goodput import GoodputModel, best_goodput
from voda.core.model import Job

INELASTIC_SHARES = ("even", "between", "later")  # the share a job's efficiency is taken at
MAX_AGING = 1e6  # seconds of work per second of age; every knob is bounded
# Constants rather than knobs: each was measured against its neighbours on the Pollux
# workloads and unseen inputs (docs/experiments/voda-policy-trials.md) and no cluster
# setting calls for another value.
# The size weight T(1)^-0.05: 0.1 before, 0 (ranks alone) gives up 1.1 points of the mean
# for a little of the tail ("Lighter weights for size and scaling").
SIZE_EXPONENT = 0.05
# The most of the epoch under way a running job is credited with: mean JCT 0.803 of
# Pollux's without the credit, 0.800 with it; at most 0.5 or 0.99 of an epoch, 0.800 and
# 0.801 with a worse worst case or p99.
EPOCH_PROGRESS = 0.9
# The most of a job's size aging takes off in the rank order, so that among short jobs
# the order stays near least work first ("Aging the rank order").
AGING_LIMIT = 0.9
# The padding one call of Voda's utilities may take on for jobs of several caps.
PAD_CELLS = 2048
# Below this many jobs a weight is worked out one job at a time (`*_each`): the same
# values, and quicker than NumPy's calls for a queue's few jobs (the quota layer runs
# hundreds of small problems a decision).
VECTOR_MIN_JOBS = 64


@dataclass(frozen=True)
class Voda:
    """Maximise the jobs' total weighted speedup (exact over counts that pack).

    Knobs: `restart_penalty` (seconds a change costs a job; 30, the simulator's
    charge), `horizon` (seconds over which a restart is paid back; 240),
    `rank_exponent` (p of the heSRPT weights by rank of remaining work, in [0, 1):
    0 weighs every rank alike; 0.5), the weight by size T(1)^-SIZE_EXPONENT,
    `gpus_per_node` (0: the size of the cluster's nodes, 4 when called without a
    cluster), `aligned` (only counts that pack), `share_models` (borrow a
    category's best-measured throughput model), `category_history` (from finished
    jobs of the category too), `explore` (past the most GPUs a job has measured, hold
    its network time at the measured count's instead of extrapolating its growth),
    `throughput_estimates` (a job without a goodput model: its epoch time now carried to
    other counts by the samples/s measured there, not by epoch times measured earlier in
    its training), `elapsed_floor` (a job sized on no epoch time and no goodput model at
    all, its own or its category's, takes an epoch to last at least as long as its epoch
    under way has run; off: a mean/tail trade without goodput models, note 010),
    the epoch under way credited from the time it has run in it, at most
    EPOCH_PROGRESS of it, `short_start`
    (the most a waiting job that would finish within `horizon` on one GPU has its weight
    raised for the wait starting it spares it; 1: not raised; 10), `inelastic_first` (the
    power of 1 / a job's parallel efficiency at its share its weight is raised by: jobs
    that scale poorly first; 0: off; 0.75), `inelastic_share` (that share: "even" now,
    "later" once the shorter jobs have finished, "between" their geometric mean; "between"),
    `tail_floor` (the share of the GPUs that may hold long jobs whose hardware scales poorly
    at one GPU from their arrival, for the tail: `tail_floors`; 0: off; 0.125), `aging`
    (the seconds of one-GPU work a job's size falls by in the rank order per second since
    its submission, by at most AGING_LIMIT of it: `aged_sizes`; 0: off; 2).
    """

    name: str = "Voda"
    restart_penalty: float = 30.0
    horizon: float = 240.0
    rank_exponent: float = 0.5
    gpus_per_node: int = FROM_CLUSTER
    aligned: bool = True
    share_models: bool = True
    category_history: bool = True
    explore: bool = True
    throughput_estimates: bool = True
    elapsed_floor: bool = False
    short_start: float = 10.0
    inelastic_first: float = 0.75
    inelastic_share: str = "between"
    tail_floor: float = 0.125
    aging: float = 2.0
    # Remaining work and goodput change as jobs run: decide again on progress reports.
    decides_on_progress: ClassVar[bool] = True
    # A short arrival is started at once (the service decides on a submission): fixed
    # rounds in the simulator step Voda at arrivals too (voda.sim.runner).
    decides_on_arrival: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_seconds("restart_penalty", self.restart_penalty)
        check_seconds("horizon", self.horizon)
        if not self.horizon > 0:
            raise ValueError(f"horizon: must be positive, got {self.horizon!r}")
        if not (isinstance(self.rank_exponent, int | float) and 0 <= self.rank_exponent < 1):
            raise ValueError(
                f"rank_exponent: must be a number in [0, 1), got {self.rank_exponent!r}")
        if not (isinstance(self.short_start, int | float) and 1 <= self.short_start <= 100):
            raise ValueError(
                f"short_start: must be a number in [1, 100], got {self.short_start!r}")
        if not (isinstance(self.inelastic_first, int | float)
                and not isinstance(self.inelastic_first, bool)
                and 0 <= self.inelastic_first <= 4):
            raise ValueError(
                f"inelastic_first: must be a number in [0, 4], got {self.inelastic_first!r}")
        if self.inelastic_share not in INELASTIC_SHARES:
            raise ValueError(f"inelastic_share: must be one of {', '.join(INELASTIC_SHARES)}, "
                             f"got {self.inelastic_share!r}")
        if not (isinstance(self.tail_floor, int | float) and not isinstance(self.tail_floor, bool)
                and 0 <= self.tail_floor <= 1):
            raise ValueError(
                f"tail_floor: must be a number in [0, 1], got {self.tail_floor!r}")
        if not (isinstance(self.aging, int | float) and not isinstance(self.aging, bool)
                and 0 <= self.aging <= MAX_AGING):
            raise ValueError(f"aging: must be a number in [0, {MAX_AGING}], got {self.aging!r}")
        check_gpus_per_node(self.gpus_per_node)
        for knob in ("aligned", "share_models", "category_history", "explore",
                     "throughput_estimates", "elapsed_floor"):
            if not isinstance(getattr(self, knob), bool):
                raise ValueError(f"{knob}: must be true or false, got {getattr(self, knob)!r}")

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return allocate_by_priority(jobs, capacity, self._allocate_class)

    def allocate_many(self, problems: Sequence[tuple[Sequence[Job], int]],
                      memo: VodaMemo | None = None) -> list[dict[str, int]]:
        """`self(jobs, capacity)` of each problem, the jobs of all of them priced together
        (curves and utilities are per job): the same allocations, for a fraction of the
        calls (the quota layer runs Voda once per queue, docs/design/013-queues.md).

        `memo` (from `self.memo()`): what earlier calls with it worked out for the same
        jobs, read back where it does not depend on what changed (`VodaMemo`)."""
        return allocate_many_by_priority(
            problems, functools.partial(self._allocate_classes, memo=memo),
            None if memo is None else memo.classes)

    def memo(self) -> VodaMemo:
        """A store for `allocate_many` calls on the same jobs at other capacities."""
        return VodaMemo()

    def _allocate_class(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return self._allocate_classes([(jobs, capacity)])[0]

    def _allocate_classes(self, problems: Sequence[tuple[Sequence[Job], int]],
                          memo: VodaMemo | None = None) -> list[dict[str, int]]:
        # each class comes in submit order (`allocate_by_priority` and its many-problem
        # twin hand it so): `by_submit` would return it as it is
        out, live = live_problems(problems, list)
        if not live:
            return out
        node = per_node(self.gpus_per_node)
        priced = memo if memo is not None else Priced()
        priced_problems = []
        for _, ordered, _ in live:
            models = category_models(ordered, self.category_history) if self.share_models else {}
            priced_problems.append((ordered, [models.get(j.category) for j in ordered]
                                    if models else [None] * len(ordered)))
        curves = priced.curves([(ordered, borrowed, capacity) for (ordered, borrowed), (
            _, _, capacity) in zip(priced_problems, live, strict=True)], node, self._curves)
        factors = inelastic_first_many(
            [(ordered, part, capacity) for part, (_, ordered, capacity) in zip(
                curves, live, strict=True)], self.inelastic_first, node, self.inelastic_share)
        jobs = [ordered for _, ordered, _ in live]
        weights = priced.weights_many(jobs, curves, self._job_weights_many)
        for weight, factor in zip(weights, factors, strict=True):
            weight *= factor
        utilities = priced.utilities(jobs, curves, weights, self.utilities)
        if self.tail_floor > 0:
            floored = [priced.floors(part, int(self.tail_floor * capacity), node, tail_floors)
                       for part, (_, _, capacity) in zip(curves, live, strict=True)]
            utilities = priced.floored(utilities, floored, with_floors_many)
        for rows, (k, ordered, capacity) in zip(utilities, live, strict=True):
            counts = priced.counts(rows, capacity)
            out[k] = {job.name: n for job, n in zip(ordered, counts, strict=True)}
        return out

    def _job_weights(self, jobs: Sequence[Job], curves: Sequence[Curve]) -> np.ndarray:
        """The jobs' weights but for how they scale at their share (`inelastic_first`):
        by rank of aged size, by size and for a short start, from their curves alone."""
        ranked_by = aged_sizes(jobs, curves, self.aging, AGING_LIMIT)
        weight = rank_weights(ranked_by, self.rank_exponent) * np.array(
            [c.size ** -SIZE_EXPONENT if c.size > 0 else 1.0 for c in curves])
        weight *= short_start_bonus(jobs, curves, self.horizon, self.short_start)
        return weight

    def _job_weights_many(self, problems: Sequence[tuple[Sequence[Job], Sequence[Curve]]]
                          ) -> list[np.ndarray]:
        """`_job_weights` of each (jobs, curves) problem: the aged sizes and size weights
        of all problems' jobs at once (per job), the ranks and short starts per problem."""
        every = [j for jobs, _ in problems for j in jobs]
        curves = [c for _, part in problems for c in part]
        ranked_by = aged_sizes(every, curves, self.aging, AGING_LIMIT)
        by_size = [c.size ** -SIZE_EXPONENT if c.size > 0 else 1.0 for c in curves]
        out = []
        start = 0
        for jobs, part in problems:
            end = start + len(jobs)
            weight = rank_weights(ranked_by[start:end], self.rank_exponent) * np.array(
                by_size[start:end], dtype=float)
            weight *= short_start_bonus(jobs, part, self.horizon, self.short_start)
            out.append(weight)
            start = end
        return out

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> dict[str, Reason]:
        name = self.name
        sizes: dict[str, float] = {}

        def size(job: Job) -> float:
            """Remaining work on one GPU (computed once, for the jobs a message names)."""
            value = sizes.get(job.name)
            if value is None:
                work = job.remaining_epochs
                value = sizes[job.name] = work * EpochTimes(job)(1) if work > 0 else 0.0
            return value

        def rule(loser: Job, taker: Job) -> str:
            said = priority_rule(loser, taker, name)
            if said:
                return said
            theirs, mine = size(taker), size(loser)
            if theirs < mine:
                return (f"{name}: {taker.name} has less work left ({seconds(theirs)} on one "
                        f"GPU against {loser.name}'s {seconds(mine)}), so it weighs more in the "
                        f"total weighted speedup")
            return (f"{name}: the total weighted speedup is highest with {taker.name} on "
                    f"{allocation.get(taker.name, 0)} GPUs, which scales better or has waited "
                    f"longer")

        def best(job: Job, gpus: int) -> str | None:
            return slower_with_more(job, gpus, EpochTimes(job), name)

        def cap(job: Job) -> int | None:
            model = job.goodput
            if model is None or model.perf is None:
                return None
            return measured_cap(job, model)

        terms = Terms(name, "order of remaining work on one GPU", rule,
                      share="shares the GPUs so that the jobs' total weighted speedup is "
                      "highest (less work left and poorer scaling weigh more)",
                      best_count=best, cap=cap)
        return explain_in_order(jobs, capacity, allocation, terms, lambda: by_priority(sorted(
            jobs, key=lambda j: (size(j), j.sort_key))))

    def curves(self, jobs: Sequence[Job], borrowed: Mapping[str, GoodputModel],
               capacity: int) -> list[Curve]:
        """`curve` of every job (its category's model borrowed from `borrowed`), the jobs
        sized on epoch times alone computed together (`epoch_time_runs`): the same
        values, to the last bit, for a fraction of the calls."""
        return self._curves(jobs, [borrowed.get(j.category) for j in jobs],
                            [capacity] * len(jobs))

    def _curves(self, jobs: Sequence[Job], borrowed: Sequence[GoodputModel | None],
                capacities: Sequence[int]) -> list[Curve]:
        """`curves`, each job with its own borrowed model and capacity."""
        out: list[Curve | None] = [None] * len(jobs)
        batch: list[int] = []
        caps: list[int] = []
        for i, job in enumerate(jobs):
            model, capacity = own_model(job, borrowed[i]), capacities[i]
            if model is None:  # curve_cap, with nothing measured to cap it
                most = job.max_workers
                cap = max(min(most, capacity), min(job.min_workers, most, capacity))
            else:
                cap = curve_cap(job, model, capacity)
            if (model is None and cap >= 1 and job.remaining_epochs > 0
                    and not self.elapsed_floor
                    and not (self.throughput_estimates and job.layout_throughput)):
                batch.append(i)  # remaining_seconds: epochs x EpochTimes(job)(n)
                caps.append(cap)
            else:
                out[i] = self.curve(job, borrowed[i], capacities[i])
        if batch:
            picked = [jobs[i] for i in batch]
            times = epoch_time_runs(picked, np.ones(len(batch), dtype=np.int64), caps)
            left = [job.remaining_epochs for job in picked]
            times *= np.repeat(left, caps)
            # Each job's seconds at 0..cap GPUs end to end: inf at 0, then its times.
            starts = np.cumsum([0, *caps[:-1]]) + np.arange(len(caps))
            flat = np.empty(len(times) + len(caps))
            zero = np.zeros(len(flat), dtype=bool)
            zero[starts] = True
            flat[zero] = np.inf
            flat[~zero] = times
            flat *= np.repeat(shares_left(picked, left, flat, starts, caps), np.add(caps, 1))
            sizes = flat[starts + 1].tolist()
            for i, cap, start, size in zip(batch, caps, starts.tolist(), sizes, strict=True):
                seconds = flat[start:start + cap + 1]
                if not math.isfinite(size):
                    finite = seconds[np.isfinite(seconds)]
                    size = float(np.min(finite)) if len(finite) else math.inf
                out[i] = Curve(cap, seconds, size, None, None)
        return out  # type: ignore[return-value]

    def curve(self, job: Job, borrowed: GoodputModel | None, capacity: int) -> Curve:
        model = own_model(job, borrowed)
        cap = curve_cap(job, model, capacity)
        seconds = np.full(cap + 1, np.inf)
        if cap >= 1:
            node = per_node(self.gpus_per_node)
            seconds[1:] = remaining_seconds(job, model, cap, node, max(capacity // node, 1),
                                            self.explore, self.throughput_estimates)
            if self.elapsed_floor and model is None:
                # A job that reports a goodput model (fitted or not yet) is not floored:
                # its first fit, within its first steps, corrects the guess.
                seconds *= guess_at_least_elapsed(job, seconds)
            seconds *= share_left(job, seconds, EPOCH_PROGRESS)
        finite = seconds[np.isfinite(seconds)]
        size = float(seconds[1]) if cap >= 1 and math.isfinite(seconds[1]) else (
            float(np.min(finite)) if len(finite) else math.inf)
        pace = None
        if cap >= 1 and job.remaining_epochs <= 0:
            # No work left: every count costs it the same (a millisecond), but which
            # counts are slower than smaller ones is read off an epoch's time.
            pace = np.full(cap + 1, np.inf)
            last = dataclasses.replace(job, completed_epochs=job.epochs - 1.0)
            pace[1:] = remaining_seconds(last, model, cap, node, max(capacity // node, 1),
                                         self.explore, self.throughput_estimates)
        return Curve(cap, seconds, size, model, pace)

    def utilities(self, jobs: Sequence[Job], curves: Sequence[Curve],
                  weights: np.ndarray) -> list[np.ndarray]:
        """`utility` of every job at its weight, the jobs of a few caps priced together
        (voda_rows.group_utilities, `cap_batches`): the same values, to the last bit."""
        out: list[np.ndarray | None] = [None] * len(jobs)
        by_cap: dict[int, list[int]] = {}
        for i, curve in enumerate(curves):
            by_cap.setdefault(curve.cap, []).append(i)
        node = per_node(self.gpus_per_node)
        weights = np.asarray(weights, dtype=float)
        for batch in cap_batches({cap: len(rows) for cap, rows in by_cap.items()}):
            rows = [i for cap in batch for i in by_cap[cap]]
            group = [curves[i] for i in rows]
            members = [jobs[i] for i in rows]
            width = batch[-1] + 1
            seconds = np.full((len(rows), width), np.inf)
            pace = np.full((len(rows), width), np.inf)
            at = 0
            for cap in batch:
                part = group[at:at + len(by_cap[cap])]
                seconds[at:at + len(part), :cap + 1] = [c.seconds for c in part]
                pace[at:at + len(part), :cap + 1] = [
                    c.seconds if c.pace is None else c.pace for c in part]
                at += len(part)
            caps = np.array([c.cap for c in group], dtype=np.int64)
            kept = np.array([j.current_workers if 0 < j.current_workers <= c.cap else 0
                             for j, c in zip(members, group, strict=True)], dtype=np.int64)
            penalty, horizon, lost = restart_charges(members, self.restart_penalty,
                                                     self.horizon)
            values = group_utilities(
                seconds, pace, np.array([c.size for c in group]),
                np.array([j.min_workers for j in members], dtype=np.int64), kept,
                penalty, weights[rows], horizon, lost,
                node, self.aligned, caps if len(batch) > 1 else None)
            if len(batch) == 1:  # one cap: every row is its length
                for i, row in zip(rows, list(values), strict=True):
                    out[i] = row
                continue
            for i, row, cap in zip(rows, values, caps.tolist(), strict=True):
                out[i] = row[:cap + 1]
        return out  # type: ignore[return-value]

    def utility(self, job: Job, curve: Curve, weight: float) -> np.ndarray:
        """The job's weighted speed on n = 0..cap GPUs (-inf where not allowed).

        Speed is the speedup over one GPU, T(1) / T(n), capped at its best: GPUs past
        the count where it is highest add (almost) nothing, so they go to other jobs
        first. A change of count keeps 1 - penalty / min(T(n), horizon) of it, the
        penalty and horizon those of `restart_charge`; a running job halted loses the same
        share of its current speed (it pays the restart when it resumes).
        """
        cap, seconds, size = curve.cap, curve.seconds, curve.size
        rate = np.zeros(cap + 1)
        # Never a count slower than a smaller one.
        fast = no_slower(seconds if curve.pace is None else curve.pace, job.min_workers)
        allowed = that_pack(fast, per_node(self.gpus_per_node)) if self.aligned else fast
        if cap >= 1 and math.isfinite(size):
            speedup = np.zeros(cap + 1)
            speedup[1:] = size / seconds[1:]
            knee = best_size(speedup, allowed)
            within = np.minimum(speedup, speedup[knee])
            beyond = np.maximum(speedup - speedup[knee], 0.0)
            rate = RATE_SCALE * (within * weight + 1e-9 * beyond)
        kept = job.current_workers if 0 < job.current_workers <= cap else 0
        charge = restart_charge(job, self.restart_penalty, self.horizon)
        lost = charge.share(seconds)
        changed = rate * np.clip(1.0 - lost, 0.0, 1.0)
        changed[kept] = rate[kept]  # no change, no restart
        if kept:
            changed[0] = -rate[kept] * min(lost[kept], 1.0)
        allowed[kept] |= fast[kept]
        allowed[0] = True
        return np.where(allowed, changed, -np.inf)


def cap_batches(rows: Mapping[int, int]) -> list[list[int]]:
    """The caps (`rows`: how many jobs have each) in ascending runs priced in one call,
    each padded to its largest cap: a run grows while its padded cells stay within twice
    its own and PAD_CELLS more (a call costs more than a few thousand cells)."""
    batches: list[list[int]] = []
    cells = count = 0
    for cap in sorted(rows):
        n = rows[cap]
        if batches and (count + n) * (cap + 1) <= 2 * (cells + n * (cap + 1)) + PAD_CELLS:
            batches[-1].append(cap)
        else:
            batches.append([cap])
            cells = count = 0
        cells += n * (cap + 1)
        count += n
    return batches


def curve_cap(job: Job, model: GoodputModel | None, capacity: int) -> int:
    """The most GPUs a job's curve reaches: its max, the capacity and what its model has
    measured (`measured_cap`), yet at least its min where that fits."""
    cap = min(job.max_workers, capacity, measured_cap(job, model))
    return max(cap, min(job.min_workers, job.max_workers, capacity))


@dataclass(frozen=True)
class RestartCharge:
    """What a change of count costs a job: `penalty` seconds, paid back over `horizon`
    seconds, on top of the share of its life it has already lost to restarts (`lost`)."""

    penalty: float
    horizon: float
    lost: float = 0.0

    def share(self, seconds: np.ndarray) -> np.ndarray:
        """The share of its speed a change costs, at remaining times `seconds` there."""
        return self.penalty / np.minimum(seconds, self.horizon) + self.lost


def restart_charge(job: Job, restart_penalty: float, horizon: float) -> RestartCharge:
    """What a change of count costs `job`.

    `restart_penalty` plus what a change costs on the job's backend (Job.rescale_delay,
    006), over `horizon`. Where the backend knows the job's own restart cost
    (Job.restart_cost), that cost, over a horizon grown by the square root of how much
    dearer it is than `restart_penalty` (imagenet's 250 s: 36 % of a long job's speed
    against 12.5 % at 30 s), and on top the share of its life the job has already spent
    restarting (restarts x cost / age, as Pollux's and Sia's restart factor): jobs that are
    dear to restart, or that have restarted often, are moved rarely, yet still moved for a
    large enough gain (a horizon left at 240 s froze them: 250 s > 240 s).
    """
    if job.restart_cost <= 0:
        return RestartCharge(restart_penalty + job.rescale_delay, horizon)
    dearer = job.restart_cost / restart_penalty if restart_penalty > 0 else 1.0
    age = job.running_seconds + job.waiting_seconds
    lost = min(job.restarts * job.restart_cost / age, 1.0) if age > 0 else 0.0
    return RestartCharge(job.restart_cost + job.rescale_delay,
                         horizon * math.sqrt(max(dearer, 1.0)), lost)


def restart_charges(jobs: Sequence[Job], restart_penalty: float, horizon: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`restart_charge` of each job as arrays of its penalty, horizon and lost share: the
    jobs without a restart cost of their own (most) in one pass, the same values."""
    cost = np.array([job.restart_cost for job in jobs], dtype=float)
    penalty = restart_penalty + np.array([job.rescale_delay for job in jobs], dtype=float)
    horizons = np.full(len(jobs), horizon, dtype=float)
    lost = np.zeros(len(jobs))
    for i in np.flatnonzero(~(cost <= 0)).tolist():  # (a NaN cost is not <= 0 either)
        charge = restart_charge(jobs[i], restart_penalty, horizon)
        penalty[i], horizons[i], lost[i] = charge.penalty, charge.horizon, charge.lost
    return penalty, horizons, lost


def epochs_run_under_way(job: Job, seconds: np.ndarray) -> float | None:
    """How many of its estimated epochs the time the job has run in its epoch under way
    would take, at the GPUs it held there on average (GPU-seconds over seconds); None when
    it has not run in it, or without an estimate there."""
    ran, left = job.running_seconds_since_epoch, job.remaining_epochs
    if left < 1 or ran <= 0 or len(seconds) < 2:
        return None
    n = min(max(round(job.attained_gpu_seconds_since_epoch / ran), 1), len(seconds) - 1)
    if not (math.isfinite(seconds[n]) and seconds[n] > 0):
        return None
    return ran * left / seconds[n]


def share_left(job: Job, seconds: np.ndarray, most: float) -> float:
    """The share of its estimated remaining time a job still has, counting the epoch under
    way as done by the time it has run in it over its epoch time at the GPUs it held there
    (at most `most` of an epoch). Epochs are reported at their end: a job with few epochs
    (bert trains 2) would otherwise look up to a whole epoch longer than it is, running or
    halted part-way."""
    run = epochs_run_under_way(job, seconds)
    if most <= 0 or run is None:
        return 1.0
    left = job.remaining_epochs
    return (left - min(run, most)) / left


def shares_left(jobs: Sequence[Job], left: Sequence[float], flat: np.ndarray,
                starts: np.ndarray, caps: Sequence[int]) -> np.ndarray:
    """`share_left(job, seconds, EPOCH_PROGRESS)` of each job (its seconds at 0..cap GPUs
    at flat[start:start + cap + 1], `left` its remaining epochs) for all at once: the same
    operations on the same values; 1 for a job that has not run in its epoch under way.
    A job whose figures `share_left` could not round (NaN, inf) is worked out alone."""
    factors = np.ones(len(jobs))
    ran = np.array([job.running_seconds_since_epoch for job in jobs], dtype=float)
    held = np.array([job.attained_gpu_seconds_since_epoch for job in jobs], dtype=float)
    remaining = np.asarray(left, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gpus = held / ran
        counted = (ran > 0) & ~(remaining < 1)  # (as share_left reads a NaN: not below 1)
        odd = counted & ~np.isfinite(gpus)
        counted &= ~odd
        # round() as Python takes it (half to even), at least 1 and at most the cap
        n = np.minimum(np.maximum(np.rint(np.where(counted, gpus, 1.0)), 1.0),
                       np.asarray(caps, dtype=float)).astype(np.int64)
        at = flat[starts + n]
        counted &= np.isfinite(at) & (at > 0)
        run = ran * remaining / at
        taken = np.where(run > EPOCH_PROGRESS, EPOCH_PROGRESS, run)  # min(run, most)
        factors[counted] = ((remaining - taken) / remaining)[counted]
    for i in np.flatnonzero(odd).tolist():
        start = int(starts[i])
        factors[i] = share_left(jobs[i], flat[start:start + caps[i] + 1], EPOCH_PROGRESS)
    return factors


def guess_at_least_elapsed(job: Job, seconds: np.ndarray) -> float:
    """What a job's estimate is raised by when it rests on no epoch time at all, its own or
    its category's (the default guess), and the epoch under way has already run longer than
    the guess says an epoch takes: the epoch takes at least that long. A 2-epoch job
    measures nothing before it finishes (the first epoch after a start is not a speed), and
    on the guess it looked like a 2-minute job for hours."""
    if job.epoch_time_by_workers:
        return 1.0
    return max(1.0, epochs_run_under_way(job, seconds) or 0.0)


def short_start_bonus(jobs: Sequence[Job], curves: Sequence[Curve], horizon: float,
                      most: float) -> np.ndarray:
    """Per job, the factor its weight is raised by for the wait starting it now spares it.

    A waiting job that would finish on one GPU within the restart horizon otherwise waits
    until the first running job ends at its count (E seconds) whenever freeing GPUs for it
    costs a restart of a job holding many: its value counts a rate, the restart a share of
    the other's. Started now it saves E of its completion time against at most two
    restarts of another (shrunk and grown back within the horizon), so its weight counts
    (1 + E / T(1)), at most `most`. A job this short holds its GPUs briefly; longer ones
    are left to the rank order.
    """
    factors = np.ones(len(jobs))
    if most <= 1:
        return factors
    running = [c.seconds.item(j.current_workers) for j, c in zip(jobs, curves, strict=True)
               if 0 < j.current_workers <= c.cap]
    free_in = min(running, default=0.0)
    if not (math.isfinite(free_in) and free_in > 0):
        return factors
    for i, (job, curve) in enumerate(zip(jobs, curves, strict=True)):
        if job.current_workers == 0 and 0 < curve.size <= horizon:
            factors[i] = min(1.0 + free_in / curve.size, most)
    return factors


def inelastic_first(jobs: Sequence[Job], curves: Sequence[Curve], capacity: int,
                    exponent: float, node: int, share_of: str = "between") -> np.ndarray:
    """Per job, the factor its weight is raised by for scaling poorly: 1 / its parallel
    efficiency at its share of the GPUs (`share_of`, below), to the power `exponent`
    (0: all 1).

    A job that scales well can take whatever GPUs are left over, now or later; one that
    scales poorly cannot make up later, on more GPUs, for the time it was kept waiting,
    and once the others have finished it runs alone on a cluster it cannot use. Serving
    inelastic jobs first lowers the mean response time (Berg, Harchol-Balter, Moseley,
    Wang and Whitehouse, "Optimal resource allocation for elastic and inelastic jobs",
    SPAA 2020: with jobs either fully elastic or inelastic, Inelastic-First is optimal
    where inelastic jobs are no larger on average). Here scaling comes in degrees: a job's
    efficiency is its speedup on n GPUs over n, n its share of the cluster rounded down
    to a count that packs, at least one GPU (and the job's minimum); a job faster per GPU
    there than on one GPU counts as fully efficient.

    The share, water-filled over what the jobs may take: "even", over every job, the share
    now; "later", over the jobs at least as long as this one, the share it would hold
    once the shorter ones have finished if nothing arrived, which is when a deferred job
    runs; "between", their geometric mean, since arrivals keep a busy cluster crowded
    (in a crowded cluster the even share is one GPU, where every job is efficient, though
    the longest jobs will run when it has emptied).
    """
    factors = np.ones(len(jobs))
    if exponent <= 0 or not len(jobs):
        return factors
    if len(jobs) < VECTOR_MIN_JOBS:
        return inelastic_factors_each(jobs, curves, water_shares_each(curves, capacity, share_of),
                                      exponent, node)
    return inelastic_factors(jobs, curves, water_shares(curves, capacity, share_of),
                             exponent, node)


def inelastic_first_many(problems: Sequence[tuple[Sequence[Job], Sequence[Curve], int]],
                         exponent: float, node: int, share_of: str = "between"
                         ) -> list[np.ndarray]:
    """`inelastic_first` of each (jobs, curves, capacity) problem: the shares problem by
    problem, the factors of all problems' jobs at once where they are many."""
    if exponent <= 0 or sum(len(jobs) for jobs, _, _ in problems) < VECTOR_MIN_JOBS:
        return [inelastic_first(jobs, curves, capacity, exponent, node, share_of)
                for jobs, curves, capacity in problems]
    shares = [[] if not curves else water_shares_each(curves, capacity, share_of)
              if len(curves) < VECTOR_MIN_JOBS else water_shares(curves, capacity, share_of)
              .tolist() for _, curves, capacity in problems]
    every = inelastic_factors([j for jobs, _, _ in problems for j in jobs],
                              [c for _, curves, _ in problems for c in curves],
                              np.array([s for part in shares for s in part], dtype=np.int64),
                              exponent, node)
    cuts = list(itertools.accumulate(len(jobs) for jobs, _, _ in problems))
    return np.split(every, cuts[:-1])


def inelastic_factors(jobs: Sequence[Job], curves: Sequence[Curve], shares: np.ndarray,
                      exponent: float, node: int) -> np.ndarray:
    """`inelastic_factors_each` of all jobs at once (the same operations on the same
    values)."""
    factors = np.ones(len(jobs))
    cap = np.array([c.cap for c in curves], dtype=np.int64)
    size = np.array([c.size for c in curves], dtype=float)
    live = np.flatnonzero((cap >= 1) & np.isfinite(size))
    if not len(live):
        return factors
    cap = cap[live]
    least = np.array([jobs[i].min_workers for i in live.tolist()], dtype=np.int64)
    share = np.maximum(np.maximum(shares[live], np.minimum(least, cap)), 1)
    n = largest_packings(int(cap.max()), node)[np.minimum(share, cap)]
    at = [curves[i].seconds.item(k) for i, k in zip(live.tolist(), n.tolist(), strict=True)]
    with np.errstate(divide="ignore", invalid="ignore"):
        speedup = size[live] / np.array(at, dtype=float)
        poor = np.isfinite(speedup) & (speedup > 0) & (speedup < n)
        # Each power as Python takes it (libm's pow, one value at a time).
        factors[live[poor]] = [r ** exponent for r in (n[poor] / speedup[poor]).tolist()]
    return factors


def inelastic_factors_each(jobs: Sequence[Job], curves: Sequence[Curve], shares: list[int],
                           exponent: float, node: int) -> np.ndarray:
    """`inelastic_first` at the jobs' `water_shares`, one job at a time (the reference;
    for a few jobs, the quicker)."""
    factors = [1.0] * len(jobs)
    for i, (job, curve) in enumerate(zip(jobs, curves, strict=True)):
        if curve.cap < 1 or not math.isfinite(curve.size):
            continue
        share = max(shares[i], min(job.min_workers, curve.cap), 1)
        n = largest_packing(min(share, curve.cap), node)  # one GPU always fits
        seconds = curve.seconds.item(n)
        if seconds == 0:  # no finite speedup to weigh
            continue
        speedup = curve.size / seconds
        if math.isfinite(speedup) and speedup > 0:
            factors[i] = (n / speedup) ** exponent if speedup < n else 1.0
    return np.array(factors)


def water_shares(curves: Sequence[Curve], capacity: int, share_of: str) -> np.ndarray:
    """Per job (not empty), its share of the GPUs for `inelastic_first`, water-filled over
    what the jobs may take (their curves' caps): "even", "later" or "between"."""
    if len(curves) < VECTOR_MIN_JOBS:
        return np.array(water_shares_each(curves, capacity, share_of), dtype=np.int64)
    caps = np.array([max(c.cap, 0) for c in curves], dtype=np.int64)
    if int(caps.sum()) <= capacity:  # every job fits at its cap (`water_shares_each`)
        return caps
    even = np.minimum(caps, water_level(sorted(caps.tolist()), capacity))
    if share_of == "even":
        return even
    longest_first = ascending([c.size for c in curves])[::-1]
    later = np.empty(len(curves), dtype=np.int64)
    later[longest_first] = prefix_water_levels(caps[longest_first].tolist(), capacity)
    later = np.minimum(caps, later)
    return later if share_of == "later" else np.sqrt(even * later).astype(np.int64)


def water_shares_each(curves: Sequence[Curve], capacity: int, share_of: str) -> list[int]:
    """`water_shares` on Python integers (the reference; for a few jobs, the quicker):
    the geometric mean as NumPy takes it, the square root of the product as a float,
    truncated."""
    caps = [max(c.cap, 0) for c in curves]
    if sum(caps) <= capacity:  # every job fits at its cap: that is each share
        return caps
    sizes = [c.size for c in curves]
    if share_of != "between" or any(size != size for size in sizes):  # NaN: the tuple sort
        return water_shares_filled(curves, caps, capacity, share_of)
    return water_shares_between(sizes, caps, capacity)


def water_shares_between(sizes: list[float], caps: list[int], capacity: int) -> list[int]:
    """`water_shares_filled`'s "between" shares of jobs whose sizes hold no NaN, in one
    pass: a stable sort by size alone orders ties by position as the (size, position) key
    does, and each share is the same minimum and square root of the same integers."""
    level = water_level(sorted(caps), capacity)
    longest_first = sorted(range(len(sizes)), key=sizes.__getitem__)[::-1]
    levels = prefix_water_levels([caps[i] for i in longest_first], capacity)
    shares = [0] * len(caps)
    sqrt = math.sqrt
    for i, later in zip(longest_first, levels, strict=True):
        cap = caps[i]
        shares[i] = int(sqrt((cap if cap < level else level) * (cap if cap < later else later)))
    return shares


def water_shares_filled(curves: Sequence[Curve], caps: list[int], capacity: int,
                        share_of: str) -> list[int]:
    """`water_shares_each` from the water levels, whether or not the caps all fit (the
    reference for the shortcut where they do: every level is then at least each cap, and
    the square root of a square integer is exact)."""
    level = water_level(sorted(caps), capacity)
    even = [min(cap, level) for cap in caps]
    if share_of == "even":
        return even
    sizes = [c.size for c in curves]
    longest_first = sorted(range(len(sizes)), key=lambda i: (sizes[i], i))[::-1]
    later = [0] * len(caps)
    levels = prefix_water_levels([caps[i] for i in longest_first], capacity)
    for i, level in zip(longest_first, levels, strict=True):
        later[i] = min(caps[i], level)
    if share_of == "later":
        return later
    return [int(math.sqrt(e * lat)) for e, lat in zip(even, later, strict=True)]


FLOOR_NODES = 4  # a job's hardware scaling is judged on this many nodes' GPUs
FLOOR_EFFICIENCY = 0.5  # below this share of linear scaling there, it scales poorly


def tail_floors(curves: Sequence[Curve], budget: int, node: int) -> list[bool]:
    """Per job (in submit order), whether it holds at least one GPU whatever its rank: it is
    longer on one GPU than at least half the jobs present, and its hardware scales poorly
    (`hardware_efficiency` below FLOOR_EFFICIENCY); the first `budget` such jobs.

    The rank order defers the longest jobs behind shorter arrivals, and one that scales
    poorly cannot make up for it later on more GPUs: those jobs set the p99. One GPU is
    where they run efficiently. The test is on throughput alone, not goodput: a job's
    statistical efficiency grows as it trains, so a test on goodput (or on its share, which
    moves with the jobs present) flips from decision to decision and each flip starts or
    halts a job (docs/experiments/voda-policy-trials.md, "Floors of one GPU").
    """
    floored = [False] * len(curves)
    if budget < 1 or not curves:
        return floored
    if len(curves) < VECTOR_MIN_JOBS:
        return tail_floors_each(curves, budget, node)
    size = np.array([c.size for c in curves], dtype=float)
    cap = np.array([c.cap for c in curves], dtype=np.int64)
    half = np.sort(size)[-(-len(size) // 2) - 1]  # longer than it: long
    with np.errstate(invalid="ignore"):
        long = np.flatnonzero((cap >= 1) & np.isfinite(size) & (size > half))
    n = FLOOR_NODES * node
    modelled = [curves[i].model is not None and curves[i].model.perf is not None
                for i in long.tolist()]
    # Without a model, `hardware_efficiency` from the epoch times, for all jobs at once.
    most = np.minimum(n, cap[long])
    at = np.array([curves[i].seconds.item(m) for i, m in zip(long.tolist(), most.tolist(),
                                                              strict=True)], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        measured = (most >= 2) & np.isfinite(at) & (at > 0)
        efficiency = np.where(measured, size[long] / at / most, 1.0)
    for k, i in enumerate(long.tolist()):
        poor = (hardware_efficiency(curves[i], curves[i].model, n, node) if modelled[k]
                else efficiency[k]) < FLOOR_EFFICIENCY
        if poor:
            floored[i] = True
            budget -= 1
            if budget < 1:
                break
    return floored


def tail_floors_each(curves: Sequence[Curve], budget: int, node: int) -> list[bool]:
    """`tail_floors` one job at a time (the reference; for a few jobs, the quicker)."""
    floored = [False] * len(curves)
    sizes = sorted(c.size for c in curves) if not any(  # NumPy's order where one is NaN
        math.isnan(c.size) for c in curves) else np.sort([c.size for c in curves]).tolist()
    half = sizes[-(-len(sizes) // 2) - 1] if len(sizes) else math.inf  # longer than it: long
    for i, curve in enumerate(curves):
        if budget < 1:
            break
        if curve.cap < 1 or not math.isfinite(curve.size) or not curve.size > half:
            continue
        if hardware_efficiency(curve, curve.model, FLOOR_NODES * node, node) < FLOOR_EFFICIENCY:
            floored[i] = True
            budget -= 1
    return floored


def hardware_efficiency(curve: Curve, model: GoodputModel | None, n: int, node: int) -> float:
    """A job's throughput on n GPUs over n times its throughput on one (1: linear).

    With a fitted model, at its initial per-GPU batch on as few nodes as hold n (step time
    on one GPU over step time on n: each GPU does as much per step); without one, from its
    epoch times at the most GPUs up to n it may take (1 where it may take one only).
    """
    if model is not None and model.perf is not None:
        local = float(min(max(model.init_batch, model.min_local), model.max_local))
        one, many = model.step_time(np.array([1.0, -(-n // node)]), np.array([1.0, n]),
                                    np.full(2, local), np.zeros(2))
        return float(one / many) if many > 0 else 1.0
    m = min(n, curve.cap)
    at = curve.seconds.item(m) if m >= 2 else 0.0  # (a Python float: the same quotient)
    if not (math.isfinite(at) and at > 0):
        return 1.0
    return curve.size / at / m


def with_floors(utilities: Sequence[np.ndarray], floored: Sequence[bool]) -> list[np.ndarray]:
    """The utilities with each floored job's value at no GPUs below what any other choice
    can add up to, so the program gives it at least one GPU wherever the floors fit."""
    return with_floors_many(utilities, [(0, len(utilities))], [floored])


def with_floors_many(utilities: Sequence[np.ndarray], spans: Sequence[tuple[int, int]],
                     floored: Sequence[Sequence[bool]]) -> list[np.ndarray]:
    """`with_floors` of each problem, problem p's jobs `utilities[a:b]` for (a, b) =
    spans[p] and its floors `floored[p]`, each job's largest |u| found in one pass."""
    out = list(utilities)
    if not any(map(any, floored)):
        return out
    # Each job's largest |u| over its finite values (max is exact, so one pass over all
    # jobs gives each the same), summed job by job in order as floats.
    flat = np.concatenate(utilities)
    finite = np.isfinite(flat)
    starts = np.cumsum([0, *map(len, utilities[:-1])])
    largest = np.maximum.reduceat(np.where(finite, np.abs(flat), -np.inf), starts)
    has = np.logical_or.reduceat(finite, starts)
    for (a, b), floors in zip(spans, floored, strict=True):
        if not any(floors):
            continue
        below = 1.0 + sum(largest[a:b][has[a:b]].tolist())
        for i, floor in enumerate(floors, start=a):
            if floor:
                out[i] = utilities[i].copy()
                out[i][0] = -below
    return out


def prefix_water_levels(rooms: Sequence[int], free: int) -> list[int]:
    """For each k, the water level of the first k + 1 rooms (as `water_level`, without the
    sort): the largest L with sum(min(room, L)) <= free, or the largest room if all fit.

    The level only falls as rooms are added, so a room once above it stays above: rooms at
    or below the level (summing to `below`) sit in a max-heap, those above it are counted,
    and each room crosses at most once. O(n log n) in all.
    """
    levels = []
    below = largest = fitting = 0
    for room in rooms:  # while every room so far fits, the level is the largest of them
        if below + room > free:
            break
        below += room
        largest = room if room > largest else largest
        levels.append(largest)
        fitting += 1
    else:
        return levels
    under = [-room for room in rooms[:fitting]]  # rooms at or below the level (a max-heap)
    heapq.heapify(under)
    above = 0
    for room in rooms[fitting:]:
        largest = max(largest, room)
        heapq.heappush(under, -room)
        below += room
        while under and (below > free if above == 0
                         else -under[0] > (free - below) // above):
            below += heapq.heappop(under)  # the largest room goes above the level
            above += 1
        levels.append((free - below) // above if above else largest)
    return levels


def aged_sizes(jobs: Sequence[Job], curves: Sequence[Curve], aging: float,
               limit: float) -> list[float]:
    """The sizes the rank order goes by: each job's remaining seconds on one GPU, less
    `aging` seconds for each second since it was submitted (waiting or running), by at
    most `limit` of its size.

    Ranking by these is earliest-deadline-first with a job due at its submission plus its
    size / `aging`: among jobs of about the same size the one that arrived first finishes
    first, and a long job is not deferred behind every shorter job that arrives after it,
    which is what sets the p99 under a pure least-work-first order. The limit keeps the
    order among short jobs close to least-work-first: waiting moves a job's rank past
    jobs at most 1 / (1 - limit) times shorter.
    """
    sizes = [c.size for c in curves]
    if aging <= 0 or limit <= 0:
        return sizes
    if len(sizes) < VECTOR_MIN_JOBS:
        return aged_sizes_each(jobs, sizes, aging, limit)
    size = np.array(sizes, dtype=float)
    age = np.array([job.waiting_seconds + job.running_seconds for job in jobs], dtype=float)
    with np.errstate(invalid="ignore"):
        # min(a, b) as Python takes it: a unless b < a (a NaN a stays).
        taken = aging * age
        taken = np.where(limit * size < taken, limit * size, taken)
        return np.where(np.isfinite(size), size - taken, size).tolist()


def aged_sizes_each(jobs: Sequence[Job], sizes: Sequence[float], aging: float,
                    limit: float) -> list[float]:
    """`aged_sizes` one job at a time (the reference; for a few jobs, the quicker)."""
    out = []
    for job, size in zip(jobs, sizes, strict=True):
        if math.isfinite(size):
            age = job.waiting_seconds + job.running_seconds
            size -= min(aging * age, limit * size)
        out.append(size)
    return out


def rank_weights(sizes: Sequence[float], p: float) -> np.ndarray:
    """Weights by rank of remaining work, as heSRPT shares GPUs (Berg, Vesilo and
    Harchol-Balter, 2020): with speedup k^p and no arrivals, the mean completion time is
    least when the k-th shortest of m jobs holds the share
    ((m - k + 1) / m)^c - ((m - k) / m)^c of the GPUs, c = 1 / (1 - p). The weight that
    makes a job with speedup k^p take that share is the share to the power 1 / c.

    Only ranks count: two long jobs of almost equal size are not treated alike, the
    shorter finishes first (instead of both finishing late). p = 0 gives every job the
    same weight. Ties in size go by position (the caller's submit order).
    """
    m = len(sizes)
    weights = np.ones(m)
    if m == 0 or p <= 0:
        return weights
    weights[ascending(sizes)] = rank_shares(m, p)
    return weights


@functools.lru_cache(maxsize=256)
def rank_shares(m: int, p: float) -> np.ndarray:
    """`rank_weights`' weight of the k-th shortest of m jobs, k = 1..m (read-only, kept:
    the quota layer asks for the same few m in every decision)."""
    c = 1.0 / (1.0 - p)
    rank = np.arange(1, m + 1)
    shares = ((m - rank + 1) / m) ** c - ((m - rank) / m) ** c
    weights = shares ** (1.0 / c)
    weights.setflags(write=False)
    return weights


def ascending(keys: Sequence[float]) -> np.ndarray:
    """Positions by key, ties by position: `sorted(range(m), key=lambda i: (keys[i], i))`,
    in one stable sort (as Python's sort where a key is NaN, which orders nothing)."""
    if len(keys) < VECTOR_MIN_JOBS:  # a few: Python's sort, for less than NumPy's calls
        return np.array(sorted(range(len(keys)), key=lambda i: (keys[i], i)), dtype=np.int64)
    values = np.asarray(keys, dtype=float)
    if np.isnan(values).any():
        return np.array(sorted(range(len(values)), key=lambda i: (keys[i], i)), dtype=np.int64)
    return np.argsort(values, kind="stable")


class Curve(NamedTuple):
    """A job's estimated remaining seconds on n = 0..cap GPUs, and on one (its size), and
    the goodput model they were estimated with (None: from epoch times); for a job with
    no epoch left (all its counts cost alike), the seconds of one epoch by count (`pace`),
    which say which counts are slower than smaller ones. (A named tuple: a decision makes
    one per job, and a tuple is made in a fraction of a frozen dataclass's time.)"""

    cap: int
    seconds: np.ndarray
    size: float
    model: GoodputModel | None = None
    pace: np.ndarray | None = None


def best_size(speedup: np.ndarray, allowed: np.ndarray) -> int:
    """The smallest allowed count at which the speedup is highest (speedup[n] on n GPUs;
    0 when no count is allowed). Not the first count where it drops: crossing to a
    second node can cost more than two nodes give, and more nodes then pay for it."""
    counts = np.flatnonzero(allowed[1:]) + 1
    if len(counts) == 0:
        return 0
    return int(counts[np.argmax(speedup[counts])])


def own_model(job: Job, borrowed: GoodputModel | None) -> GoodputModel | None:
    """The job's goodput model: its category's best-measured throughput with its own
    gradient statistics (the category's until it has measured some) and batch limits."""
    own = job.goodput
    if borrowed is None or borrowed is own:
        return own
    if own is None:
        return borrowed
    if own.grad_sqr == 0 and own.grad_var == 0:
        # Not measured yet (a job reports them after its first steps): zeros would price
        # every batch above the initial one at 1 / scale of its samples.
        own = dataclasses.replace(own, grad_sqr=borrowed.grad_sqr, grad_var=borrowed.grad_var)
    if own.perf is not None and own.max_profiled_replicas >= borrowed.max_profiled_replicas:
        return own
    return dataclasses.replace(own, perf=borrowed.perf,
                               max_profiled_replicas=borrowed.max_profiled_replicas)


def category_models(jobs: Sequence[Job], history: bool = True) -> Mapping[str, GoodputModel]:
    """Per category, the model fitted on the most GPUs (ties: the first job), from what
    the jobs report and what their category measured before (`Job.category_goodput`)."""
    best: dict[str, GoodputModel] = {}
    for job in jobs:
        if not job.category:
            continue
        for model in (job.goodput, job.category_goodput if history else None):
            if model is None or model.perf is None:
                continue
            held = best.get(job.category)
            if held is None or model.max_profiled_replicas > held.max_profiled_replicas:
                best[job.category] = model
    return best


def measured_cap(job: Job, model: GoodputModel | None) -> int:
    """At most twice the GPUs the model was measured on, and what the batch range allows."""
    if model is None or model.perf is None:
        return job.max_workers  # nothing measured: no model to trust or to distrust
    batch = model.fixed_batch if model.fixed_batch is not None else model.max_batch
    by_batch = max(batch // max(model.min_local, 1), 1)
    return min(max(2 * model.max_profiled_replicas, 1), by_batch)


def remaining_seconds(job: Job, model: GoodputModel | None, cap: int, per_node: int,
                      max_nodes: int, explore: bool = False,
                      throughput: bool = False) -> np.ndarray:
    """Estimated seconds to finish on n = 1..cap GPUs (at the best even layout).

    With a fitted goodput model and the job's epoch length: epochs left x epoch
    samples / goodput(n). With a model but no epoch length: the epoch time measured
    where the job ran, carried to n by the ratio of goodputs. Without a model: the
    epoch time measured now, carried to n by the throughput measured per layout
    (`throughput`, voda.core.estimate.throughput_speed_model), else the measured epoch
    times (voda.core.estimate).
    """
    epochs = job.remaining_epochs
    if epochs <= 0:
        return np.full(cap, 1e-3)
    times = EpochTimes(job)
    if model is None or model.perf is None:
        by_throughput = throughput_speed_model(job) if throughput else None
        epoch_time = by_throughput.epoch_time if by_throughput is not None else times
        return epochs * np.array([epoch_time(n) for n in range(1, cap + 1)])
    observed = job.epoch_time_by_workers
    anchor = 1
    if observed and not model.epoch_samples:
        anchor = job.current_workers if job.current_workers in observed else max(observed)
    goodput = best_goodput(model, max(cap, anchor), per_node, max_nodes)
    measured = model.max_profiled_replicas
    if explore and 0 < measured < len(goodput):
        hopeful = best_goodput(network_held(model, measured), len(goodput), per_node, max_nodes)
        goodput = np.concatenate([goodput[:measured],
                                  np.maximum(goodput[measured:], hopeful[measured:])])
    if not goodput[anchor - 1] > 0:
        return np.array([epochs * times(n) for n in range(1, cap + 1)])
    if model.epoch_samples:
        samples = model.epoch_samples
    elif observed:
        samples = times(anchor) * goodput[anchor - 1]
    else:
        samples = DEFAULT_EPOCH_SECONDS * goodput[0]
    with np.errstate(divide="ignore"):
        return epochs * np.where(goodput[:cap] > 0, samples / goodput[:cap], np.inf)


def network_held(model: GoodputModel, replicas: int) -> GoodputModel:
    """The model with its network time no longer growing past `replicas` GPUs.

    A fit on steps of at most `replicas` GPUs extrapolates how the network time grows
    beyond them, and from one or two multi-node counts that growth is a guess. Voda
    trusts the model where it was measured and is hopeful beyond it: the job that
    grows measures the larger count, and its next fit corrects the guess.
    """
    p = model.perf
    assert p is not None
    grown = max(replicas - 2, 0)
    return dataclasses.replace(model, perf=dataclasses.replace(
        p, alpha_n=p.alpha_n + p.beta_n * grown, beta_n=0.0,
        alpha_r=p.alpha_r + p.beta_r * grown, beta_r=0.0))
