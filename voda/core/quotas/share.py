"""The quota layer's decision for one GPU type: which share of the capacity each queue's
jobs are allocated on, by the chosen algorithm (docs/design/013-queues.md).

1. guarantee: each queue's algorithm allocates its jobs on its guarantee (where the
   decision needs that run: `voda.core.quotas.runs`);
2. lend and share: the GPUs no queue holds within its guarantee (less what lending limits
   keep) are shared by weight among the queues that may borrow, up to their borrowing
   limits and the sum of their jobs' max; a queue that leaves part of its share unused
   gives it back, and what the queues leave is evened out over those that want more, a
   job's grain at a time, before any further round shares it again (`_fill`);
3. top up: GPUs still idle go to any queue whose jobs can use them;
4. reclaim: a queue that held borrowed GPUs beyond its new share, while another queue
   grows, gives them back by `reclaim` (shrinking first);
5. allocate: each queue's algorithm allocates its jobs on its share, as it would alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from voda.core.model import Job
from voda.core.quotas.fill import water_fill
from voda.core.quotas.model import DEFAULT_QUEUE, Queue, QueueSet
from voda.core.quotas.reclaim import Reclaim, reclaim
from voda.core.quotas.runs import QueueRuns

Allocate = Callable[[Sequence[Job], int], Mapping[str, int]]
_CURRENT, _NAME = attrgetter("current_workers"), attrgetter("name")


@dataclass(frozen=True, slots=True)
class QueueOutcome:
    """One queue in one decision, for one GPU type."""

    name: str
    guarantee: int  # its guarantee (as far as the capacity covers the guarantees)
    ceiling: float  # guarantee + borrowing limit (inf: unlimited)
    lendable: float  # of its guarantee, what others may use while it is idle
    weight: float
    held_before: int  # GPUs its jobs held going in
    within_guarantee: int  # GPUs its algorithm takes on its guarantee alone
    share: int  # GPUs its algorithm allocated its jobs on (they may take fewer)
    used: int  # GPUs its jobs hold after the decision
    reclaimed_by_shrinking: int = 0
    reclaimed_by_preemption: int = 0
    waiting: int = 0  # its jobs at 0 GPUs
    reclaiming: bool = False  # its borrowed GPUs were cut by the reclaim rule

    @property
    def borrowed(self) -> int:
        return max(0, self.used - self.guarantee)

    @property
    def at_borrowing_limit(self) -> bool:
        return self.used >= self.ceiling

    @property
    def reclaimed(self) -> int:
        return self.reclaimed_by_shrinking + self.reclaimed_by_preemption


@dataclass(frozen=True, slots=True)
class QuotaDecision:
    allocation: dict[str, int]
    queues: dict[str, QueueOutcome]
    job_queue: dict[str, str]  # job -> its queue
    reclaimed: frozenset[str]  # jobs that gave GPUs back to another queue


def share(algorithm: Allocate, jobs: Sequence[Job], capacity: int, queues: QueueSet,
          gpu_type: str, exact: bool = True) -> QuotaDecision:
    """Allocate `jobs` (all of `gpu_type`) on `capacity` GPUs under `queues`.

    `exact=False` leaves `within_guarantee` at its bound min(guarantee, demand) where the
    decision did not need the run on the guarantee (the allocation is the same)."""
    declared = {q.name: q for q in queues}
    groups = _groups(jobs, declared)
    job_queue: dict[str, str] = {}
    for name, members in groups.items():
        job_queue.update(dict.fromkeys(map(_NAME, members), name))
    names = sorted(set(groups) | {q for q in declared if declared[q].guaranteed(gpu_type)})
    qs = [declared.get(n) or Queue(n) for n in names]
    weight = [q.weight for q in qs]
    guarantee = _covered([q.guaranteed(gpu_type) for q in qs], weight, capacity)
    ceiling = [min(q.ceiling(gpu_type) - q.guaranteed(gpu_type) + g, capacity)
               for q, g in zip(qs, guarantee, strict=True)]
    lend = [q.may_lend(gpu_type) for q in qs]
    keep = [0 if limit is None else max(0, g - limit) for g, limit in zip(guarantee, lend,
                                                                           strict=True)]
    run = QueueRuns(algorithm, [groups.get(n, []) for n in names], guarantee)
    # 1. guarantee (run now only for a queue whose jobs want no more than it)
    base = run.base
    # 2. lend and share: no queue is offered more than its jobs' max together, nor grows
    # beyond its guarantee when that covers them
    given = list(guarantee)  # the GPUs each queue's algorithm was last run on
    shares = list(base)  # the GPUs it takes on them
    want = [min(c, d) for c, d in zip(ceiling, run.demand, strict=True)]
    open_ = [w > max(b, g) for w, b, g in zip(want, base, guarantee, strict=True)]
    _fill(shares, given, open_, capacity, guarantee, weight, want, keep, run)
    # 3. GPUs still idle go to any queue whose jobs can use them
    held = [sum(map(_CURRENT, groups.get(n, ()))) for n in names]
    cuts: dict[int, Reclaim] = {}

    def grow(i: int, gpus: int) -> int:
        """Queue i on `gpus` GPUs: what it then takes, kept when it is more."""
        members = groups.get(names[i], [])
        if i in cuts:
            cut = reclaim(algorithm, members, gpus, run(i, min(guarantee[i], gpus)))
            used = sum(cut.allocation.values())
            if used > shares[i]:
                cuts[i], shares[i] = cut, used
        elif run.may_take_more(i, run(i, given[i]), gpus):
            used = run.used(i, gpus)
            if used > shares[i]:
                given[i], shares[i] = gpus, used
        return shares[i]

    _top_up(shares, capacity, guarantee, weight, want, keep, grow)
    # 4. reclaim what the borrowers hold beyond their new shares, shrinking first
    growing = sum(1 for s, h in zip(shares, held, strict=True) if s > h)
    for i, name in enumerate(names):
        members = groups.get(name, [])
        taker = growing - (shares[i] > held[i]) > 0  # another queue takes GPUs back
        if (taker and held[i] > given[i] and held[i] > guarantee[i]
                and _takes_from_running(members, run(i, given[i]))):
            cuts[i] = reclaim(algorithm, members, shares[i],
                              run(i, min(guarantee[i], shares[i])))
            shares[i] = sum(cuts[i].allocation.values())
    if cuts:  # what a cut left idle goes to whoever can use it, the cut queues included
        _top_up(shares, capacity, guarantee, weight, want, keep, grow)
    # 5. allocate
    if exact:
        run.prefetch([(i, g) for i, g in enumerate(guarantee) if not run.exact[i]])
    allocation: dict[str, int] = {}
    outcomes: dict[str, QueueOutcome] = {}
    reclaimed: set[str] = set()
    for i, name in enumerate(names):
        cut = cuts.get(i)
        counts = cut.allocation if cut else run(i, given[i])
        shrunk, preempted = (cut.by_shrinking, cut.by_preemption) if cut else (0, 0)
        reclaimed.update(cut.cut if cut else ())
        allocation.update(counts)
        outcomes[name] = QueueOutcome(
            name=name, guarantee=guarantee[i], ceiling=ceiling[i],
            lendable=math.inf if lend[i] is None else min(lend[i], guarantee[i]),
            weight=weight[i], held_before=held[i],
            within_guarantee=run.exact_base(i) if exact else base[i], share=given[i],
            used=sum(counts.values()), reclaimed_by_shrinking=shrunk,
            reclaimed_by_preemption=preempted,
            waiting=list(counts.values()).count(0),  # counts name every job of the queue
            reclaiming=cut is not None)
    return QuotaDecision(allocation, outcomes, job_queue, frozenset(reclaimed))


def _groups(jobs: Sequence[Job], declared: Mapping[str, Queue]) -> dict[str, list[Job]]:
    """The jobs by the queue they run in, each queue's in the order given: a job naming
    no declared queue runs in `default`."""
    named: dict[str, list[Job]] = {}
    for job in jobs:  # by the name each gives (one lookup a job), then by queue
        members = named.get(job.queue)
        if members is None:
            named[job.queue] = [job]
        else:
            members.append(job)
    groups = {name: members for name, members in named.items() if name in declared}
    strays = [name for name in named if name not in declared]
    if strays == [DEFAULT_QUEUE] or (len(strays) == 1 and DEFAULT_QUEUE not in groups):
        groups[DEFAULT_QUEUE] = named[strays[0]]
    elif strays:  # several names run in default: in the order given
        groups[DEFAULT_QUEUE] = [j for j in jobs
                                 if j.queue == DEFAULT_QUEUE or j.queue not in declared]
    return groups


# Passes of the evening out, one call each; what they leave is shared round by round.
EVEN_OUT_PASSES = 2


def _fill(shares: list[int], given: list[int], open_: list[bool], capacity: int,
          guarantee: Sequence[int], weight: Sequence[float], want: Sequence[float],
          keep: Sequence[int], run: QueueRuns) -> None:
    """Share by weight what the guarantees leave. A queue that cannot use all it is offered
    (its jobs' sizes do not fit it) takes what it uses and the rest is shared again among
    the others; GPUs that are left at the end go to it in the top-up (step 3).

    The first call runs the queues whose offer the level does not decide: on their
    guarantee those it covers, on all their jobs want those the level reaches it for
    (with every covered queue taken to use its bound, so the level only rises after).
    The second runs the rest on the level what those took leaves; what the second's
    queues leave is shared again, round by round."""
    floor = list(run.base)
    n = len(shares)
    offered = water_fill(capacity, guarantee, weight, floor, want, keep, open_)
    capped = [i for i in range(n) if open_[i] and offered[i] != floor[i]
              and offered[i] >= want[i]]
    run.prefetch([(i, guarantee[i]) for i in range(n) if run.covered[i]]
                 + [(i, offered[i]) for i in capped], keep=False)
    for i in range(n):
        if run.covered[i]:
            floor[i] = shares[i] = run.exact_base(i)
    _take(capped, offered, shares, given, open_, floor, guarantee, run)
    for round_ in range(n + 1):  # each round closes a queue, or is the last
        if round_ == 1:
            _even_out(shares, given, open_, floor, capacity, guarantee, weight, want, keep, run)
            if _idle(shares, keep, capacity) <= 0:
                break
        offered = water_fill(capacity, guarantee, weight, floor, want, keep, open_)
        moved = [i for i in range(n) if open_[i] and offered[i] != floor[i]]
        run.prefetch([(i, offered[i]) for i in moved])
        if not _take(moved, offered, shares, given, open_, floor, guarantee, run):
            break
    # a queue left on its guarantee: that run is its allocation
    run.prefetch([(i, g) for i, g in enumerate(guarantee) if given[i] == g and not run.exact[i]])
    for i in range(n):
        if given[i] == guarantee[i]:
            shares[i] = run.exact_base(i)
            if shares[i] < given[i]:  # it cannot use all it was offered, as in `_take`
                floor[i], open_[i] = shares[i], False
    # what a queue left of its guarantee (known only now) is evened out too
    _even_out(shares, given, open_, floor, capacity, guarantee, weight, want, keep, run)


def _even_out(shares: list[int], given: list[int], open_: list[bool], floor: list[int],
              capacity: int, guarantee: Sequence[int], weight: Sequence[float],
              want: Sequence[float], keep: Sequence[int], run: QueueRuns) -> None:
    """What the queues left idle goes to the open queues lowest in borrowed per weight
    first, each up to one of its jobs above the others (rule 4's grain: its largest
    allocation, and a GPU above the level of the lowest other queue that still wants
    more), so that a few runs take it instead of a round of every open queue: in passes,
    each offering the idle GPUs in that order as if every queue took all it is offered,
    its runs in one call (what a queue leaves goes to the next pass)."""
    for _ in range(EVEN_OUT_PASSES):
        planned = _even_out_offers(shares, given, open_, capacity, guarantee, weight, want,
                                   keep, run)
        if not planned:
            return
        run.prefetch(planned)
        moved = False
        for i, offer in planned:
            counts = run(i, offer)
            used = sum(counts.values())
            if used <= shares[i] or used > _even_bound(i, max(counts.values(), default=0),
                                                       shares, given, open_, guarantee,
                                                       weight, want):
                continue
            given[i], shares[i], floor[i] = offer, used, used
            open_[i] = used == offer
            moved = True
        if not moved:
            return


def _wanting(shares: Sequence[int], open_: Sequence[bool], want: Sequence[float]) -> list[int]:
    return [i for i in range(len(shares)) if open_[i] and shares[i] < want[i]]


def _even_bound(i: int, largest: int, shares: Sequence[int], given: Sequence[int],
                open_: Sequence[bool], guarantee: Sequence[int], weight: Sequence[float],
                want: Sequence[float]) -> float:
    """The most queue i may hold in the evening out: its want, and at most its largest job
    allocation above the level of the lowest other queue that took all it was offered and
    wants more (rule 4's grain)."""
    level = min(((shares[q] - guarantee[q] + 1) / weight[q]
                 for q in _wanting(shares, open_, want) if q != i and shares[q] == given[q]),
                default=math.inf)
    if level == math.inf:
        return want[i]
    return min(want[i], guarantee[i] + largest + math.floor(weight[i] * level + 1e-9))


def _even_out_offers(shares: Sequence[int], given: Sequence[int], open_: Sequence[bool],
                     capacity: int, guarantee: Sequence[int], weight: Sequence[float],
                     want: Sequence[float], keep: Sequence[int], run: QueueRuns
                     ) -> list[tuple[int, int]]:
    """(queue, GPUs) offers of the idle GPUs, lowest borrowed per weight first, each queue
    up to its `_even_bound` at its largest allocation where it was last given GPUs."""
    left = _idle(shares, keep, capacity)
    wanting = _wanting(shares, open_, want)
    if left <= 0 or not wanting:
        return []
    planned = []
    for i in sorted(wanting, key=lambda i: ((shares[i] - guarantee[i]) / weight[i], i)):
        top = _even_bound(i, max(run(i, given[i]).values(), default=0), shares, given,
                          open_, guarantee, weight, want)
        r = int(min(left + max(0, keep[i] - shares[i]), top - shares[i]))
        if r > 0:
            planned.append((i, shares[i] + r))
            left -= r
        if left <= 0:
            break
    return planned


def _idle(shares: Sequence[int], keep: Sequence[int], capacity: int) -> int:
    """The GPUs no queue takes nor keeps for itself."""
    return capacity - sum(max(s, k) for s, k in zip(shares, keep, strict=True))


def _take(moved: Sequence[int], offered: Sequence[int], shares: list[int], given: list[int],
          open_: list[bool], floor: list[int], guarantee: Sequence[int],
          run: QueueRuns) -> bool:
    """Queues `moved` on their offers: each takes what its algorithm uses there, and one
    that uses less than it was offered closes. Whether one closed."""
    base = run.base
    # the guarantee runs the rule below asks for, together
    run.prefetch([(i, guarantee[i]) for i in moved
                  if not run.exact[i] and run.used(i, offered[i]) < base[i]])
    changed = False
    for i in moved:
        used = run.used(i, offered[i])
        if used < base[i] and used < run.exact_base(i):
            # more GPUs, yet less taken: it keeps what its guarantee got
            floor[i] = shares[i] = base[i]
            open_[i], changed = False, True
            continue
        given[i], shares[i] = offered[i], used
        floor[i] = used
        if used < offered[i]:  # it cannot use them all: the rest is shared again
            open_[i], changed = False, True
    return changed


def _covered(guarantee: list[int], weight: list[float], capacity: int) -> list[int]:
    """The guarantees, or where together they exceed the capacity (nodes lost), each cut
    by weight so that they fit."""
    if sum(guarantee) <= capacity:
        return guarantee
    n = len(guarantee)
    return water_fill(capacity, [0] * n, weight, [0] * n, guarantee, [0] * n, [True] * n)


def _takes_from_running(jobs: Sequence[Job], counts: Mapping[str, int]) -> bool:
    return any(counts.get(j.name, 0) < min(j.current_workers, j.max_workers) for j in jobs
               if j.current_workers > 0)


def _top_up(shares: list[int], capacity: int, guarantee: Sequence[int],
            weight: Sequence[float], ceiling: Sequence[float], keep: Sequence[int],
            grow: Callable[[int, int], int]) -> None:
    """GPUs still idle go to the queues that can use them, lowest borrowed per weight
    first: a job whose min did not fit in its queue's share may fit in what others left."""
    idle = _idle(shares, keep, capacity)
    order = sorted(range(len(shares)),
                   key=lambda i: ((shares[i] - guarantee[i]) / weight[i], i))
    for i in order:
        room = int(min(idle + max(0, keep[i] - shares[i]), ceiling[i] - shares[i]))
        if room <= 0:
            continue
        before = max(shares[i], keep[i])
        grow(i, shares[i] + room)
        idle -= max(shares[i], keep[i]) - before
