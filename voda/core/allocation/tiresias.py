"""Tiresias-L (Gu et al., NSDI'19) and its elastic variant (Wu et al., TPDS'21).

Tiresias is a discretized two-dimensional least-attained-service policy: a job's
attained service (GPU-seconds) puts it in one of a few queues; higher queues
(lower index) preempt lower ones; within a queue jobs keep their order. A job
that has waited long enough relative to its last run is promoted to the top
queue so it does not starve. See docs/design/001-allocation.md.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from voda.core.allocation.fifo import fill_in_order
from voda.core.estimate import EpochTimes
from voda.core.model import Job

Service = Literal["since_start", "total"]
QueueOrder = Literal["first_start", "queue_entry"]

SERVICES: tuple[str, ...] = ("since_start", "total")
QUEUE_ORDERS: tuple[str, ...] = ("first_start", "queue_entry")


def _stable(x: float) -> float:
    """Round to 12 significant digits so float noise does not decide ties."""
    if not math.isfinite(x) or x == 0.0:
        return x
    return round(x, 11 - math.floor(math.log10(abs(x))))


@dataclass(frozen=True)
class Tiresias:
    """Discretized 2D-LAS: queues by attained service, each job at its preferred size.

    Knobs:
    - queue_thresholds: ascending GPU-second limits; n thresholds make n + 1 queues.
    - starvation_knob: a waiting job that has run is promoted to the top queue once
      it has waited `knob` times the length of its last run; None disables that.
    - service: "since_start" (GPU-seconds since the last start) or "total".
    - queue_order: within a queue, "first_start" (first start time, never-started
      jobs after the started ones in submit order) or "queue_entry" (the time the
      job entered its queue, as noted by the engine in `queue_since`).
    """

    name: str = "Tiresias"
    queue_thresholds: tuple[float, ...] = (3600.0,)
    starvation_knob: float | None = 8.0
    service: Service = "since_start"
    queue_order: QueueOrder = "first_start"

    def __post_init__(self) -> None:
        thresholds = tuple(float(t) for t in self.queue_thresholds)
        if any(t <= 0 for t in thresholds):
            raise ValueError(f"queue_thresholds: must be positive, got {list(thresholds)}")
        if any(b <= a for a, b in pairwise(thresholds)):
            raise ValueError(
                f"queue_thresholds: must be strictly ascending, got {list(thresholds)}"
            )
        object.__setattr__(self, "queue_thresholds", thresholds)
        if self.starvation_knob is not None and not self.starvation_knob > 0:
            raise ValueError(
                f"starvation_knob: must be positive or None, got {self.starvation_knob}"
            )
        if self.service not in SERVICES:
            raise ValueError(f"service: must be one of {list(SERVICES)}, got {self.service!r}")
        if self.queue_order not in QUEUE_ORDERS:
            raise ValueError(
                f"queue_order: must be one of {list(QUEUE_ORDERS)}, got {self.queue_order!r}"
            )

    # ----- queues ---------------------------------------------------------------
    def attained(self, job: Job) -> float:
        if self.service == "total":
            return job.attained_gpu_seconds
        return job.attained_gpu_seconds_since_start

    def promoted(self, job: Job) -> bool:
        """A waiting job that has run and waited `starvation_knob` times its last run."""
        if self.starvation_knob is None or job.current_workers > 0:
            return False
        last_run = job.running_seconds_since_start
        return last_run > 0 and job.waiting_seconds_since_start >= self.starvation_knob * last_run

    def priority_class(self, job: Job) -> int:
        """The queue index of `job` (0 is the top queue), promotions included."""
        if self.promoted(job):
            return 0
        return bisect.bisect_right(self.queue_thresholds, self.attained(job))

    def seconds_until_class_change(self, job: Job) -> float | None:
        """Seconds until `job` changes queue with nothing else happening, or None.

        A running job moves down when its service reaches the next threshold; a
        waiting job that has run moves to the top queue when it is promoted.
        """
        if job.current_workers > 0:
            queue = bisect.bisect_right(self.queue_thresholds, self.attained(job))
            if queue >= len(self.queue_thresholds):
                return None
            return (self.queue_thresholds[queue] - self.attained(job)) / job.current_workers
        if self.starvation_knob is None or self.promoted(job):
            return None
        last_run = job.running_seconds_since_start
        if last_run <= 0 or self.priority_class(job) == 0:
            return None
        return self.starvation_knob * last_run - job.waiting_seconds_since_start

    def order(self, jobs: Sequence[Job]) -> list[Job]:
        """Jobs in the order they are served: by queue, then the in-queue order."""
        return sorted(jobs, key=self._order_key)

    def _order_key(self, job: Job) -> tuple:
        queue = self.priority_class(job)
        if self.queue_order == "queue_entry":
            since = job.queue_since if job.queue_since is not None else job.submit_time
            return (queue, since, job.sort_key)
        if job.first_start_time is not None:
            return (queue, 0, job.first_start_time, job.sort_key)
        return (queue, 1, 0.0, job.sort_key)

    # ----- allocation ---------------------------------------------------------
    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return fill_in_order(self.order(jobs), capacity, lambda j: j.preferred)


@dataclass(frozen=True)
class ElasticTiresias(Tiresias):
    """Tiresias at preferred size, then the GPUs left over by marginal gain.

    When more than `compaction_threshold` jobs would be left pending, the jobs
    outside the top queue start at min instead of preferred (compaction), so
    more jobs fit. Leftover GPUs go one at a time to the running job below max
    with the largest marginal speedup S(n+1) - S(n); ties in queue order.
    """

    name: str = "ElasticTiresias"
    compaction_threshold: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.compaction_threshold < 0:
            raise ValueError(
                f"compaction_threshold: must not be negative, got {self.compaction_threshold}"
            )

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        ordered = self.order(jobs)
        allocation = fill_in_order(ordered, capacity, lambda j: j.preferred)
        pending = sum(1 for gpus in allocation.values() if gpus == 0)
        if pending > self.compaction_threshold:
            top = {j.name for j in ordered if self.priority_class(j) == 0}
            allocation = fill_in_order(
                ordered, capacity, lambda j: j.preferred if j.name in top else j.min_workers
            )
        grow_by_gain(ordered, allocation, capacity)
        return allocation


def grow_by_gain(ordered: Sequence[Job], allocation: dict[str, int], capacity: int) -> None:
    """Hand the free GPUs one at a time to the allocated job below max with the best gain.

    Gain is S(n+1) - S(n) = t(1)/t(n+1) - t(1)/t(n) from the job's speed model
    (t: epoch time); ties go to the earlier job in `ordered`. Every free GPU is
    handed out while some allocated job is below max.
    """
    free = capacity - sum(allocation.values())
    if free <= 0:
        return
    growing = [j for j in ordered if 0 < allocation.get(j.name, 0) < j.max_workers]
    if sum(j.max_workers - allocation[j.name] for j in growing) <= free:
        for job in growing:  # room for all: every job ends at max, whatever the order
            allocation[job.name] = job.max_workers
        return
    times: dict[int, EpochTimes] = {}
    one: dict[int, float] = {}  # epoch time on one worker
    current: dict[int, float] = {}  # epoch time at the size after the next GPU
    heap: list[tuple[float, int]] = []
    for position, job in enumerate(ordered):
        have = allocation.get(job.name, 0)
        if have == 0 or have >= job.max_workers:
            continue
        epoch_time = times[position] = EpochTimes(job)
        t1 = one[position] = epoch_time(1)
        after = current[position] = epoch_time(have + 1)
        heap.append((-_stable(t1 / after - t1 / epoch_time(have)), position))
    heapq.heapify(heap)
    while free > 0 and heap:
        position = heap[0][1]
        job = ordered[position]
        have = allocation[job.name] + 1
        allocation[job.name] = have
        free -= 1
        if have < job.max_workers:
            t1, now = one[position], current[position]
            after = current[position] = times[position](have + 1)
            heapq.heapreplace(heap, (-_stable(t1 / after - t1 / now), position))
        else:
            heapq.heappop(heap)
