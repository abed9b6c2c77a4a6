"""Why a job holds fewer GPUs than its max: a stable code and one sentence of facts.

An algorithm may explain its allocation (the optional `ExplainsAllocation` capability):
`explain(jobs, capacity, allocation)` returns a Reason for the jobs it left below their
max. The built-in algorithms explain themselves in their own terms through
`explain_in_order`, which walks the jobs once in the algorithm's serving order; a custom
algorithm that gives no reason (or whose `explain` fails) gets `generic_reasons`.
`explain` (below) is what decide() calls: it keeps only jobs below max and fills in the
generic reason for any job the algorithm left out.

Codes are stable (they are API, Kubernetes condition reasons and metric labels); the
message may change wording from release to release.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from voda.core.model import Job


class ReasonCode(StrEnum):
    """Why a job holds fewer GPUs than its max (CamelCase, as Kubernetes reasons are)."""

    QUEUED = "Queued"  # at 0: jobs ahead of it under the algorithm hold the GPUs
    PREEMPTED = "Preempted"  # it held GPUs and lost them all to other jobs
    SHRUNK = "Shrunk"  # it held more GPUs and gave some to other jobs
    SHARED = "Shared"  # running below max: the GPUs it could grow into are held by others
    PREFERRED_SIZE = "PreferredSize"  # the algorithm runs jobs at their preferred size
    AT_BEST_COUNT = "AtBestCount"  # more GPUs would not speed it up (GPUs are left free)
    MEASURED_CAP = "MeasuredCap"  # it grows only as far as its speed has been measured
    DOES_NOT_FIT = "DoesNotFit"  # its min cannot be placed on the GPUs it may use
    NO_FREE_GPU_TYPE = "NoFreeGPUType"  # every GPU of its type is taken (or it has none)
    NODE_LOST = "NodeLost"  # a node it ran on left the cluster
    PLAN_REFUSED = "PlanRefused"  # the decision for its GPU type was refused; retried later
    RATE_LIMITED = "RateLimited"  # the next decision waits for the rate limit
    GENERIC = "AlgorithmDecision"  # a custom algorithm that gave no reason


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    message: str  # one sentence with the facts behind it


@runtime_checkable
class ExplainsAllocation(Protocol):
    """An algorithm that says why it left jobs below their max."""

    def explain(self, jobs: Sequence[Job], capacity: int,
                allocation: Mapping[str, int]) -> Mapping[str, Reason]: ...


def below_max(jobs: Sequence[Job], allocation: Mapping[str, int]) -> list[Job]:
    return [j for j in jobs if allocation.get(j.name, 0) < j.max_workers]


def generic_reason(job: Job, gpus: int, algorithm: str) -> Reason:
    held = f"{gpus} of its max {job.max_workers} GPUs" if gpus else (
        f"no GPUs (min {job.min_workers}, max {job.max_workers})")
    return Reason(ReasonCode.GENERIC,
                  f"The algorithm {algorithm!r} gave it {held} and gave no reason.")


def generic_reasons(jobs: Sequence[Job], allocation: Mapping[str, int],
                    algorithm: str) -> dict[str, Reason]:
    return {j.name: generic_reason(j, allocation.get(j.name, 0), algorithm)
            for j in below_max(jobs, allocation)}


def explain(algorithm: object, jobs: Sequence[Job], capacity: int,
            allocation: Mapping[str, int]) -> dict[str, Reason]:
    """A Reason for every job below its max: the algorithm's own where it gives one, else
    the generic one. An `explain` that raises or returns something else counts as none."""
    name = str(getattr(algorithm, "name", type(algorithm).__name__))
    given: Mapping[str, Reason] = {}
    method = getattr(algorithm, "explain", None)
    if callable(method):
        try:
            result = method(jobs, capacity, allocation)
        except Exception:  # a custom explanation may fail: the job still gets a reason
            result = None
        if isinstance(result, Mapping):
            given = result
    out: dict[str, Reason] = {}
    for job in jobs:
        gpus = allocation.get(job.name, 0)
        if gpus >= job.max_workers:
            continue
        reason = given.get(job.name)
        out[job.name] = reason if isinstance(reason, Reason) else generic_reason(
            job, gpus, name)
    return out


# ----- the built-in algorithms' common walk ----------------------------------------------
# rule(loser, taker): why `taker` got GPUs before `loser`, in the algorithm's own terms.
Rule = Callable[[Job, Job], str]
NAMES_SHOWN = 3


def names(jobs: Sequence[tuple[str, int]], total: int, sign: str = "") -> str:
    """'a (4 GPUs), b (2 GPUs) and 3 more': the first NAMES_SHOWN of `total`."""
    shown = ", ".join(f"{name} ({sign}{gpus} GPU{'s' if gpus != 1 else ''})"
                      for name, gpus in jobs[:NAMES_SHOWN])
    more = total - min(len(jobs), NAMES_SHOWN)
    return f"{shown} and {more} more" if more > 0 else shown


def plural(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def seconds(value: float) -> str:
    if not math.isfinite(value):
        return "unknown"
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 60:
        return f"{value / 60:.1f} min"
    return f"{value:.0f} s"


@dataclass(frozen=True, slots=True)
class Terms:
    """How one built-in algorithm speaks of itself.

    `order`: its serving order in words ("submit order"); `rule`: why a taker won over a
    loser; `share`: how it shares the GPUs beyond min, for a job running below max with
    no GPU free; `preferred_sized`: it runs jobs at their preferred size and never more;
    `best_count(job, gpus)`: a sentence when one GPU more would not speed the job up (it
    is asked only where GPUs are left free); `cap(job)`: the most GPUs it lets the job
    take for what it has measured, or None.
    """

    algorithm: str
    order: str
    rule: Rule
    share: str = ""
    preferred_sized: bool = False
    best_count: Callable[[Job, int], str | None] | None = None
    cap: Callable[[Job], int | None] | None = None


def explain_in_order(ordered: Sequence[Job], capacity: int, allocation: Mapping[str, int],
                     terms: Terms) -> dict[str, Reason]:
    """Reasons for the jobs below max, `ordered` being every job in the algorithm's serving
    order (priority classes first, as every built-in algorithm serves them). One pass over
    the jobs, plus a sort of the jobs that gained GPUs."""
    free = capacity - sum(allocation.values())
    takers = sorted(
        ((allocation.get(j.name, 0) - j.current_workers, i, j) for i, j in enumerate(ordered)
         if allocation.get(j.name, 0) > j.current_workers),
        key=lambda t: (-t[0], t[1]))
    out: dict[str, Reason] = {}
    name = terms.algorithm
    # Per priority class: jobs seen so far, and the GPUs and names of those holding some.
    class_of: int | None = None
    class_size: dict[int, int] = {}
    for job in ordered:
        class_size[job.priority] = class_size.get(job.priority, 0) + 1
    above = 0  # GPUs held by classes above the current one
    position = held_ahead = holders = 0
    ahead: list[tuple[str, int]] = []
    for job in ordered:
        if job.priority != class_of:
            above += held_ahead
            class_of, position, held_ahead, holders, ahead = job.priority, 0, 0, 0, []
        position += 1
        gpus = allocation.get(job.name, 0)
        if gpus < job.max_workers:
            out[job.name] = _one(job, gpus, capacity, free, terms, takers, position,
                                 class_size[job.priority], above, held_ahead, holders, ahead,
                                 name)
        if gpus > 0:
            held_ahead += gpus
            holders += 1
            if len(ahead) < NAMES_SHOWN:
                ahead.append((job.name, gpus))
    return out


def _one(job: Job, gpus: int, capacity: int, free: int, terms: Terms,
         takers: list[tuple[int, int, Job]], position: int, in_class: int, above: int,
         held_ahead: int, holders: int, ahead: list[tuple[str, int]], name: str) -> Reason:
    before = job.current_workers
    if gpus < before:  # preempted or shrunk: who took the GPUs, and by which rule
        took = [(t.name, gain) for gain, _, t in takers if t.name != job.name]
        rule = next((terms.rule(job, t) for _, _, t in takers if t.name != job.name), None)
        lost = before - gpus
        went = (f"went to {names(took, len(took), '+')}" if took
                else "stay free")
        head = (f"Preempted: its {plural(before)} {went}" if gpus == 0
                else f"Shrunk from {before} to {plural(gpus)}: the {lost} it gave up {went}")
        return Reason(ReasonCode.PREEMPTED if gpus == 0 else ReasonCode.SHRUNK,
                      f"{head}" + (f"; {rule}." if rule else "."))
    if gpus == 0:
        if job.min_workers > capacity:
            return Reason(ReasonCode.DOES_NOT_FIT,
                          f"Needs {job.min_workers} GPUs (its min) but {name} shares "
                          f"{capacity} {job.gpu_type} GPUs in all.")
        facts = [f"Queued: {ordinal(position)} of {in_class} in priority class "
                 f"{job.priority} by {name}'s {terms.order}"]
        if above:
            facts.append(f"higher priority classes hold {above} GPUs")
        if holders:
            facts.append(f"ahead of it {names(ahead, holders)} hold {held_ahead} GPUs")
        facts.append(f"its min of {job.min_workers} GPUs does not fit in the {free} left free"
                     if job.min_workers > free else
                     f"{free} GPUs are free but {name} keeps them for others")
        return Reason(ReasonCode.QUEUED, "; ".join(facts) + ".")
    cap = terms.cap(job) if terms.cap is not None else None
    if cap is not None and gpus >= cap:
        return Reason(ReasonCode.MEASURED_CAP,
                      f"{name} lets it grow to at most {cap} GPUs, twice the most its "
                      f"speed was measured on, until it measures more; it holds {gpus} "
                      f"of its max {job.max_workers}.")
    if terms.preferred_sized and gpus == job.preferred:
        return Reason(ReasonCode.PREFERRED_SIZE,
                      f"{name} runs each job at its preferred size: {gpus} of its max "
                      f"{job.max_workers} GPUs.")
    if free > 0 and terms.best_count is not None:
        said = terms.best_count(job, gpus)
        if said:
            return Reason(ReasonCode.AT_BEST_COUNT, said)
    share = f"; {name} {terms.share}" if terms.share else ""
    return Reason(ReasonCode.SHARED,
                  f"Holds {gpus} of its max {job.max_workers} GPUs: {capacity - free} of "
                  f"{capacity} {job.gpu_type} GPUs are in use{share}.")


def slower_with_more(job: Job, gpus: int, epoch_time: Callable[[int], float],
                     name: str) -> str | None:
    """A sentence when one GPU more would not make the job's epoch faster."""
    now, more = epoch_time(gpus), epoch_time(gpus + 1)
    if more < now:
        return None
    return (f"At its best count: on {gpus + 1} GPUs an epoch would take {seconds(more)} "
            f"against {seconds(now)} on {gpus}, so {name} gives it no more.")


def by_priority(ordered: Sequence[Job]) -> list[Job]:
    """`ordered` with priority classes first (a stable sort keeps the order within one)."""
    return sorted(ordered, key=_priority)


def _priority(job: Job) -> int:
    return job.priority


def priority_rule(loser: Job, taker: Job, name: str) -> str | None:
    """The rule when the taker is of a higher priority class, else None."""
    if taker.priority < loser.priority:
        return (f"{name}: {taker.name}'s priority class {taker.priority} is served before "
                f"{loser.name}'s {loser.priority}")
    return None


def submit_rule(name: str, elastic: bool) -> Rule:
    """The FIFO rules: priority, then min before growth (elastic), then submit order."""
    def rule(loser: Job, taker: Job) -> str:
        said = priority_rule(loser, taker, name)
        if said:
            return said
        if elastic and taker.current_workers == 0:
            return (f"{name}: {taker.name} starts at its min of {taker.min_workers} GPUs, and "
                    f"every job's min comes before any job's growth beyond min")
        return (f"{name}: {taker.name} was submitted at t={taker.submit_time:g}, "
                f"{loser.name} at t={loser.submit_time:g}")
    return rule
