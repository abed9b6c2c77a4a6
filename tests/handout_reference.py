"""Optimus's and ElasticTiresias's hand-outs as they were before one sort replaced their
heaps (voda.core.allocation.handout): one GPU at a time from a heap keyed by the gain,
each gain from the job's speed model (or its oracle) when the job is pushed; and
ElasticTiresias's compaction as it was (a rigid size per job again). The references
the sorted hand-outs must equal, to the last GPU."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from voda.core.allocation.base import by_submit, rigid_size
from voda.core.allocation.fifo import fill_at_rigid_size, fill_in_order
from voda.core.allocation.optimus import Optimus, Prediction, prediction
from voda.core.allocation.tiresias import ElasticTiresias, _stable
from voda.core.estimate import EpochTimes
from voda.core.model import Job


def optimus_class_reference(self: Optimus, jobs: Sequence[Job], capacity: int
                            ) -> dict[str, int]:
    """Optimus._allocate_class as it was."""
    ordered = by_submit(jobs)
    allocation = {j.name: 0 for j in ordered}
    free = capacity
    predict: list[Prediction] = []
    heap: list[tuple[float, int, float]] = []
    for i, job in enumerate(ordered):
        predict.append(prediction(job, self.oracle))
        if job.min_workers > free:
            continue
        allocation[job.name] = job.min_workers
        free -= job.min_workers
        _push(heap, i, job, job.min_workers, predict[i], predict[i][0](job.min_workers))
    while free > 0 and heap:
        _, i, unit_time = heapq.heappop(heap)
        job = ordered[i]
        allocation[job.name] += 1
        free -= 1
        _push(heap, i, job, allocation[job.name], predict[i], unit_time)
    return allocation


def _push(heap: list[tuple[float, int, float]], i: int, job: Job, gpus: int,
          prediction: Prediction, unit_time_now: float) -> None:
    if gpus + 1 > job.max_workers:
        return
    unit_time, units = prediction
    unit_time_next = unit_time(gpus + 1)
    gain = (unit_time_now - unit_time_next) * units
    if gain > 0:
        heapq.heappush(heap, (-gain, i, unit_time_next))


def elastic_tiresias_class_reference(self: ElasticTiresias, jobs: Sequence[Job],
                                     capacity: int) -> dict[str, int]:
    """ElasticTiresias._allocate_class as it was: its compaction and its heap."""
    ordered = self.order(jobs)
    allocation = fill_at_rigid_size(ordered, capacity)
    pending = sum(1 for gpus in allocation.values() if gpus == 0)
    if pending > self.compaction_threshold:
        top = {j.name for j in ordered if self.priority_class(j) == 0}
        allocation = fill_in_order(
            ordered, capacity,
            lambda j: rigid_size(j, capacity) if j.name in top else j.min_workers)
    grow_by_gain_reference(ordered, allocation, capacity)
    return allocation


def grow_by_gain_reference(ordered: Sequence[Job], allocation: dict[str, int],
                           capacity: int) -> None:
    """tiresias.grow_by_gain as it was."""
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
            return
        job = ordered[position]
        have = allocation[job.name]
        take = job.min_workers if have == 0 else 1
        if take > free:
            heapq.heappop(heap)
            continue
        have = allocation[job.name] = have + take
        free -= take
        if have < job.max_workers:
            heapq.heapreplace(heap, (-_gain(times[position], have, job.min_workers), position))
        else:
            heapq.heappop(heap)


def _gain(epoch_time: EpochTimes, have: int, min_workers: int) -> float:
    one = epoch_time(1)
    if have == 0:
        return _stable(one / epoch_time(min_workers) / min_workers)
    return _stable(one / epoch_time(have + 1) - one / epoch_time(have))
