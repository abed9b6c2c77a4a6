"""Queues through decide(): reclaim by shrinking, the reasons in the queues' terms."""

from __future__ import annotations

import pytest
from builders import make_cluster, make_job

from voda.core.allocation import registry
from voda.core.allocation.counts import sized_to
from voda.core.allocation.reasons import ReasonCode
from voda.core.model import Job
from voda.core.placement import first_fit
from voda.core.plan import decide
from voda.core.quotas import Queue, QueueSet, QuotaDecision, with_queues

TEAMS = QueueSet((Queue("team-a", {"default": 8}), Queue("team-b", {"default": 8},
                                                         borrowing_limit={"default": 4})))


def running(name: str, queue: str, lo: int, hi: int, held: int, submit: float = 0.0) -> Job:
    return make_job(name).workers(lo, hi).submitted_at(submit).running(held).in_queue(
        queue).obj()


def waiting(name: str, queue: str, lo: int, hi: int, submit: float = 0.0) -> Job:
    return make_job(name).workers(lo, hi).submitted_at(submit).in_queue(queue).obj()


@pytest.mark.parametrize("name", ["ElasticFIFO", "Voda", "Tiresias"])
def test_a_returning_owner_gets_its_guarantee_back_from_a_borrower_that_shrinks(
        name: str) -> None:
    cluster = make_cluster().nodes(4, gpus=4).obj()
    borrower = running("b1", "team-b", 2, 12, 12)
    previous = {"b1": (("node-0", 4), ("node-1", 4), ("node-2", 4))}
    owner = waiting("a1", "team-a", 8, 8, submit=5.0)
    algorithm = with_queues(registry.create(name), TEAMS)
    plan = decide([borrower, owner], cluster, previous, algorithm, first_fit)
    assert plan.allocation["a1"] == 8
    assert plan.allocation["b1"] >= 2, "the borrower shrank instead of being preempted"
    reason = plan.reasons["b1"]
    assert reason.code is ReasonCode.RECLAIMED
    assert "team-a's guarantee" in reason.message


def test_a_queue_at_its_borrowing_limit_says_so() -> None:
    cluster = make_cluster().nodes(4, gpus=4).obj()
    jobs = [waiting(f"b{i}", "team-b", 4, 4, submit=i) for i in range(4)]
    algorithm = with_queues(registry.create("ElasticFIFO"), TEAMS)
    plan = decide(jobs, cluster, {}, algorithm, first_fit)
    assert sum(plan.allocation.values()) == 12, "guarantee 8 + borrowing limit 4"
    reason = plan.reasons["b3"]
    assert reason.code is ReasonCode.BORROWING_LIMIT
    assert reason.message.startswith("Waiting: team-b is at its borrowing limit")


def test_the_layer_sizes_the_inner_algorithm_to_the_cluster_nodes() -> None:
    algorithm = with_queues(registry.create("Voda"), TEAMS)
    assert algorithm.gpus_per_node == registry.create("Voda").gpus_per_node
    sized = sized_to(algorithm, make_cluster().nodes(2, gpus=8).obj())
    assert sized.inner.gpus_per_node == 8


def test_a_queue_cannot_be_declared_twice_or_with_a_negative_guarantee() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        QueueSet((Queue("a"), Queue("a")))
    with pytest.raises(ValueError, match=r"guarantee\.default"):
        QueueSet((Queue("a", {"default": -1}),))
    with pytest.raises(ValueError, match="weight"):
        QueueSet((Queue("a", weight=0),))


def test_a_queue_whose_jobs_are_all_at_their_max_does_not_starve_another_of_its_share() -> None:
    """Two open queues of equal weight on 4 GPUs: q1's one job takes 1 of the 2 it is
    offered. Offering it more again (its jobs cannot take it) used to undo both queues'
    shares each round until the rounds ran out, and q0 took all four."""
    from voda.core.allocation import registry
    from voda.core.model import Job
    from voda.core.quotas import Queue, QueueSet
    from voda.core.quotas.share import share

    jobs = [Job(name=f"j{i}", min_workers=1, max_workers=1, submit_time=0.0, epochs=1,
                queue="q0") for i in range(4)]
    jobs.append(Job(name="j4", min_workers=1, max_workers=1, submit_time=0.0, epochs=1,
                    queue="q1"))
    queues = QueueSet((Queue("q0", {"default": 0}), Queue("q1", {"default": 0})))
    decision = share(registry.create("ElasticFIFO", {}), jobs, 4, queues, "default")
    assert decision.allocation["j4"] == 1
    assert sum(decision.allocation.values()) == 4


def test_an_observer_gets_within_guarantee_exact_unless_it_says_it_does_not_read_it() -> None:
    # FIFO runs a job at its preferred size: on a guarantee of 4 it takes 3 (a 3 then a 2
    # that does not fit), below the bound min(guarantee, demand) = 4
    jobs = [Job(name="a", min_workers=3, max_workers=3, submit_time=0.0, queue="t"),
            Job(name="b", min_workers=2, max_workers=6, submit_time=1.0, queue="t")]
    queues = QueueSet((Queue("t", {"default": 4}),))
    seen: list[int] = []

    def reading(gpu_type: str, decision: QuotaDecision) -> None:
        seen.append(decision.queues["t"].within_guarantee)

    def not_reading(gpu_type: str, decision: QuotaDecision) -> None:
        seen.append(decision.queues["t"].within_guarantee)

    not_reading.reads_within_guarantee = False  # type: ignore[attr-defined]
    for observer in (reading, not_reading):
        assert with_queues(registry.create("FIFO"), queues, observer)(jobs, 16) == {
            "a": 3, "b": 2}
    assert seen == [3, 4]
