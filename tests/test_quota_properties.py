"""The queue rules of docs/design/013-queues.md, on generated queues, jobs and clusters,
for every built-in allocation algorithm."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_allocation_properties import ALL, WORK_CONSERVING, check_work_conserving, job_strategy

from voda.core.allocation import registry
from voda.core.allocation.base import allocation_problems, by_submit
from voda.core.model import Cluster, Job
from voda.core.placement import first_fit
from voda.core.plan import decide
from voda.core.quotas import Queue, QueueSet, with_queues
from voda.core.quotas.share import QuotaDecision, share

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TYPE = "default"


@st.composite
def scenario(draw: st.DrawFn) -> tuple[QueueSet, list[Job], int]:
    """Queues whose guarantees fit the capacity, and jobs in them (some in a queue no one
    declared, which is `default`)."""
    capacity = draw(st.integers(0, 48))
    count = draw(st.integers(1, 4))
    left = capacity
    queues = []
    for i in range(count):
        g = draw(st.integers(0, left))
        left -= g
        borrow = draw(st.none() | st.integers(0, 16))
        lend = draw(st.none() | st.integers(0, 16))
        queues.append(Queue(
            f"q{i}", {TYPE: g}, None if borrow is None else {TYPE: borrow},
            None if lend is None else {TYPE: lend}, draw(st.sampled_from([1.0, 1.0, 2.0, 3.0]))))
    n = draw(st.integers(0, 12))
    names = [q.name for q in queues] + ["elsewhere"]
    jobs = [dataclasses.replace(draw(job_strategy(f"j{i}")), queue=draw(st.sampled_from(names)))
            for i in range(n)]
    return QueueSet(tuple(queues)), jobs, capacity


def members(decision: QuotaDecision, jobs: list[Job], queue: str) -> list[Job]:
    return [j for j in jobs if decision.job_queue[j.name] == queue]


def used(decision: QuotaDecision, jobs: list[Job]) -> int:
    return sum(decision.allocation[j.name] for j in jobs)


@pytest.mark.parametrize("name", ALL)
@SETTINGS
@given(case=scenario())
def test_the_queue_rules_hold_for_every_algorithm(
        name: str, case: tuple[QueueSet, list[Job], int]) -> None:
    queues, jobs, capacity = case
    inner = registry.create(name)
    decision = share(inner, jobs, capacity, queues, TYPE)
    allocation = decision.allocation
    # the allocation contract, deterministically
    assert allocation_problems(jobs, capacity, allocation) == []
    assert set(allocation) == {j.name for j in jobs}
    assert share(inner, list(reversed(jobs)), capacity, queues, TYPE).allocation == allocation
    lendable_idle = capacity - sum(q.guaranteed(TYPE) for q in queues)
    borrowed = 0
    for queue, outcome in decision.queues.items():
        mine = members(decision, jobs, queue)
        held = used(decision, mine)
        assert held == outcome.used
        spec = queues.get(queue)
        g = spec.guaranteed(TYPE)
        # 1. the guarantee comes back: at least what its algorithm takes on the guarantee
        assert held >= sum(inner(mine, g).values()) if mine else held == 0, \
            f"{queue} holds {held}, less than its algorithm takes on its guarantee of {g}"
        if name in WORK_CONSERVING and held <= g and not outcome.reclaiming:
            check_work_conserving(mine, g, {j.name: allocation[j.name] for j in mine})
        # 2. never beyond guarantee + borrowing limit
        assert held <= spec.ceiling(TYPE), f"{queue} holds {held} > {spec.ceiling(TYPE)}"
        borrowed += max(0, held - g)
        lend = spec.may_lend(TYPE)
        idle = max(0, g - held)
        lendable_idle += idle if lend is None else min(idle, lend)
        # 6. within a queue, the algorithm decides as today on the queue's share
        if not outcome.reclaiming:
            assert {j.name: allocation[j.name] for j in mine} == dict(
                inner(mine, outcome.share)) if mine else True
    # 2. nobody lends more than its lending limit
    assert borrowed <= lendable_idle, f"{borrowed} borrowed, {lendable_idle} could be lent"
    check_no_idle_while_a_queue_may_borrow(name, queues, jobs, capacity, decision)
    check_weighted_shares(inner, queues, jobs, decision)
    check_reclaim_order(inner, queues, jobs, decision)



def _job(name: str, queue: str, low: int, high: int, running: int = 0,
         times: Mapping[int, float] | None = None) -> Job:
    return Job(name, low, high, queue=queue, current_workers=running,
               epoch_time_by_workers=dict(times or {}))


def _queues(*specs: tuple[int, float]) -> QueueSet:
    return QueueSet(tuple(Queue(f"q{i}", {TYPE: g}, None, None, w)
                          for i, (g, w) in enumerate(specs)))


@pytest.mark.parametrize(("queues", "jobs", "capacity"), [
    # More GPUs admit q0's 6-GPU job in place of its 1-GPU one (FfDLOptimizer admits in
    # submit order): offered 6 in the top-up, q0 takes them all (it was left at 1).
    (_queues((0, 1.0), (0, 1.0), (0, 2.0)),
     [_job("j0", "q1", 1, 4), _job("j1", "q2", 2, 3, times={1: 10.0, 2: 10.0}),
      _job("j2", "q0", 6, 6), _job("j3", "q0", 1, 1),
      *[_job(f"j{i}", "q0", 6, 6) for i in range(4, 8)], _job("j8", "q2", 1, 5)], 17),
    # q2 gives borrowed GPUs back by preempting its rigid 5-GPU job, which frees more than
    # the cut: its 1-GPU job on the guarantee grows into them instead of leaving them idle.
    (_queues((12, 1.0), (0, 1.0), (1, 1.0)),
     [_job("j0", "q0", 1, 4), _job("j1", "q2", 1, 4), _job("j2", "q2", 1, 2, running=2),
      _job("j3", "q0", 1, 1), _job("j4", "q0", 1, 1), _job("j5", "q0", 1, 2),
      _job("j6", "q0", 1, 6), _job("j7", "q2", 5, 5, running=5),
      _job("j8", "q1", 1, 7, running=6), _job("j9", "q0", 1, 1), _job("j10", "q0", 1, 1),
      _job("j11", "q0", 1, 2)], 29),
])
def test_the_rules_hold_where_ffdl_left_gpus_idle(queues: QueueSet, jobs: list[Job],
                                                  capacity: int) -> None:
    inner = test_the_queue_rules_hold_for_every_algorithm.hypothesis.inner_test
    inner("FfDLOptimizer", (queues, jobs, capacity))


def test_what_a_guarantee_leaves_is_shared_by_weight() -> None:
    # q0's rigid jobs take 8 of its guarantee of 12, known only once it is run there; the
    # 4 left went whole to q1 (first of the queues at level 0), 3 GPUs more per weight
    # than q2 (weight 3) with its 1-GPU job waiting. Evened out, q2 takes its GPU first.
    queues = QueueSet((Queue("q0", {TYPE: 12}), Queue("q1", {TYPE: 0}),
                       Queue("q2", {TYPE: 0}, None, None, 3.0), Queue("q3", {TYPE: 0})))
    jobs = [_job("j0", "q0", 1, 1), _job("j1", "q0", 5, 5), _job("j2", "q0", 7, 7),
            _job("j3", "q1", 1, 1), _job("j4", "q2", 1, 1), _job("j5", "q0", 2, 2),
            _job("j6", "q1", 3, 3)]
    inner = test_the_queue_rules_hold_for_every_algorithm.hypothesis.inner_test
    inner("FIFO", (queues, jobs, 12))


def test_a_guarantee_its_jobs_cannot_use_is_shared_by_weight() -> None:
    # q0's 5-GPU job does not fit its guarantee of 4: left on it, q0 takes nothing, and was
    # still offered every idle GPU in the evening out, which it left, so the top-up gave
    # them whole to q2 (the lowest per weight): 4 GPUs to q2 (weight 1) and 1 to q1
    # (weight 2), whose job wanted 2. Closed like any queue that leaves part of its offer,
    # q1 gets 2 and q2 3.
    queues = QueueSet((Queue("q0", {TYPE: 4}), Queue("q1", {TYPE: 0}, None, None, 2.0),
                       Queue("q2", {TYPE: 0}), Queue("q3", {TYPE: 0})))
    jobs = [_job("j0", "q1", 1, 2), _job("j1", "q0", 5, 5), _job("j2", "q2", 1, 2),
            _job("j3", "q2", 1, 2)]
    decision = share(registry.create("ElasticFIFO"), jobs, 5, queues, TYPE)
    assert decision.allocation == {"j0": 2, "j1": 0, "j2": 2, "j3": 1}
    inner = test_the_queue_rules_hold_for_every_algorithm.hypothesis.inner_test
    for name in ALL:
        inner(name, (queues, jobs, 5))


def keep(queue: Queue) -> int:
    lend = queue.may_lend(TYPE)
    g = queue.guaranteed(TYPE)
    return 0 if lend is None else max(0, g - lend)


def check_no_idle_while_a_queue_may_borrow(name: str, queues: QueueSet, jobs: list[Job],
                                           capacity: int, decision: QuotaDecision) -> None:
    """3. No GPU idle (that is not kept for its owner) while a queue that may still borrow
    has a job whose min fits in it (a work-conserving algorithm's jobs; any algorithm's,
    where it would take them)."""
    taken = {q: max(o.used, keep(queues.get(q))) for q, o in decision.queues.items()}
    idle = capacity - sum(taken.values())
    for queue, outcome in decision.queues.items():
        spec = queues.get(queue)
        room = min(idle + max(0, keep(spec) - outcome.used), spec.ceiling(TYPE) - outcome.used)
        if room <= 0:
            continue
        mine = members(decision, jobs, queue)
        if name in WORK_CONSERVING:
            waiting = [j for j in mine if decision.allocation[j.name] == 0]
            assert all(j.min_workers > room for j in waiting), \
                f"{room} GPUs idle while {queue} may borrow and a job's min fits"
        elif mine:  # its own algorithm, given the idle GPUs too, takes none of them
            more = sum(registry.create(name)(mine, outcome.used + int(room)).values())
            assert more <= outcome.used or decision.queues[queue].share >= outcome.used + room


def check_weighted_shares(inner: object, queues: QueueSet, jobs: list[Job],
                          decision: QuotaDecision) -> None:
    """4. Beyond guarantees, a queue p that borrows more per weight than another q, by more
    than one job of each (p's largest allocation, q's largest min plus one GPU of rounding),
    borrows what q cannot use: q's algorithm, given that much more, takes no more."""
    for p, op in decision.queues.items():
        wp = queues.get(p).weight
        for q, oq in decision.queues.items():
            if p == q or op.used <= op.guarantee:
                continue
            wq = queues.get(q).weight
            mine = [j for j in members(decision, jobs, q)
                    if decision.allocation[j.name] < j.max_workers]
            if not mine or oq.used >= oq.ceiling or oq.reclaiming:
                continue
            grain = max(j.min_workers for j in mine) + 1
            level_q = (oq.used - oq.guarantee + grain) / wq
            grain_p = max(decision.allocation[j.name] for j in members(decision, jobs, p))
            if (op.used - op.guarantee - grain_p) / wp > level_q:
                # q was offered at least as much as it holds plus a job, and took no more
                assert oq.share > oq.used or oq.used < oq.within_guarantee or \
                    sum(inner(members(decision, jobs, q), oq.used + grain).values()) \
                    <= oq.used, f"{p} borrows {op.borrowed} (weight {wp}) while {q} " \
                                f"borrows {oq.borrowed} (weight {wq}) and wants more"


def check_reclaim_order(inner: Callable[..., Mapping[str, int]], queues: QueueSet,
                        jobs: list[Job], decision: QuotaDecision) -> None:
    """5. Reclaiming shrinks first, then preempts borrowed jobs (lowest priority, then most
    recent first), never a job within its queue's guarantee."""
    for queue, outcome in decision.queues.items():
        mine = members(decision, jobs, queue)
        cut = [j for j in mine if j.name in decision.reclaimed]
        if not cut:
            continue
        g = queues.get(queue).guaranteed(TYPE)
        assert outcome.held_before > g, "only a queue that borrowed gives GPUs back"
        own = inner(mine, g)
        assert all(decision.allocation[j.name] >= own[j.name] for j in mine), \
            "took GPUs its algorithm gives a job on the guarantee"
        borrowed = by_submit([j for j in mine if j.current_workers > own[j.name]])
        need = sum(j.current_workers - decision.allocation[j.name] for j in borrowed)
        slack = sum(min(j.current_workers, j.max_workers) - (own[j.name] or j.min_workers)
                    for j in borrowed)
        for victim in (j for j in cut if decision.allocation[j.name] == 0):
            assert slack < need, f"{victim.name} preempted before the borrowed jobs shrank"
            after = [j for j in borrowed[borrowed.index(victim) + 1:] if not own[j.name]]
            assert slack + sum(j.min_workers for j in after) < need, \
                f"{victim.name} preempted though lower or more recent borrowed jobs sufficed"


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=scenario())
def test_with_no_queues_every_decision_is_todays(
        name: str, case: tuple[QueueSet, list[Job], int]) -> None:
    _, jobs, capacity = case
    jobs = [dataclasses.replace(j, queue="default") for j in jobs]
    nodes = max(1, capacity // 4)
    cluster = Cluster.uniform(nodes, 4) if capacity else Cluster()
    inner = registry.create(name)
    placer = first_fit
    today = decide(jobs, cluster, {}, inner, placer, explain_reasons=False)
    assert with_queues(inner, QueueSet()) is inner
    one_open_queue = with_queues(inner, QueueSet((Queue("default"),)))
    queued = decide(jobs, cluster, {}, one_open_queue, placer, explain_reasons=False)
    assert queued.allocation == today.allocation
    assert queued.placement == today.placement


BOUNDED = [n for n in ALL if callable(getattr(registry.create(n), "most_gpus", None))]


def test_the_rigid_size_algorithms_bound_what_they_take() -> None:
    assert {"FIFO", "SRJF", "Tiresias", "ElasticTiresias"} <= set(BOUNDED)


@pytest.mark.parametrize("name", BOUNDED)
@SETTINGS
@given(jobs=st.lists(st.integers(0, 10_000), max_size=12).flatmap(
    lambda ids: st.tuples(*(job_strategy(f"j{i}") for i in range(len(ids))))),
       capacity=st.integers(0, 64))
def test_an_algorithm_never_gives_jobs_more_than_its_most_gpus(
        name: str, jobs: tuple[Job, ...], capacity: int) -> None:
    """The quota layer takes `most_gpus(jobs)` as a queue's demand: what the algorithm gives
    the jobs on any capacity must stay within it."""
    algorithm = registry.create(name)
    assert sum(algorithm(list(jobs), capacity).values()) <= algorithm.most_gpus(list(jobs))
