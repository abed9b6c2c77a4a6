"""Optimus (Peng et al., EuroSys'18) as the Pollux artifact's Optimus+Oracle baseline.

Within each priority class (strict, as in every algorithm), every job first gets
its min workers, in submit order, while GPUs last. The GPUs
left go one at a time to the job whose remaining time drops most with one more:
(t(n) - t(n + 1)) x remaining work, ties to the earlier job, until no GPU is left
or no job gains.

With `oracle=True` (the baseline) the step time t(n) and the remaining steps come
from `Job.oracle`, the simulator's truth (voda.core.oracle.StepOracle): that is
the "+Oracle". A job without one, and every job with `oracle=False`, is judged
by what the service observes instead: epoch times by worker count
(voda.core.estimate) and remaining epochs. See docs/design/009-elastic-baselines.md.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from voda.core.allocation.base import allocate_by_priority, by_submit
from voda.core.allocation.reasons import (
    Reason,
    Terms,
    explain_in_order,
    priority_rule,
    seconds,
)
from voda.core.estimate import EpochTimes
from voda.core.model import Job

Prediction = tuple[Callable[[int], float], float]


def _prediction(job: Job, use_oracle: bool) -> Prediction:
    """(time per unit of work on n GPUs, units left): steps with the oracle, else epochs."""
    oracle = job.oracle if use_oracle else None
    if oracle is not None:
        return oracle.step_time, oracle.remaining_steps(int(job.completed_epochs))
    return EpochTimes(job), job.remaining_epochs


@dataclass(frozen=True)
class Optimus:
    """Greedy marginal gain in remaining time; `oracle` reads the simulator's truth."""

    name: str = "Optimus"
    oracle: bool = True
    # Remaining work and goodput change as jobs run: decide again on progress reports.
    decides_on_progress: ClassVar[bool] = True

    def __call__(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return allocate_by_priority(jobs, capacity, self._allocate_class)

    def _allocate_class(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        ordered = by_submit(jobs)
        allocation = {j.name: 0 for j in ordered}
        free = capacity
        predict: list[Prediction] = []
        # (-gain, position, time per unit at one GPU more): positions are unique in the
        # heap (a job is pushed again only once popped), so ties never read the time,
        # which the job's next push starts from instead of computing it again.
        heap: list[tuple[float, int, float]] = []
        for i, job in enumerate(ordered):
            predict.append(_prediction(job, self.oracle))
            if job.min_workers > free:
                continue
            allocation[job.name] = job.min_workers
            free -= job.min_workers
            self._push(heap, i, job, job.min_workers, predict[i],
                       predict[i][0](job.min_workers))
        while free > 0 and heap:
            _, i, unit_time = heapq.heappop(heap)
            job = ordered[i]
            allocation[job.name] += 1
            free -= 1
            self._push(heap, i, job, allocation[job.name], predict[i], unit_time)
        return allocation

    @staticmethod
    def _push(heap: list[tuple[float, int, float]], i: int, job: Job, gpus: int,
              prediction: Prediction, unit_time_now: float) -> None:
        """Queue the job's gain from one more GPU, when it can take one and would gain."""
        if gpus + 1 > job.max_workers:
            return
        unit_time, units = prediction
        unit_time_next = unit_time(gpus + 1)
        gain = (unit_time_now - unit_time_next) * units
        if gain > 0:
            heapq.heappush(heap, (-gain, i, unit_time_next))

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> dict[str, Reason]:
        name, oracle = self.name, self.oracle

        def cut(job: Job, gpus: int) -> float:
            unit_time, units = _prediction(job, oracle)
            return (unit_time(max(gpus, 1)) - unit_time(gpus + 1)) * units

        def rule(loser: Job, taker: Job) -> str:
            said = priority_rule(loser, taker, name)
            if said:
                return said
            if taker.current_workers == 0:
                return (f"{name}: every job's min comes first, in submit order, and "
                        f"{taker.name} starts at its min of {taker.min_workers} GPUs")
            gpus = allocation.get(taker.name, 0)
            return (f"{name}: its last GPU cuts {taker.name}'s remaining time by "
                    f"{seconds(cut(taker, gpus - 1))}, one more would cut {loser.name}'s by "
                    f"{seconds(cut(loser, allocation.get(loser.name, 0)))}")

        def best(job: Job, gpus: int) -> str | None:
            if cut(job, gpus) > 0:
                return None
            return (f"At its best count: one more GPU would not cut its remaining time "
                    f"({gpus} of max {job.max_workers}), so {name} gives it no more.")

        terms = Terms(name, "submit order (mins first)", rule,
                      share="gives the GPUs beyond every job's min one at a time to the job "
                      "whose remaining time drops most", best_count=best)
        return explain_in_order(jobs, capacity, allocation, terms, lambda: by_submit(jobs))
