"""The placement check that works from the last valid placement says what the full check
says, decision after decision: a job's tuple handed back as it was is only trusted for
the same allocation, job and Cluster object, and a broken placement is never let through."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voda.core.model import Cluster, Job, JobPlacement, Node
from voda.core.placement import validated
from voda.core.placement.base import placement_problems, used_per_node
from voda.core.placement.first_fit import first_fit
from voda.core.placement.validated import forget_valid, placement_problems_since_last
from voda.core.plan import PlacementFailed, _decide_type


@pytest.fixture(autouse=True)
def _fresh() -> None:
    forget_valid()


def cluster_of(*gpus: int, gpu_type: str = "v100") -> Cluster:
    return Cluster(tuple(Node(f"n{i}", g, gpu_type) for i, g in enumerate(gpus)))


def jobs_of(*names: str, gpu_type: str = "v100") -> dict[str, Job]:
    return {n: Job(name=n, max_workers=8, gpu_type=gpu_type) for n in names}


def both(allocation: dict, jobs: dict, cluster: Cluster, placement: dict) -> list[str]:
    """The incremental check's answer, after asserting it is the full check's."""
    expected = placement_problems(allocation, jobs, cluster, placement)
    got = placement_problems_since_last(allocation, jobs, cluster, placement)
    assert got == expected
    return got


def test_a_kept_tuple_onto_a_node_another_job_now_fills_is_refused() -> None:
    cluster, jobs = cluster_of(4, 4), jobs_of("a", "b")
    a, b = (("n0", 2),), (("n1", 4),)
    assert both({"a": 2, "b": 4}, jobs, cluster, {"a": a, "b": b}) == []
    # b moves onto n0 beside a, which keeps its very tuple: n0 is over-full.
    problems = both({"a": 2, "b": 4}, jobs, cluster, {"a": a, "b": (("n0", 4),)})
    assert problems == ["node 'n0': 6 GPUs used of 4"]


def test_a_new_job_onto_a_full_node_is_refused() -> None:
    cluster, jobs = cluster_of(4, 4), jobs_of("a", "b")
    a = (("n0", 4),)
    assert both({"a": 4}, jobs, cluster, {"a": a}) == []
    assert both({"a": 4, "b": 1}, jobs, cluster, {"a": a, "b": (("n0", 1),)}) == [
        "node 'n0': 5 GPUs used of 4"]


def test_unknown_node_wrong_count_and_missing_job_are_refused() -> None:
    cluster, jobs = cluster_of(4, 4), jobs_of("a", "b")
    a, b = (("n0", 2),), (("n1", 2),)
    assert both({"a": 2, "b": 2}, jobs, cluster, {"a": a, "b": b}) == []
    assert both({"a": 2, "b": 2}, jobs, cluster, {"a": a, "b": (("n9", 2),)})
    assert both({"a": 2, "b": 2}, jobs, cluster, {"a": a, "b": b}) == []
    assert both({"a": 2, "b": 3}, jobs, cluster, {"a": a, "b": b}) == [
        "job 'b': allocated 3 GPUs but placed 2"]
    assert both({"a": 2, "b": 2}, jobs, cluster, {"a": a}) == [
        "job 'b': allocated 2 GPUs but placed 0"]
    assert both({"a": 2}, jobs, cluster, {"a": a, "b": b}) == [
        "job 'b': placed but not allocated"]
    assert both({"a": 2, "b": 2}, jobs, cluster, {"a": a, "b": (("n1", 0), ("n1", 2))})


def test_an_old_tuple_is_checked_again_on_a_new_cluster_or_for_a_changed_job() -> None:
    jobs = jobs_of("a", "b")
    a, b = (("n0", 4),), (("n1", 4),)
    assert both({"a": 4, "b": 4}, jobs, cluster_of(4, 4), {"a": a, "b": b}) == []
    # The same node names, smaller: the same tuples no longer fit.
    assert both({"a": 4, "b": 4}, jobs, cluster_of(4, 2), {"a": a, "b": b}) == [
        "node 'n1': 4 GPUs used of 2"]
    cluster = cluster_of(4, 4)
    assert both({"a": 4, "b": 4}, jobs, cluster, {"a": a, "b": b}) == []
    confined = {**jobs, "b": dataclasses.replace(jobs["b"], nodes=frozenset({"n0"}))}
    assert both({"a": 4, "b": 4}, confined, cluster, {"a": a, "b": b}) == [
        "job 'b': node 'n1' is not one it may use"]
    assert both({"a": 4, "b": 4}, jobs, cluster, {"a": a, "b": b}) == []
    retyped = {**jobs, "b": dataclasses.replace(jobs["b"], gpu_type="a100")}
    assert both({"a": 4, "b": 4}, retyped, cluster, {"a": a, "b": b})
    assert both({"a": 4, "b": 4}, {"a": jobs["a"]}, cluster, {"a": a, "b": b}) == []


def test_what_it_keeps_is_each_node_s_use_once_jobs_moved_and_left() -> None:
    cluster, jobs = cluster_of(4, 4), jobs_of("a", "b", "c")
    a, b = (("n0", 2),), (("n1", 4),)
    rounds = [{"a": a, "b": b}, {"a": a, "b": (("n0", 2),)}, {"b": (("n0", 2),), "c": b}]
    for placement in rounds:
        allocation = {name: sum(c for _, c in p) for name, p in placement.items()}
        assert both(allocation, jobs, cluster, placement) == []
        kept = validated._last_valid[0]
        assert {n: c for n, c in kept.used.items() if c} == used_per_node(placement)


def test_a_shard_that_cannot_be_read_raises_as_the_full_check_does() -> None:
    cluster, jobs = cluster_of(4), jobs_of("a")
    with pytest.raises(ValueError):
        placement_problems_since_last({"a": 2}, jobs, cluster, {"a": (("n0", 1, 1),)})
    with pytest.raises(TypeError):
        placement_problems_since_last({"a": 2}, jobs, cluster, {"a": (("n0", "2"),)})


def test_a_placer_that_overfills_a_node_is_refused_by_the_decision() -> None:
    cluster, jobs = cluster_of(4, 4), jobs_of("a", "b")
    allocation = {"a": 4, "b": 4}
    _, placed, _ = _decide_type(list(jobs.values()), cluster, {},
                                lambda js, capacity: dict(allocation), first_fit)

    def onto_n0(allocation, jobs, cluster, previous):  # type: ignore[no-untyped-def]
        return {**previous, "b": (("n0", 4),)}

    with pytest.raises(PlacementFailed, match="node 'n0': 8 GPUs used of 4"):
        _decide_type(list(jobs.values()), cluster, placed, lambda js, capacity: dict(allocation),
                     onto_n0)


@st.composite
def rounds(draw: st.DrawFn) -> tuple[Cluster, list[tuple[dict, dict, Cluster, dict]]]:
    """Rounds of placements on a cluster: mostly jobs that keep their tuple, some moved,
    some broken (over-full, unknown node, wrong count, unallocated, other type or nodes),
    now and then on another Cluster object (a node smaller or gone)."""
    sizes = draw(st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=5))
    cluster = cluster_of(*sizes)
    names = [f"j{i}" for i in range(draw(st.integers(1, 6)))]
    jobs = jobs_of(*names)
    held: dict[str, JobPlacement] = {}
    out = []
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.integers(0, 5)) == 0:
            cluster = Cluster(tuple(dataclasses.replace(n, gpus=draw(st.sampled_from([1, 2, 4])))
                                    for n in cluster.nodes if draw(st.integers(0, 5))))
        node_names = [n.name for n in cluster.nodes] + ["gone"]
        placement = dict(held)
        for name in names:
            move = draw(st.integers(0, 4))
            if move == 0:
                placement.pop(name, None)
            elif move == 1:
                shards = draw(st.lists(st.tuples(st.sampled_from(node_names),
                                                 st.integers(-1, 4)), min_size=1, max_size=3))
                placement[name] = tuple(shards)
        allocation = {n: sum(c for _, c in p) for n, p in placement.items()}
        for name in draw(st.lists(st.sampled_from(names), max_size=2)):
            allocation[name] = draw(st.integers(0, 4))
        seen = jobs
        if draw(st.integers(0, 5)) == 0:
            victim = draw(st.sampled_from(names))
            seen = {**jobs, victim: dataclasses.replace(
                jobs[victim], nodes=frozenset(draw(st.lists(st.sampled_from(node_names)))))}
        out.append((allocation, seen, cluster, placement))
        held = placement
    return cluster, out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds())
def test_round_after_round_it_says_what_the_full_check_says(case: tuple) -> None:
    _, steps = case
    for allocation, jobs, cluster, placement in steps:
        if both(allocation, jobs, cluster, placement) == [] and validated._last_valid:
            # What it works from next time is this placement's own use of each node.
            kept = validated._last_valid[0]
            assert {n: c for n, c in kept.used.items() if c} == used_per_node(placement)
            assert kept.jobs.keys() == placement.keys()
