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

The GPUs go out as a heap would hand them, one at a time, but in one sort
(voda.core.allocation.handout): every job's gains from min up, from one batch of
epoch times, ordered by each gain's running minimum (a job's next GPU is offered only
once it took the one before), ties to the earlier job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import ClassVar

import numpy as np

from voda.core.allocation.base import (
    allocate_by_priority,
    allocate_many_by_priority,
    by_submit,
)
from voda.core.allocation.handout import first_width, running_min, running_order, segments
from voda.core.allocation.reasons import (
    Reason,
    Terms,
    explain_in_order,
    priority_rule,
    seconds,
)
from voda.core.estimate import EpochTimes, epoch_time_runs
from voda.core.model import Job

Prediction = tuple[Callable[[int], float], float]
_NAME, _MIN, _MAX = attrgetter("name"), attrgetter("min_workers"), attrgetter("max_workers")
_EPOCHS, _COMPLETED = attrgetter("epochs"), attrgetter("completed_epochs")


def prediction(job: Job, use_oracle: bool) -> Prediction:
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

    def allocate_many(self, problems: Sequence[tuple[Sequence[Job], int]]) -> list[dict[str, int]]:
        """`self(jobs, capacity)` of each problem, the growth's unit times of all jobs in
        one batch (the quota layer runs one problem per queue, docs/design/013-queues.md)."""
        return allocate_many_by_priority(problems, self._allocate_classes)

    def _allocate_class(self, jobs: Sequence[Job], capacity: int) -> dict[str, int]:
        return self._allocate_classes([(jobs, capacity)])[0]

    def _allocate_classes(self, problems: Sequence[tuple[Sequence[Job], int]]
                          ) -> list[dict[str, int]]:
        """Every job its min in submit order while GPUs last, then the GPUs left one at
        a time to the largest cut in remaining time (`grow_by_time_cut`). Each problem's
        jobs: one priority class in submit order (`allocate_by_priority` hands them so)."""
        growing = []
        out = []
        for ordered, capacity in problems:
            gpus = [0] * len(ordered)
            free = capacity
            started: list[int] = []
            for i, low in enumerate(map(_MIN, ordered)):
                if low <= free:
                    gpus[i] = low
                    free -= low
                    started.append(i)
            if free > 0 and started:
                growing.append(([ordered[i] for i in started], started, gpus, free))
            out.append((ordered, gpus))
        if growing:
            grow_by_time_cut_many(growing, self.oracle)
        return [dict(zip(map(_NAME, ordered), gpus, strict=True)) for ordered, gpus in out]

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> dict[str, Reason]:
        name, oracle = self.name, self.oracle

        def cut(job: Job, gpus: int) -> float:
            unit_time, units = prediction(job, oracle)
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



def unit_times(jobs: Sequence[Job], first: np.ndarray, count: np.ndarray,
               use_oracle: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per job, the time per unit of work at first[i], first[i] + 1, ... (count[i] counts,
    job after job) and the units left: `prediction`'s, for all jobs at once (the jobs
    without an oracle in one batch of epoch times, bit for bit `EpochTimes`)."""
    lengths = np.asarray(count, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    oracles = [job.oracle for job in jobs] if use_oracle else [None] * len(jobs)
    plain = [i for i, oracle in enumerate(oracles) if oracle is None]
    times = np.empty(int(lengths.sum()))
    left = (np.fromiter(map(_EPOCHS, jobs), dtype=float, count=len(jobs))
            - np.fromiter(map(_COMPLETED, jobs), dtype=float, count=len(jobs)))
    units = np.where(left > 0.0, left, 0.0)  # Job.remaining_epochs
    if len(plain) == len(jobs):
        times[:] = epoch_time_runs(jobs, first, lengths)
    elif plain:
        at = np.concatenate([np.arange(starts[i], starts[i] + lengths[i]) for i in plain])
        times[at] = epoch_time_runs([jobs[i] for i in plain], first[plain], lengths[plain])
    for i in range(len(jobs)) if len(plain) < len(jobs) else ():
        job, oracle = jobs[i], oracles[i]
        if oracle is None:
            continue
        lo, n = int(first[i]), int(lengths[i])
        times[starts[i]:starts[i] + n] = [oracle.step_time(k) for k in range(lo, lo + n)]
        units[i] = oracle.remaining_steps(int(job.completed_epochs))
    return times, units


def grow_by_time_cut(jobs: Sequence[Job], positions: Sequence[int], gpus: list[int],
                     free: int, use_oracle: bool) -> None:
    """Hand `free` GPUs to `jobs` (at `positions` of `gpus`, running at their min, in
    submit order) one at a time, each to the job whose remaining time one more cuts
    most, (t(n) - t(n + 1)) x units left, ties to the earlier job; a job stops at its
    max or at a cut that is not positive; all stop when no GPU is left.

    Each job's steps are tabled up to a width; a hand-out that takes a job's last tabled
    step while it has more is redone with wider tables (voda.core.allocation.handout)."""
    grow_by_time_cut_many([(jobs, positions, gpus, free)], use_oracle)


def grow_by_time_cut_many(classes: Sequence[tuple[Sequence[Job], Sequence[int], list[int], int]],
                          use_oracle: bool) -> None:
    """`grow_by_time_cut(jobs, positions, gpus, free, use_oracle)` of each class, the steps
    of every class's jobs at their first tables worked out in one batch (a job's unit
    times, cuts and running cuts are the same operations on the same operands in any
    batch); each class then takes its own steps."""
    lows = [np.fromiter(map(_MIN, jobs), dtype=np.int64, count=len(jobs))
            for jobs, _, _, _ in classes]
    rooms = [np.minimum(np.fromiter(map(_MAX, jobs), dtype=np.int64, count=len(jobs)) - low,
                        free) for (jobs, _, _, free), low in zip(classes, lows, strict=True)]
    widths = [first_width(room, free) for room, (_, _, _, free) in zip(rooms, classes,
                                                                       strict=True)]
    steps = [np.minimum(room, width) for room, width in zip(rooms, widths, strict=True)]
    every = [job for jobs, _, _, _ in classes for job in jobs]
    tabled = _tabled_cuts(every, np.concatenate(lows), np.concatenate(rooms),
                          np.concatenate(steps), use_oracle)
    at = told = 0
    for k, (jobs, positions, gpus, free) in enumerate(classes):
        count, length = len(jobs), int(steps[k].sum())
        owner, last, worst = (part[told:told + length] for part in tabled)
        taken = _taken(last, worst, free)
        owner = owner - at
        at, told = at + count, told + length
        width = widths[k]
        while taken is None:
            width *= 4
            owner, last, worst = _tabled_cuts(jobs, lows[k], rooms[k],
                                              np.minimum(rooms[k], width), use_oracle)
            taken = _taken(last, worst, free)
        for i, extra in enumerate(np.bincount(owner[taken], minlength=count).tolist()):
            gpus[positions[i]] += extra


def _tabled_cuts(jobs: Sequence[Job], lows: np.ndarray, rooms: np.ndarray, steps: np.ndarray,
                 use_oracle: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each job's steps from its min, `steps` of them, job after job, as (owner, whether it
    is the job's last tabled step while it has more, running cut)."""
    times, units = unit_times(jobs, lows, steps + 1, use_oracle)
    now = np.ones(len(times), dtype=bool)
    now[np.cumsum(steps + 1) - 1] = False  # each job's last time is only an `after`
    at = np.flatnonzero(now)
    gains = (times[at] - times[at + 1]) * np.repeat(units, steps)
    starts, owner = segments(steps)
    worst = running_min(gains, starts, steps)
    cut = (steps < rooms) & (steps > 0)
    last = np.zeros(len(gains), dtype=bool)
    last[(starts + steps - 1)[cut]] = True
    return owner, last, worst


def _taken(last: np.ndarray, worst: np.ndarray, free: int) -> np.ndarray | None:
    """The steps taken, in the order a heap hands them out, while GPUs and positive cuts
    last; None when one is a job's last tabled step while it has more."""
    taken = running_order(worst)[:min(free, int(np.count_nonzero(worst > 0)))]
    return None if last[taken].any() else taken
