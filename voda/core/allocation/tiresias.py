"""Tiresias-L (Gu et al., NSDI'19) and its elastic variant (Wu et al., TPDS'21).

Tiresias is a discretized two-dimensional least-attained-service policy: a job's
attained service (GPU-seconds) puts it in one of a few queues; higher queues
(lower index) preempt lower ones; within a queue jobs keep their order. A job
that has waited long enough relative to how long it ran is promoted to the top
queue so it does not starve.

The queue follows the authors' reference simulator (SymbioticLab/Tiresias,
`dlas_sim_jobs`): the service that places a job counts from its submission and
is reset only when the job is promoted, never by a preemption or a restart, so a
demotion sticks. A waiting job in a lower queue that has run since its last
promotion is promoted once the time it waited since then reaches
`starvation_knob` times the time it ran since then. The engine resets the
counters when `promotion_due` says so (Job's `*_since_promotion` fields).
See docs/design/001-allocation.md.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, pairwise
from operator import attrgetter
from typing import Any, Literal, NamedTuple

import numpy as np

from voda.core.allocation.afs_states import rounded_as_python
from voda.core.allocation.base import (
    allocate_by_priority,
    allocate_many_by_priority,
    by_submit,
    most_at_rigid_size,
    rigid_size,
)
from voda.core.allocation.fifo import fill_at_rigid_size, fill_sizes
from voda.core.allocation.handout import (
    first_width,
    running_min,
    running_order,
    segments,
)
from voda.core.allocation.reasons import (
    Reason,
    Terms,
    explain_in_order,
    priority_rule,
    slower_with_more,
)
from voda.core.estimate import EpochTimes, epoch_time_runs
from voda.core.model import Job

_PRIORITY, _NAME = attrgetter("priority"), attrgetter("name")
_MIN, _MAX = attrgetter("min_workers"), attrgetter("max_workers")

QueueOrder = Literal["first_start", "queue_entry"]
QUEUE_ORDERS: tuple[str, ...] = ("first_start", "queue_entry")

# Chosen by measurement on the Pollux workloads 1-4 (docs/design/001-allocation.md).
DEFAULT_QUEUE_THRESHOLDS: tuple[float, ...] = (57600.0,)
DEFAULT_STARVATION_KNOB: float | None = 16.0


def _stable(x: float) -> float:
    """Round to 12 significant digits so float noise does not decide ties."""
    if not math.isfinite(x) or x == 0.0:
        return x
    return round(x, 11 - math.floor(math.log10(abs(x))))


def _classes_per_job(self: Tiresias, jobs: Sequence[Job]) -> list[int]:
    """`priority_classes` of a Tiresias whose `priority_class` is its own."""
    return [self.priority_class(job) for job in jobs]


@dataclass(frozen=True)
class Tiresias:
    """Discretized 2D-LAS: queues by attained service, each job at its requested size
    (`base.rigid_size`: preferred, within what its class has, never slower than a smaller
    count).

    Knobs:
    - queue_thresholds: ascending GPU-second limits; n thresholds make n + 1 queues.
    - starvation_knob: a waiting job of a lower queue that has run since its last
      promotion is promoted to the top queue once it has waited `knob` times as long
      as it ran since then; None disables promotion.
    - queue_order: within a queue, "first_start" (first start time, never-started
      jobs after the started ones in submit order) or "queue_entry" (the time the
      job entered its queue, as noted by the engine in `queue_since`).
    """

    name: str = "Tiresias"
    queue_thresholds: tuple[float, ...] = DEFAULT_QUEUE_THRESHOLDS
    starvation_knob: float | None = DEFAULT_STARVATION_KNOB
    queue_order: QueueOrder = "first_start"

    def __post_init__(self) -> None:
        given = self.queue_thresholds
        if isinstance(given, int | float) and not isinstance(given, bool):
            given = (given,)  # one threshold, two queues
        try:
            thresholds = tuple(float(t) for t in given if not isinstance(t, bool))
        except (TypeError, ValueError):
            raise ValueError(
                f"queue_thresholds: must be a list of numbers, got {self.queue_thresholds!r}"
            ) from None
        if not thresholds:
            raise ValueError("queue_thresholds: must hold at least one threshold")
        if any(not (math.isfinite(t) and t > 0) for t in thresholds):
            raise ValueError(
                f"queue_thresholds: must be positive finite numbers, got {list(thresholds)}"
            )
        if any(b <= a for a, b in pairwise(thresholds)):
            raise ValueError(
                f"queue_thresholds: must be strictly ascending, got {list(thresholds)}"
            )
        object.__setattr__(self, "queue_thresholds", thresholds)
        knob = self.starvation_knob
        if knob is not None and (
            isinstance(knob, bool) or not isinstance(knob, int | float)
            or not (math.isfinite(knob) and knob > 0)
        ):
            raise ValueError(f"starvation_knob: must be a positive number or None, got {knob!r}")
        if self.queue_order not in QUEUE_ORDERS:
            raise ValueError(
                f"queue_order: must be one of {list(QUEUE_ORDERS)}, got {self.queue_order!r}"
            )

    # ----- queues ---------------------------------------------------------------
    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that changes a per-job hook without its one-loop form has that form
        read the hook per job (`priority_classes`) or taken away (the engine then asks each
        job: `promotions_and_classes`, `earliest_class_change`), so its own rule is the
        one applied."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        if "priority_class" in own and "priority_classes" not in own:
            cls.priority_classes = _classes_per_job  # type: ignore[method-assign]
        if ({"priority_class", "promotion_due"} & own.keys()
                and "promotions_and_classes" not in own):
            cls.promotions_and_classes = None  # type: ignore[assignment]
        if "seconds_until_class_change" in own and "earliest_class_change" not in own:
            cls.earliest_class_change = None  # type: ignore[assignment]

    def service_queue(self, job: Job) -> int:
        """The queue the job's service since its last promotion puts it in."""
        return bisect.bisect_right(self.queue_thresholds, job.attained_gpu_seconds_since_promotion)

    def promotion_due(self, job: Job) -> bool:
        """A waiting job of a lower queue that has waited `knob` times as long as it ran,
        both counted since its last promotion (the engine then resets those counters)."""
        knob = self.starvation_knob
        if knob is None or job.current_workers > 0:
            return False
        ran = job.running_seconds_since_promotion
        # The engine asks of every job at every step: service_queue(job), inline.
        return (
            ran > 0
            and bisect.bisect_right(self.queue_thresholds,
                                    job.attained_gpu_seconds_since_promotion) > 0
            and job.waiting_seconds_since_promotion >= knob * ran
        )

    def priority_class(self, job: Job) -> int:
        """The queue index of `job` (0 is the top queue), a due promotion included."""
        # 0 if promotion_due(job) else service_queue(job), in one pass (every job, every
        # step): a due promotion needs a queue below the top, and the job waiting.
        queue = bisect.bisect_right(self.queue_thresholds, job.attained_gpu_seconds_since_promotion)
        knob = self.starvation_knob
        if queue > 0 and knob is not None and job.current_workers <= 0:
            ran = job.running_seconds_since_promotion
            if ran > 0 and job.waiting_seconds_since_promotion >= knob * ran:
                return 0
        return queue

    def seconds_until_class_change(self, job: Job) -> float | None:
        """Seconds until `job` changes queue with nothing else happening, or None.

        A running job moves down when its service reaches the next threshold; a
        waiting job of a lower queue that has run is promoted when it has waited
        long enough.
        """
        thresholds = self.queue_thresholds
        attained = job.attained_gpu_seconds_since_promotion
        queue = bisect.bisect_right(thresholds, attained)
        workers = job.current_workers
        if workers > 0:
            if queue >= len(thresholds):
                return None
            return (thresholds[queue] - attained) / workers
        ran = job.running_seconds_since_promotion
        knob = self.starvation_knob
        if knob is None or queue == 0 or ran <= 0:
            return None
        waited = job.waiting_seconds_since_promotion
        if waited >= knob * ran:  # promotion_due(job), the rest of it
            return None
        return knob * ran - waited

    def order(self, jobs: Sequence[Job]) -> list[Job]:
        """Jobs in the order they are served: priority class, queue, then the in-queue
        order, ties by sort_key: in sort_key order first (`by_submit`), then one stable
        sort by the rest."""
        return self._in_queues(by_submit(jobs))

    def _in_queues(self, ordered: list[Job]) -> list[Job]:
        """`order` of jobs already in sort_key order (`by_submit`)."""
        if not ordered:
            return []
        queues = self.priority_classes(ordered)
        # Stable sorts from the last key to the first, one plain key each.
        if self.queue_order == "queue_entry":
            keys: list[list] = [[
                job.queue_since if job.queue_since is not None else job.submit_time
                for job in ordered]]
        else:
            keys = [[0.0 if job.first_start_time is None else job.first_start_time
                     for job in ordered],
                    [job.first_start_time is None for job in ordered]]
        keys += [queues, list(map(_PRIORITY, ordered))]
        positions = list(range(len(ordered)))
        for key in keys:
            if key.count(key[0]) < len(key):  # one value throughout: the sort changes nothing
                positions.sort(key=key.__getitem__)
        return [ordered[i] for i in positions]

    def priority_classes(self, jobs: Sequence[Job]) -> list[int]:
        """`priority_class` of every job, in one pass."""
        return self.promotions_and_classes(jobs)[1]

    def promotions_and_classes(self, jobs: Sequence[Job]) -> tuple[list[int], list[int]]:
        """The engine's pass at every step, in one loop: the positions of the jobs whose
        promotion is due (`promotion_due`) and every job's `priority_class` once those are
        promoted (0: a promoted job's service starts over, below every threshold)."""
        thresholds, knob = self.queue_thresholds, self.starvation_knob
        queues = [bisect.bisect_right(thresholds, job.attained_gpu_seconds_since_promotion)
                  for job in jobs]
        due: list[int] = []
        if knob is None:
            return due, queues
        for i in compress(range(len(queues)), queues):  # below the top queue
            job = jobs[i]
            if job.current_workers <= 0:
                ran = job.running_seconds_since_promotion
                if ran > 0 and job.waiting_seconds_since_promotion >= knob * ran:
                    due.append(i)
                    queues[i] = 0
        return due, queues

    def earliest_class_change(self, jobs: Sequence[Job]) -> float | None:
        """The least `seconds_until_class_change` of `jobs` that is not negative (None when
        none is), in one loop (the engine's next wake-up, at every step)."""
        thresholds, knob = self.queue_thresholds, self.starvation_knob
        last = len(thresholds)
        earliest: float | None = None
        for job in jobs:
            attained = job.attained_gpu_seconds_since_promotion
            queue = bisect.bisect_right(thresholds, attained)
            workers = job.current_workers
            if workers > 0:
                if queue >= last:
                    continue
                seconds = (thresholds[queue] - attained) / workers
            else:
                if knob is None or queue == 0:
                    continue
                ran = job.running_seconds_since_promotion
                if ran <= 0:
                    continue
                waited = job.waiting_seconds_since_promotion
                if waited >= knob * ran:
                    continue
                seconds = knob * ran - waited
            if seconds >= 0 and (earliest is None or seconds < earliest):
                earliest = seconds
        return earliest

    # ----- allocation ---------------------------------------------------------
    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return allocate_by_priority(jobs, capacity, self._allocate_class)

    def _allocate_class(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        # allocate_by_priority hands a class over in sort_key order (job names are unique:
        # by_submit of it is the same list)
        return fill_at_rigid_size(self._in_queues(list(jobs)), capacity)

    def most_gpus(self, jobs: Sequence[Job]) -> int:
        return most_at_rigid_size(jobs)

    # ----- explanations -------------------------------------------------------
    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> dict[str, Reason]:
        return explain_in_order(jobs, capacity, allocation, self._terms(),
                                lambda: self.order(jobs))

    def _terms(self) -> Terms:
        return Terms(self.name, f"queues ({self.queue_order.replace('_', ' ')} order within "
                     "a queue)", self._rule, preferred_sized=True)

    def _rule(self, loser: Job, taker: Job) -> str:
        said = priority_rule(loser, taker, self.name)
        if said:
            return said
        theirs, mine = self.priority_class(taker), self.priority_class(loser)
        if theirs < mine:
            limit = self.queue_thresholds[min(mine, len(self.queue_thresholds)) - 1]
            return (f"{self.name}: {taker.name} is in queue {theirs}, {loser.name} in queue "
                    f"{mine} after {loser.attained_gpu_seconds_since_promotion:.0f} "
                    f"GPU-seconds of service (the threshold is {limit:.0f})")
        if loser.current_workers > 0 and taker.current_workers > 0:
            return (f"{self.name}: one more GPU gains {taker.name} more than it gains "
                    f"{loser.name} (largest marginal gain first)")
        return (f"{self.name}: both are in queue {mine} and {taker.name} comes first in it "
                f"({self.queue_order.replace('_', ' ')} order)")



@dataclass(frozen=True)
class ElasticTiresias(Tiresias):
    """Tiresias at its requested size, then every GPU left to the largest marginal gain.

    When more than `compaction_threshold` jobs would be left pending, the jobs
    outside the top queue start at min instead of preferred (compaction), so more
    jobs fit. Then the GPUs left go one at a time (a job at 0 takes its min) to the
    job with the largest gain: S(n+1) - S(n) for a running job, S(min) / min (the
    per-GPU gain of starting it) for a pending job whose min fits; ties in queue
    order. Growth stops at a strictly negative gain: a GPU that would slow its job
    down stays idle.
    """

    name: str = "ElasticTiresias"
    compaction_threshold: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        threshold = self.compaction_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
            raise ValueError(
                f"compaction_threshold: must be a whole number >= 0, got {threshold!r}"
            )

    def most_gpus(self, jobs: Sequence[Job]) -> int:  # it grows jobs to their max
        return sum(j.max_workers for j in jobs)

    def allocate_many(self, problems: Sequence[tuple[Sequence[Job], int]]) -> list[dict[str, int]]:
        """`self(jobs, capacity)` of each problem, the growth's epoch times of all jobs in
        one batch (the quota layer runs one problem per queue, docs/design/013-queues.md)."""
        return allocate_many_by_priority(problems, self._allocate_classes)

    def _allocate_class(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        ordered, allocation = self._started(jobs, capacity)
        grow_by_gain(ordered, allocation, capacity)
        return allocation

    def _allocate_classes(self, problems: Sequence[tuple[Sequence[Job], int]]
                          ) -> list[dict[str, int]]:
        started = [(*self._started(jobs, capacity), capacity) for jobs, capacity in problems]
        grow_by_gain_many(started)
        return [allocation for _, allocation, _ in started]

    def _started(self, jobs: Sequence[Job], capacity: int) -> tuple[list[Job], dict[str, int]]:
        """The class in queue order and its jobs at their requested sizes (or, compacted,
        at min outside the top queue), before growth."""
        ordered = self.order(jobs)
        sizes = [rigid_size(job, capacity) for job in ordered]
        gpus = fill_sizes(sizes, capacity)
        if gpus.count(0) > self.compaction_threshold:  # jobs left pending: compaction
            queues = self.priority_classes(ordered)
            gpus = fill_sizes([size if queue == 0 else job.min_workers for job, size, queue
                               in zip(ordered, sizes, queues, strict=True)], capacity)
        return ordered, dict(zip(map(_NAME, ordered), gpus, strict=True))

    def _terms(self) -> Terms:
        return Terms(self.name, f"queues ({self.queue_order.replace('_', ' ')} order within "
                     "a queue)", self._rule,
                     share="gives the GPUs left over one at a time to the largest marginal "
                     "speedup",
                     best_count=self._best_count)

    def _best_count(self, job: Job, gpus: int) -> str | None:
        return slower_with_more(job, gpus, EpochTimes(job), self.name)


def stable_all(values: np.ndarray) -> np.ndarray:
    """`_stable` of every value: each rounded to 12 significant digits as Python's `round`
    does (`rounded_as_python`, digits per value), its magnitude read by `math.log10`
    where NumPy's could read it another way (within a hair of a power of ten)."""
    out = values.copy()
    rounded = np.isfinite(values) & (values != 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        magnitude = np.log10(np.abs(values))
        exponent = np.floor(magnitude)
        hair = rounded & (np.abs(magnitude - np.rint(magnitude)) < 1e-6)
    at = np.flatnonzero(hair)
    exponent[at] = [math.floor(math.log10(abs(v))) for v in values[at].tolist()]
    digits = np.where(rounded, 11 - exponent, 0).astype(np.int64)
    scaled = rounded & (digits >= 0) & (digits <= 22)
    at = np.flatnonzero(scaled)
    out[at] = rounded_as_python(values[at], digits[at])
    for k in np.flatnonzero(rounded & ~scaled).tolist():
        out[k] = _stable(float(values[k]))
    return out


def grow_by_gain(ordered: Sequence[Job], allocation: dict[str, int], capacity: int) -> None:
    """Hand the free GPUs out one at a time to the job of largest gain (a job at 0 its min).

    A running job below max gains S(n+1) - S(n) from one more GPU; a job at 0 whose
    min fits gains S(min) / min per GPU from starting (speedups from its speed model,
    S(k) = t(1) / t(k)). Ties go to the earlier job in `ordered`. Stops when the best
    gain is strictly negative or no job can take what is left; a start that no longer
    fits is passed over, and that job gets nothing.

    Done as a heap handing out one step at a time would, in one sort of every job's
    steps by their running worst gain (voda.core.allocation.handout), the gains from one
    batch of epoch times; each job's steps tabled up to a width, and the hand-out redone
    with wider tables when it takes a job's last tabled step while the job has more.
    """
    grow_by_gain_many([(ordered, allocation, capacity)])


class _Growers(NamedTuple):
    """The jobs of one class that may grow, where they start and how far they may go."""

    jobs: list[Job]
    haves: list[int]
    first: np.ndarray  # where growth starts: at min for a job at 0
    rooms: np.ndarray
    waiting: np.ndarray
    free: int
    width: int


def _growers(ordered: Sequence[Job], allocation: Mapping[str, int],
             capacity: int) -> _Growers | None:
    free = capacity - sum(allocation.values())
    if free <= 0:
        return None
    jobs, haves = [], []
    for job in ordered:
        have = allocation.get(job.name, 0)
        if have < job.max_workers and (have > 0 or job.min_workers <= free):
            jobs.append(job)
            haves.append(have)
    if not jobs:
        return None
    have = np.array(haves, dtype=np.int64)
    lows = np.fromiter(map(_MIN, jobs), dtype=np.int64, count=len(jobs))
    waiting = have == 0
    first = np.where(waiting, lows, have)
    rooms = np.minimum(np.fromiter(map(_MAX, jobs), dtype=np.int64, count=len(jobs)) - first,
                       free)
    return _Growers(jobs, haves, first, rooms, waiting, free,
                    first_width(rooms + waiting, free))


def grow_by_gain_many(classes: Sequence[tuple[Sequence[Job], dict[str, int], int]]) -> None:
    """`grow_by_gain(ordered, allocation, capacity)` of each class, the steps of every
    class's jobs at their first tables worked out in one batch (a job's epoch times,
    gains and running gains are the same operations on the same operands in any batch);
    each class then walks its own steps."""
    found = [(_growers(ordered, allocation, capacity), allocation)
             for ordered, allocation, capacity in classes]
    live = [(grow, allocation) for grow, allocation in found if grow is not None]
    if not live:
        return
    every = [job for grow, _ in live for job in grow.jobs]
    ones = np.ones(len(every), dtype=np.int64)
    one_all = epoch_time_runs(every, ones, ones)
    first, rooms, waiting = (np.concatenate([getattr(grow, part) for grow, _ in live])
                             for part in ("first", "rooms", "waiting"))
    steps_all = [np.minimum(grow.rooms, grow.width) for grow, _ in live]
    steps = np.concatenate(steps_all)
    tabled = _tabled_steps(first, rooms, waiting, one_all,
                           steps, epoch_time_runs(every, first, steps + 1))
    at = told = 0
    for (grow, allocation), mine in zip(live, steps_all, strict=True):
        count = len(grow.jobs)
        length = int(mine.sum() + grow.waiting.sum())
        one = one_all[at:at + count]
        owner, takes, last, worst = (part[told:told + length] for part in tabled)
        grown = _hand_out(owner - at, takes, last, worst, grow.free, count)
        at, told = at + count, told + length
        width = grow.width
        while grown is None:
            width *= 4
            mine = np.minimum(grow.rooms, width)
            redone = _tabled_steps(grow.first, grow.rooms, grow.waiting, one, mine,
                                   epoch_time_runs(grow.jobs, grow.first, mine + 1))
            grown = _hand_out(*redone, grow.free, count)
        for job, held, extra in zip(grow.jobs, grow.haves, grown, strict=True):
            if extra:
                allocation[job.name] = held + extra


def _tabled_steps(first: np.ndarray, rooms: np.ndarray, waiting: np.ndarray, one: np.ndarray,
                  steps: np.ndarray, times: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each job's steps, tabled `steps` GPUs from `first` (`times`: its epoch times there,
    job after job; `one`: at one GPU), job after job, as (owner, GPUs taken, whether it
    is the job's last tabled step while it has more, running gain): a job at 0 starts
    first (its min), then grows one GPU at a time."""
    ends = np.cumsum(steps + 1)
    speed = np.repeat(one, steps + 1) / times  # S(k) = t(1) / t(k)
    later = np.ones(len(times), dtype=bool)
    later[ends - (steps + 1)] = False  # each job's first count is only a `before`
    at = np.flatnonzero(later)
    growth = speed[at] - speed[at - 1]
    # A job at 0 starts first: its step goes before its growth steps.
    lengths = steps + waiting
    starts, owner = segments(lengths)
    gains = np.empty(len(owner))
    is_start = np.zeros(len(owner), dtype=bool)
    is_start[starts[waiting]] = True
    gains[is_start] = speed[(ends - (steps + 1))[waiting]] / first[waiting]
    gains[~is_start] = growth
    worst = running_min(stable_all(gains), starts, lengths)
    takes = np.where(is_start, first[owner], 1)
    last = np.zeros(len(owner), dtype=bool)
    cut = (steps < rooms) & (lengths > 0)
    last[(starts + lengths - 1)[cut]] = True
    return owner, takes, last, worst


def _hand_out(owner: np.ndarray, takes: np.ndarray, last: np.ndarray, worst: np.ndarray,
              free: int, count: int) -> list[int] | None:
    """`grow_by_gain` of `count` jobs over their tabled steps (`_tabled_steps`): the GPUs
    each job gets (a job at 0 that starts: its min and its growth), or None when a job
    took its last tabled step and has more (then wider tables are needed). The steps go
    in the order a heap hands them out (voda.core.allocation.handout)."""
    order = running_order(worst)[:int(np.count_nonzero(worst >= 0.0))]  # below 0: stop
    taken = takes[order]
    total = np.cumsum(taken)
    fits = int(np.searchsorted(total, free, side="right"))  # all of these fit, in turn
    if last[order[:fits]].any():
        return None
    grown = np.bincount(owner[order[:fits]], weights=taken[:fits],
                        minlength=count).astype(np.int64).tolist()
    free -= int(total[fits - 1]) if fits else 0
    passed = [False] * count
    owners, takes_at, lasts = owner.tolist(), takes.tolist(), last.tolist()
    for k in order[fits:].tolist() if free else ():
        i = owners[k]
        if passed[i]:
            continue
        take = takes_at[k]
        if take > free:  # a start that no longer fits: passed over for good
            passed[i] = True
            continue
        if lasts[k]:
            return None
        grown[i] += take
        free -= take
        if not free:
            break
    return grown
