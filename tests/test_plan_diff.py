"""decide() and diff(): the pipeline every backend uses."""

import pytest

from voda.core.allocation.fifo import FIFO, ElasticFIFO
from voda.core.model import ActionKind, Cluster, InvalidTransition, Job, JobStatus, Node, transition
from voda.core.placement.first_fit import first_fit
from voda.core.plan import classify, decide, diff, moved_workers


@pytest.mark.parametrize(
    ("old", "new", "kind"),
    [
        ((("n0", 2),), (), ActionKind.HALT),
        ((), (("n0", 2),), ActionKind.START),
        ((("n0", 2), ("n1", 2)), (("n0", 2),), ActionKind.SCALE_IN),
        ((("n0", 2),), (("n0", 4),), ActionKind.SCALE_OUT),
        ((("n0", 2),), (("n1", 2),), ActionKind.MIGRATE),
        ((("n0", 2),), (("n0", 2),), None),
        ((), (), None),
    ],
    ids=[
        "a job taken to zero is halted",
        "a job given GPUs from zero is started",
        "fewer workers is a scale-in",
        "more workers is a scale-out",
        "same count on other nodes is a migration",
        "an unchanged placement needs no action",
        "nothing to nothing is nothing",
    ],
)
def test_classify(old, new, kind) -> None:
    assert classify(old, new) == kind


def test_diff_orders_frees_before_takes() -> None:
    old = {"z": (("n0", 2),), "y": (("n1", 4),), "m": (("n2", 1),)}
    new = {"a": (("n0", 2),), "y": (("n1", 2),), "m": (("n3", 1),), "b": (("n1", 1),)}
    kinds = [(a.kind, a.job) for a in diff(old, new)]
    assert kinds == [
        (ActionKind.HALT, "z"),
        (ActionKind.SCALE_IN, "y"),
        (ActionKind.MIGRATE, "m"),
        (ActionKind.START, "a"),
        (ActionKind.START, "b"),
    ]


def test_moved_workers_counts_moves_not_shrinks() -> None:
    assert moved_workers((("n0", 4),), (("n0", 2),)) == 0
    assert moved_workers((("n0", 2),), (("n1", 2),)) == 2
    assert moved_workers((("n0", 2), ("n1", 2)), (("n0", 3),)) == 1
    assert moved_workers((), (("n0", 2),)) == 0


def test_decide_runs_one_algorithm_per_gpu_type() -> None:
    cluster = Cluster((Node("a0", 4, "A100"), Node("v0", 2, "V100")))
    jobs = [
        Job("x", 1, 8, submit_time=0, gpu_type="A100"),
        Job("y", 1, 8, submit_time=1, gpu_type="V100"),
        Job("z", 2, 2, submit_time=2, gpu_type="V100"),
    ]
    plan = decide(jobs, cluster, {}, {"A100": ElasticFIFO(), "V100": FIFO()}, first_fit)
    assert plan.allocation == {"x": 4, "y": 1, "z": 0}
    assert plan.placement == {"x": (("a0", 4),), "y": (("v0", 1),)}


def test_decide_keeps_unchanged_jobs_in_place() -> None:
    cluster = Cluster.uniform(2, 4)
    jobs = [Job("a", 2, 2, submit_time=0), Job("b", 2, 2, submit_time=1)]
    previous = {"a": (("node-1", 2),), "b": (("node-0", 2),)}
    plan = decide(jobs, cluster, previous, ElasticFIFO(), first_fit)
    assert plan.placement == previous
    assert plan.actions == ()
    assert plan.migrated_workers == 0


def test_status_transitions_follow_the_table() -> None:
    assert transition(JobStatus.WAITING, JobStatus.RUNNING) is JobStatus.RUNNING
    with pytest.raises(InvalidTransition, match="Completed to Running"):
        transition(JobStatus.COMPLETED, JobStatus.RUNNING)
