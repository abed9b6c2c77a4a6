"""Many allocation problems at once (`allocate_many`, what the quota layer runs once per
round over its queues, docs/design/013-queues.md "Cost") give each problem what a call
on it alone gives, and the layer still refuses a custom algorithm's broken result."""

from __future__ import annotations

import dataclasses
import random
import sys
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_allocation_properties import jobs_strategy
from test_quota_properties import scenario

from voda.core.allocation.afs import AFSL, afs_l, afs_l_many
from voda.core.allocation.base import (
    AllocationRejected,
    allocate_many_by_priority,
    by_submit,
    checked_allocate,
    checked_allocate_many,
)
from voda.core.allocation.ffdl import FfDLOptimizer
from voda.core.allocation.fifo import FIFO
from voda.core.allocation.optimus import Optimus
from voda.core.allocation.pollux import Pollux
from voda.core.allocation.registry import create, is_builtin
from voda.core.allocation.srjf import SRJF, ElasticSRJF
from voda.core.allocation.tiresias import ElasticTiresias
from voda.core.allocation.voda import Voda
from voda.core.model import Job
from voda.core.oracle import StepOracle
from voda.core.quotas import Queue, QueueSet, with_queues
from voda.core.quotas.runs import QueueRuns
from voda.core.quotas.share import share

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
from allocate import make_jobs, team_queues

MANY = [Voda(), Voda(gpus_per_node=8, tail_floor=0.5, aging=0.0), Pollux(),
        Pollux(gpus_per_node=2, fairness=0.0, aligned=False), SRJF(), SRJF(order="wall_time"),
        ElasticSRJF(), ElasticSRJF(order="wall_time", growth="in_order"), ElasticTiresias(),
        ElasticTiresias(queue_order="queue_entry", compaction_threshold=0,
                        queue_thresholds=(5.0, 50.0)), Optimus(), Optimus(oracle=False),
        FfDLOptimizer(), FfDLOptimizer(max_jobs=3), AFSL()]


def split(jobs: list[Job], parts: int, seed: int) -> list[list[Job]]:
    rng = random.Random(seed)
    out: list[list[Job]] = [[] for _ in range(parts)]
    for job in jobs:
        out[rng.randrange(parts)].append(job)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=jobs_strategy(max_jobs=16), parts=st.integers(1, 5), seed=st.integers(0, 99),
       capacities=st.lists(st.integers(0, 40), min_size=5, max_size=5))
def test_many_problems_at_once_give_what_each_gives_alone(
        jobs: list[Job], parts: int, seed: int, capacities: list[int]) -> None:
    problems = list(zip(split(jobs, parts, seed), capacities, strict=False))
    for algorithm in MANY:
        alone = [algorithm(members, capacity) for members, capacity in problems]
        together = algorithm.allocate_many(problems)
        # the same counts, in the same order
        assert [list(a.items()) for a in together] == [list(a.items()) for a in alone]


# Jobs split over queues, run at a few rounds of offers (as the quota layer's water fill)
queues_at_offers = given(
    jobs=jobs_strategy(max_jobs=16), parts=st.integers(1, 4), seed=st.integers(0, 99),
    offers=st.lists(st.lists(st.integers(0, 40), min_size=4, max_size=4), min_size=2,
                    max_size=4))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@queues_at_offers
def test_runs_kept_for_other_offers_give_what_each_gives_alone(
        jobs: list[Job], parts: int, seed: int, offers: list[list[int]]) -> None:
    # One store over a decision's calls: the same queues at other offers, as the quota
    # layer's rounds make them, each call the counts of a fresh one (Voda keeps curves,
    # weights, utilities and fold tables; Pollux its utilities).
    queues = split(jobs, parts, seed)
    for algorithm in (Voda(), Voda(gpus_per_node=8, tail_floor=0.5, aging=0.0), Pollux(),
                      Pollux(gpus_per_node=2, fairness=0.0, aligned=False)):
        memo = algorithm.memo()
        for capacities in offers:
            problems = list(zip(queues, capacities, strict=False))
            kept = algorithm.allocate_many(problems, memo=memo)
            assert [list(a.items()) for a in kept] == [
                list(algorithm(m, c).items()) for m, c in problems]


def test_the_bench_queues_at_rising_offers_read_kept_runs() -> None:
    # The bench's jobs split over queues, each run at rising offers past every job's max
    # with one store: the same counts as fresh runs, and most queues' later runs find
    # their utilities kept (a fold table for fewer than half the job-runs).
    algorithm = Voda()
    queues = split(make_jobs(300, 3), 6, 3)
    memo = algorithm.memo()
    offers = (34, 39, 40, 41)
    for offer in offers:
        problems = [(members, offer) for members in queues]
        assert algorithm.allocate_many(problems, memo=memo) == [
            algorithm(m, c) for m, c in problems]
    assert len(memo.rows) < len(offers) * len(queues)
    assert len(memo.tables._tables) < len(offers) * 300 / 2


def test_pollux_runs_at_rising_offers_read_kept_utilities() -> None:
    # Pollux's jobs at rising offers with one store, offers below and past the jobs' max
    # (caps and fair shares move with the offer): the same counts as fresh runs, and a
    # job's utilities worked out again only at a new fair share or cap.
    algorithm = Pollux()
    queues = split(make_jobs(300, 3), 6, 3)
    memo = algorithm.memo()
    offers = (9, 12, 34, 39, 40, 41, 200)
    for offer in offers:
        problems = [(members, offer) for members in queues]
        assert algorithm.allocate_many(problems, memo=memo) == [
            algorithm(m, c) for m, c in problems]
    assert len(memo.rows) < len(offers) * 300 / 2


@pytest.mark.parametrize("name", ["Voda", "Pollux", "SRJF", "ElasticSRJF", "ElasticTiresias",
                                  "Optimus", "FfDLOptimizer", "AFS-L"])
def test_the_bench_jobs_split_over_queues_get_the_same_counts(name: str) -> None:
    algorithm = create(name)
    jobs = make_jobs(300, 3)
    problems = [(members, capacity) for members, capacity in
                zip(split(jobs, 12, 3), [0, 1, 7, 16, 40, 64, 100, 3, 12, 31, 200, 5],
                    strict=True)]
    assert algorithm.allocate_many(problems) == [algorithm(m, c) for m, c in problems]
    assert checked_allocate_many(algorithm, problems) == [
        checked_allocate(algorithm, m, c) for m, c in problems]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=jobs_strategy(max_jobs=40), parts=st.integers(1, 5), seed=st.integers(0, 99),
       capacities=st.lists(st.integers(0, 24), min_size=5, max_size=5))
def test_afs_l_classes_at_once_give_what_each_gives_alone(
        jobs: list[Job], parts: int, seed: int, capacities: list[int]) -> None:
    # Each class on its own (`afs_l`) is the reference for the classes together: their
    # tournaments on tables and bands worked out for all of them at once.
    classes = [(by_submit(members), capacity) for members, capacity in
               zip(split(jobs, parts, seed), capacities, strict=False)]
    assert afs_l_many(classes) == [afs_l(ordered, capacity) for ordered, capacity in classes]


@pytest.mark.parametrize("seed", [1, 2, 5])
def test_afs_l_classes_at_once_hold_each_tournament_as_alone(seed: int) -> None:
    # Classes of about 10 to 150 jobs (the compiled rounds from 64 where numba is
    # installed) on capacities that leave most of them short of their jobs' max, so that
    # each holds a tournament on tables and bands worked out for all of them together.
    jobs = make_jobs(700, seed)
    members = split(jobs, 9, seed)
    classes = [(by_submit(m), c) for m, c in zip(
        [members[0][:10], *members[1:]], [3, 20, 50, 90, 130, 7, 400, 1, 60], strict=True)]
    assert afs_l_many(classes) == [afs_l(ordered, c) for ordered, c in classes]
    rng = random.Random(seed)
    for _ in range(5):  # a few classes at a time, at random capacities
        picked = [(ordered, rng.randrange(0, 200)) for ordered, _ in rng.sample(classes, 3)]
        assert afs_l_many(picked) == [afs_l(ordered, c) for ordered, c in picked]


def test_optimus_with_step_oracles_on_some_jobs_gets_the_same_counts() -> None:
    """Jobs with and without an oracle in the same problems: the oracle's step times and
    the epoch times of the others, in one batch, give what each problem gets alone."""
    jobs = [dataclasses.replace(job, oracle=StepOracle(
        tuple(float(v) for v in [4, 3, 3, 2.5, 2.6, 2, 2, 1.9][i % 4:]),
        tuple(float(10 * (k + 1)) for k in range(job.epochs + 1))))
        if i % 3 else job for i, job in enumerate(make_jobs(200, 4))]
    problems = list(zip(split(jobs, 8, 4), [2, 9, 30, 64, 0, 120, 17, 45], strict=True))
    for algorithm in (Optimus(), Optimus(oracle=False)):
        alone = [algorithm(members, capacity) for members, capacity in problems]
        assert [list(a.items()) for a in algorithm.allocate_many(problems)] == [
            list(a.items()) for a in alone]
        assert any(sum(a.values()) for a in alone)


@dataclasses.dataclass(frozen=True)
class Greedy:
    """A broken custom algorithm: every job at its max, whatever the capacity."""

    name: str = "Greedy"

    def __call__(self, jobs, capacity):  # type: ignore[no-untyped-def]
        return {j.name: j.max_workers for j in jobs}


class SubFIFO(FIFO):
    """A custom algorithm built on a built-in one: checked as any custom one."""


def test_only_the_built_in_classes_are_taken_as_keeping_the_contract() -> None:
    assert is_builtin(create("Voda")) and is_builtin(FIFO(name="renamed"))
    assert not is_builtin(SubFIFO()) and not is_builtin(Greedy())


def test_a_custom_algorithms_broken_result_is_refused_inside_the_quota_layer() -> None:
    jobs = [dataclasses.replace(j, queue="team-a") for j in make_jobs(20, 1)]
    queues = QueueSet((Queue("team-a", {"default": 4}, {"default": 0}),))
    with pytest.raises(AllocationRejected, match="capacity"):
        with_queues(Greedy(), queues)(jobs, 64)


def test_a_result_is_refused_for_what_the_one_pass_check_finds() -> None:
    jobs = make_jobs(5, 2)
    names = [j.name for j in jobs]

    def gives(result):  # type: ignore[no-untyped-def]
        return lambda _jobs, _capacity: result

    for result, says in (({names[0]: True}, "not an integer"),
                         ({"stranger": 0}, "not among the jobs given"),
                         ({names[0]: 10_000}, "neither 0 nor within"),
                         ({n: jobs[i].min_workers for i, n in enumerate(names)}, "capacity")):
        with pytest.raises(AllocationRejected, match=says):
            checked_allocate(gives(result), jobs, 1)
    assert checked_allocate(gives({names[1]: 0}), jobs, 1) == dict.fromkeys(names, 0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@queues_at_offers
def test_priority_classes_kept_over_calls_are_those_worked_out_each_call(
        jobs: list[Job], parts: int, seed: int, offers: list[list[int]]) -> None:
    # The same lists of jobs at other offers, with one store for their priority classes:
    # each call hands the algorithm the classes a call without the store does.
    rng = random.Random(seed)
    jobs = [dataclasses.replace(j, priority=rng.choice([0, 0, 1, 5])) for j in jobs]
    queues = split(jobs, parts, seed)
    kept: dict = {}
    for capacities in offers:
        problems = list(zip(queues, capacities, strict=False))
        handed: list[list] = [[], []]
        for store, seen in ((kept, handed[0]), (None, handed[1])):
            def record(classes, seen=seen):
                seen.append([([j.name for j in members], gpus) for members, gpus in classes])
                return [dict.fromkeys((j.name for j in members), 0) for members, _ in classes]
            allocate_many_by_priority(problems, record, store)
        assert handed[0] == handed[1]


def _decided(algorithm: object, jobs: list[Job], capacity: int, queues: QueueSet,
             exact: bool) -> tuple:
    decision = share(algorithm, jobs, capacity, queues, "default", exact)  # type: ignore[arg-type]
    return list(decision.allocation.items()), decision.queues, decision.reclaimed


def _stored_guarantee_runs(self: QueueRuns, wanted: object, keep: bool = True) -> None:
    """The reference: every run of the layer with the algorithm's store."""
    return _PREFETCH(self, wanted, True)


_PREFETCH = QueueRuns.prefetch


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=scenario(), exact=st.booleans())
def test_guarantee_runs_without_the_store_decide_as_with_it(
        case: tuple[QueueSet, list[Job], int], exact: bool) -> None:
    # The runs of the queues whose guarantee covers their demand keep nothing in the
    # store (they are not offered more): the same decisions as with every run stored.
    queues, jobs, capacity = case
    for algorithm in MANY[:4]:
        fast = _decided(algorithm, jobs, capacity, queues, exact)
        with mock.patch.object(QueueRuns, "prefetch", _stored_guarantee_runs):
            assert _decided(algorithm, jobs, capacity, queues, exact) == fast


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_bench_queues_decide_as_with_every_run_stored(seed: int) -> None:
    jobs, queues = team_queues(make_jobs(400, seed), seed)
    for algorithm in (Voda(), Pollux()):
        fast = _decided(algorithm, jobs, 1_600, queues, False)
        with mock.patch.object(QueueRuns, "prefetch", _stored_guarantee_runs):
            assert _decided(algorithm, jobs, 1_600, queues, False) == fast
