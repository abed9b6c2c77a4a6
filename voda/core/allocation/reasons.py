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
from collections.abc import Callable, Iterator, Mapping, Sequence
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
    RECLAIMED = "Reclaimed"  # its queue had borrowed the GPUs; another queue took them back
    BORROWING_LIMIT = "BorrowingLimit"  # its queue holds its guarantee + borrowing limit
    QUEUE_SHARE = "QueueShare"  # its queue holds its share of the GPUs beyond guarantees


class Reason:
    """A code and one sentence of facts. The sentence may be rendered lazily, on first
    read (`render`): the decision path decides the codes, and builds a message only for
    the reasons somebody reads."""

    __slots__ = ("_message", "_render", "code")

    def __init__(self, code: ReasonCode, message: str | None = None,
                 render: Callable[[], str] | None = None) -> None:
        if message is None and render is None:
            raise ValueError("a Reason needs a message or a way to render one")
        self.code = code
        self._message = message
        self._render: Callable[[], str] | tuple | None = render

    @classmethod
    def lazy(cls, code: ReasonCode, render: Callable[[Job, int, ReasonCode], str], job: Job,
             gpus: int) -> Reason:
        """A reason whose message is `render(job, gpus, code)`, built on first read."""
        reason = object.__new__(cls)
        reason.code = code
        reason._message = None
        reason._render = (render, job, gpus)
        return reason

    @property
    def message(self) -> str:
        if self._message is None:
            render = self._render
            assert render is not None
            self._message = render() if callable(render) else render[0](render[1], render[2],
                                                                          self.code)
            self._render = None
        return self._message

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Reason):
            return NotImplemented
        return self.code == other.code and self.message == other.message

    def __hash__(self) -> int:
        return hash((self.code, self.message))

    def __repr__(self) -> str:
        return f"Reason(code={self.code!r}, message={self.message!r})"


class Complete(dict):  # type: ignore[type-arg]
    """Reasons that cover every job below max (the built-in algorithms' own)."""


class Deferred(Mapping[str, Reason]):
    """Reasons worked out on first read. decide() hands its reasons over this way, so
    that the plan's actions go out before anything is spent on explaining them: the
    engine reads them right after applying the plan (Scheduler._note_reasons)."""

    __slots__ = ("_compute", "_reasons")

    def __init__(self, compute: Callable[[], Mapping[str, Reason]]) -> None:
        self._compute: Callable[[], Mapping[str, Reason]] | None = compute
        self._reasons: Mapping[str, Reason] | None = None

    def _read(self) -> Mapping[str, Reason]:
        if self._reasons is None:
            assert self._compute is not None
            self._reasons, self._compute = self._compute(), None
        return self._reasons

    def __getitem__(self, name: str) -> Reason:
        return self._read()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def __repr__(self) -> str:
        return f"Deferred({dict(self._read())!r})"


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
        if isinstance(result, Complete):
            return result
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


def explain_in_order(jobs: Sequence[Job], capacity: int, allocation: Mapping[str, int],
                     terms: Terms, order: Callable[[], Sequence[Job]]) -> Complete:
    """Reasons for the jobs below max. One pass over the jobs decides the codes; the
    messages are rendered on first read, from the algorithm's serving order (`order()`:
    every job, priority classes first, as every built-in algorithm serves them), which is
    then computed once for all of them."""
    free = capacity - sum(allocation.values())
    context = _Context(capacity, free, allocation, terms, order)
    takers = context.takers
    out = Complete()
    cap_of, best_count = terms.cap, terms.best_count if free > 0 else None
    preferred_sized = terms.preferred_sized
    render = context.message
    lazy = Reason.lazy
    preempted, shrunk, queued, does_not_fit, shared = (
        ReasonCode.PREEMPTED, ReasonCode.SHRUNK, ReasonCode.QUEUED, ReasonCode.DOES_NOT_FIT,
        ReasonCode.SHARED)
    get = allocation.get
    for i, job in enumerate(jobs):
        gpus = get(job.name, 0)
        before = job.current_workers
        if gpus > before:
            takers.append((before - gpus, i, job))
        if gpus >= job.max_workers:
            continue
        if gpus < before:
            code = preempted if gpus == 0 else shrunk
        elif gpus == 0:
            code = does_not_fit if job.min_workers > capacity else queued
        elif cap_of is not None and (cap := cap_of(job)) is not None and gpus >= cap:
            code = ReasonCode.MEASURED_CAP
        elif preferred_sized and gpus == job.preferred:
            code = ReasonCode.PREFERRED_SIZE
        elif best_count is not None and (said := best_count(job, gpus)):
            out[job.name] = Reason(ReasonCode.AT_BEST_COUNT, said)
            continue
        else:
            code = shared
        out[job.name] = lazy(code, render, job, gpus)
    return out


class _Context:
    """What the messages of one explanation share, computed on the first message read."""

    def __init__(self, capacity: int, free: int, allocation: Mapping[str, int], terms: Terms,
                 order: Callable[[], Sequence[Job]]) -> None:
        self.capacity, self.free, self.allocation, self.terms = capacity, free, allocation, terms
        self.order = order
        self.takers: list[tuple[int, int, Job]] = []  # (-gain, position, job)
        self._sorted = False
        self._queue: dict[str, tuple[int, int, int, int, int, list[tuple[str, int]]]] | None = None

    def _takers(self) -> list[tuple[int, int, Job]]:
        if not self._sorted:
            self.takers.sort(key=lambda t: (t[0], t[1]))
            self._sorted = True
        return self.takers

    def _queue_facts(self) -> dict[str, tuple[int, int, int, int, int, list[tuple[str, int]]]]:
        """Per job at 0: its position and class size, the GPUs of the classes above, and
        the GPUs, holders and first names ahead of it in its class."""
        if self._queue is not None:
            return self._queue
        allocation = self.allocation
        ordered = self.order()
        sizes: dict[int, int] = {}
        for job in ordered:
            sizes[job.priority] = sizes.get(job.priority, 0) + 1
        facts: dict[str, tuple[int, int, int, int, int, list[tuple[str, int]]]] = {}
        class_of: int | None = None
        above = position = held = holders = 0
        ahead: list[tuple[str, int]] = []
        for job in ordered:
            if job.priority != class_of:
                above += held
                class_of, position, held, holders, ahead = job.priority, 0, 0, 0, []
            position += 1
            gpus = allocation.get(job.name, 0)
            if gpus == 0:
                facts[job.name] = (position, sizes[job.priority], above, held, holders,
                                   ahead if len(ahead) == NAMES_SHOWN else list(ahead))
            else:
                held += gpus
                holders += 1
                if len(ahead) < NAMES_SHOWN:
                    ahead.append((job.name, gpus))
        self._queue = facts
        return facts

    def message(self, job: Job, gpus: int, code: ReasonCode) -> str:
        terms, name, free, capacity = self.terms, self.terms.algorithm, self.free, self.capacity
        if code is ReasonCode.PREEMPTED or code is ReasonCode.SHRUNK:
            before = job.current_workers
            others = [t for t in self._takers() if t[2].name != job.name]
            took = [(t.name, -gain) for gain, _, t in others[:NAMES_SHOWN]]
            rule = terms.rule(job, others[0][2]) if others else None
            went = f"went to {names(took, len(others), '+')}" if others else "stay free"
            head = (f"Preempted: its {plural(before)} {went}" if gpus == 0 else
                    f"Shrunk from {before} to {plural(gpus)}: the {before - gpus} it gave up "
                    f"{went}")
            return head + (f"; {rule}." if rule else ".")
        if code is ReasonCode.DOES_NOT_FIT:
            return (f"Needs {job.min_workers} GPUs (its min) but {name} shares {capacity} "
                    f"{job.gpu_type} GPUs in all.")
        if code is ReasonCode.QUEUED:
            position, in_class, above, held, holders, ahead = self._queue_facts()[job.name]
            facts = [f"Queued: {ordinal(position)} of {in_class} in priority class "
                     f"{job.priority} by {name}'s {terms.order}"]
            if above:
                facts.append(f"higher priority classes hold {above} GPUs")
            if holders:
                facts.append(f"ahead of it {names(ahead, holders)} hold {held} GPUs")
            facts.append(f"its min of {job.min_workers} GPUs does not fit in the {free} left "
                         "free" if job.min_workers > free else
                         f"{free} GPUs are free but {name} keeps them for others")
            return "; ".join(facts) + "."
        if code is ReasonCode.MEASURED_CAP:
            cap = terms.cap(job) if terms.cap is not None else gpus
            return (f"{name} lets it grow to at most {cap} GPUs, twice the most its speed was "
                    f"measured on, until it measures more; it holds {gpus} of its max "
                    f"{job.max_workers}.")
        if code is ReasonCode.PREFERRED_SIZE:
            return (f"{name} runs each job at its preferred size: {gpus} of its max "
                    f"{job.max_workers} GPUs.")
        share = f"; {name} {terms.share}" if terms.share else ""
        if job.max_workers > capacity:
            share += (f"; its max of {job.max_workers} is more than the {capacity} "
                      f"{job.gpu_type} GPUs there are: it grows if nodes join")
        return (f"Holds {gpus} of its max {job.max_workers} GPUs: {capacity - free} of "
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
