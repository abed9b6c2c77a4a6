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
import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from operator import attrgetter
from typing import Literal

from voda.core.allocation.base import (
    allocate_by_priority,
    by_submit,
    most_at_rigid_size,
    rigid_size,
)
from voda.core.allocation.fifo import fill_at_rigid_size, fill_in_order
from voda.core.allocation.reasons import (
    Reason,
    Terms,
    explain_in_order,
    priority_rule,
    slower_with_more,
)
from voda.core.estimate import EpochTimes
from voda.core.model import Job

_PRIORITY = attrgetter("priority")

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
    def service_queue(self, job: Job) -> int:
        """The queue the job's service since its last promotion puts it in."""
        return bisect.bisect_right(self.queue_thresholds, job.attained_gpu_seconds_since_promotion)

    def promotion_due(self, job: Job) -> bool:
        """A waiting job of a lower queue that has waited `knob` times as long as it ran,
        both counted since its last promotion (the engine then resets those counters)."""
        if self.starvation_knob is None or job.current_workers > 0:
            return False
        ran = job.running_seconds_since_promotion
        return (
            ran > 0
            and self.service_queue(job) > 0
            and job.waiting_seconds_since_promotion >= self.starvation_knob * ran
        )

    def priority_class(self, job: Job) -> int:
        """The queue index of `job` (0 is the top queue), a due promotion included."""
        return 0 if self.promotion_due(job) else self.service_queue(job)

    def seconds_until_class_change(self, job: Job) -> float | None:
        """Seconds until `job` changes queue with nothing else happening, or None.

        A running job moves down when its service reaches the next threshold; a
        waiting job of a lower queue that has run is promoted when it has waited
        long enough.
        """
        queue = self.service_queue(job)
        if job.current_workers > 0:
            if queue >= len(self.queue_thresholds):
                return None
            remaining = self.queue_thresholds[queue] - job.attained_gpu_seconds_since_promotion
            return remaining / job.current_workers
        ran = job.running_seconds_since_promotion
        if self.starvation_knob is None or queue == 0 or ran <= 0 or self.promotion_due(job):
            return None
        return self.starvation_knob * ran - job.waiting_seconds_since_promotion

    def order(self, jobs: Sequence[Job]) -> list[Job]:
        """Jobs in the order they are served: priority class, queue, then the in-queue
        order, ties by sort_key: in sort_key order first (`by_submit`), then one stable
        sort by the rest."""
        ordered = by_submit(jobs)
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
            positions.sort(key=key.__getitem__)
        return [ordered[i] for i in positions]

    def priority_classes(self, jobs: Sequence[Job]) -> list[int]:
        """`priority_class` of every job, in one pass."""
        thresholds, knob = self.queue_thresholds, self.starvation_knob
        queues = [bisect.bisect_right(thresholds, job.attained_gpu_seconds_since_promotion)
                  for job in jobs]
        if knob is None:
            return queues
        for i, job in enumerate(jobs):
            if queues[i] > 0 and job.current_workers <= 0:
                ran = job.running_seconds_since_promotion
                if ran > 0 and job.waiting_seconds_since_promotion >= knob * ran:
                    queues[i] = 0
        return queues

    # ----- allocation ---------------------------------------------------------
    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return allocate_by_priority(jobs, capacity, self._allocate_class)

    def _allocate_class(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return fill_at_rigid_size(self.order(jobs), capacity)

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

    def _allocate_class(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        ordered = self.order(jobs)
        allocation = fill_at_rigid_size(ordered, capacity)
        pending = sum(1 for gpus in allocation.values() if gpus == 0)
        if pending > self.compaction_threshold:
            top = {j.name for j in ordered if self.priority_class(j) == 0}
            allocation = fill_in_order(
                ordered, capacity,
                lambda j: rigid_size(j, capacity) if j.name in top else j.min_workers)
        grow_by_gain(ordered, allocation, capacity)
        return allocation

    def _terms(self) -> Terms:
        return Terms(self.name, f"queues ({self.queue_order.replace('_', ' ')} order within "
                     "a queue)", self._rule,
                     share="gives the GPUs left over one at a time to the largest marginal "
                     "speedup",
                     best_count=self._best_count)

    def _best_count(self, job: Job, gpus: int) -> str | None:
        return slower_with_more(job, gpus, EpochTimes(job), self.name)


def grow_by_gain(ordered: Sequence[Job], allocation: dict[str, int], capacity: int) -> None:
    """Hand the free GPUs out one at a time to the job of largest gain (a job at 0 its min).

    A running job below max gains S(n+1) - S(n) from one more GPU; a job at 0 whose
    min fits gains S(min) / min per GPU from starting (speedups from its speed model,
    S(k) = t(1) / t(k)). Ties go to the earlier job in `ordered`. Stops when the best
    gain is strictly negative or no job can take what is left.
    """
    free = capacity - sum(allocation.values())
    if free <= 0:
        return
    times: dict[int, EpochTimes] = {}
    heap: list[tuple[float, int]] = []
    for position, job in enumerate(ordered):
        have = allocation.get(job.name, 0)
        if have >= job.max_workers or (have == 0 and job.min_workers > free):
            continue
        times[position] = EpochTimes(job)
        heap.append((-_gain(times[position], have, job.min_workers), position))
    heapq.heapify(heap)
    while free > 0 and heap:
        negative_gain, position = heap[0]
        if negative_gain > 0:
            return  # the best gain is negative: more GPUs would slow jobs down
        job = ordered[position]
        have = allocation[job.name]
        take = job.min_workers if have == 0 else 1
        if take > free:
            heapq.heappop(heap)  # a start that no longer fits; free only shrinks
            continue
        have = allocation[job.name] = have + take
        free -= take
        if have < job.max_workers:
            heapq.heapreplace(heap, (-_gain(times[position], have, job.min_workers), position))
        else:
            heapq.heappop(heap)


def _gain(epoch_time: EpochTimes, have: int, min_workers: int) -> float:
    """Marginal gain of the next step: one GPU more, or starting at min (per GPU)."""
    one = epoch_time(1)
    if have == 0:
        return _stable(one / epoch_time(min_workers) / min_workers)
    return _stable(one / epoch_time(have + 1) - one / epoch_time(have))
