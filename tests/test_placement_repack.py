"""Restart-aware packing (repack) and the most-free variants of the Pollux artifact's baselines."""

from __future__ import annotations

import dataclasses

import pytest
from builders import make_cluster, make_job

from voda.core.goodput import GoodputModel, PerfParams
from voda.core.model import Job
from voda.core.placement.most_free import make_most_free
from voda.core.placement.registry import get_placer
from voda.core.placement.repack import make_repack, repack

CLUSTER = make_cluster().nodes(3, gpus=4).obj()


def jobs(*names: str) -> dict:  # type: ignore[type-arg]
    return {n: make_job(n).workers(1, 12).submitted_at(i).obj() for i, n in enumerate(names)}


def test_a_small_job_fits_where_it_fits_most_tightly() -> None:
    previous = {"old": (("node-0", 2),)}
    placement = repack({"old": 2, "new": 2}, jobs("old", "new"), CLUSTER, previous)
    assert placement == {"old": (("node-0", 2),), "new": (("node-0", 2),)}


def test_a_large_job_takes_whole_empty_nodes_then_fits_its_remainder() -> None:
    previous = {"old": (("node-1", 2),)}
    placement = repack({"old": 2, "big": 6}, jobs("old", "big"), CLUSTER, previous)
    assert placement["big"] == (("node-0", 4), ("node-1", 2))


def test_larger_jobs_are_placed_first() -> None:
    placement = repack({"a": 2, "b": 4, "c": 2}, jobs("a", "b", "c"),
                       make_cluster().nodes(2, gpus=4).obj(), {})
    assert placement["b"] == (("node-0", 4),)
    assert placement["a"] == placement["c"] == (("node-1", 2),)


def test_a_shrinking_job_keeps_its_largest_shards() -> None:
    previous = {"a": (("node-0", 4), ("node-1", 2))}
    assert repack({"a": 4}, jobs("a"), CLUSTER, previous) == {"a": (("node-0", 4),)}


def test_a_growing_job_moves_to_pack_but_nobody_takes_its_gpus_before_it_moved() -> None:
    previous = {"a": (("node-0", 2),), "b": (("node-0", 2),)}
    placement = repack({"a": 4, "b": 2, "c": 2}, jobs("a", "b", "c"), CLUSTER, previous)
    assert placement["a"] == (("node-1", 4),)
    assert placement["b"] == (("node-0", 2),)
    assert placement["c"] == (("node-2", 2),), "node-0's other half is free only after a moved"


def test_when_the_gpus_a_growing_job_leaves_are_needed_it_grows_where_it_is() -> None:
    cluster = make_cluster().nodes(2, gpus=2).obj()
    previous = {"a": (("node-1", 1),)}
    placement = repack({"a": 2, "b": 2}, jobs("a", "b"), cluster, previous)
    assert placement["a"] == (("node-1", 2),)
    assert placement["b"] == (("node-0", 2),)


def test_in_the_simulators_rounds_every_changed_job_is_placed_afresh_at_once() -> None:
    previous = {"a": (("node-0", 2),), "b": (("node-0", 2),)}
    at_once = make_repack(simultaneous=True)
    placement = at_once({"a": 4, "b": 2, "c": 2}, jobs("a", "b", "c"), CLUSTER, previous)
    assert placement["a"] == (("node-1", 4),)
    assert placement["c"] == (("node-0", 2),)  # the half a left is free at once


# Links between nodes cost 0.5 s a step against 0.01 s within one: packing pays.
SLOW_ACROSS = PerfParams(0.05, 0.001, 0.5, 0.01, 0.01, 0.001, 1.1)
SPLIT = {"a": (("node-0", 2), ("node-1", 2)), "b": (("node-0", 2),), "c": (("node-1", 2),)}


def measured(name: str, perf: PerfParams | None = SLOW_ACROSS, age: float = 3600.0,
             restarts: int = 1) -> Job:
    model = GoodputModel(perf=perf, grad_sqr=1.0, grad_var=1.0, init_batch=128,
                         max_batch=4096, min_local=32, max_local=256,
                         max_profiled_replicas=4 if perf else 0, epoch_samples=50_000.0)
    job = make_job(name).workers(1, 12).obj()
    return dataclasses.replace(job, goodput=model, running_seconds=age, restarts=restarts)


def test_the_pollux_variant_gathers_a_split_job_once_a_node_is_free_and_a_restart_pays() -> None:
    gather = make_repack(simultaneous=True, consolidate_penalty=30.0)
    jobs = {"a": measured("a"), "b": measured("b"), "c": measured("c")}
    placement = gather({"a": 4, "b": 2, "c": 2}, jobs, CLUSTER, SPLIT)
    assert placement["a"] == (("node-2", 4),)
    assert placement["b"] == SPLIT["b"] and placement["c"] == SPLIT["c"]
    assert make_repack(simultaneous=True)({"a": 4, "b": 2, "c": 2}, jobs, CLUSTER, SPLIT) == SPLIT


def test_the_pollux_variant_leaves_a_split_job_when_a_restart_does_not_pay_or_cannot_help() -> None:
    gather = make_repack(simultaneous=True, consolidate_penalty=30.0)
    young = {"a": measured("a", age=40.0), "b": measured("b"), "c": measured("c")}
    assert gather({"a": 4, "b": 2, "c": 2}, young, CLUSTER, SPLIT)["a"] == SPLIT["a"]
    unknown = {"a": measured("a", perf=None), "b": measured("b"), "c": measured("c")}
    assert gather({"a": 4, "b": 2, "c": 2}, unknown, CLUSTER, SPLIT)["a"] == SPLIT["a"]
    full = {**SPLIT, "d": (("node-2", 4),)}
    everyone = {n: measured(n) for n in "abcd"}
    assert gather({"a": 4, "b": 2, "c": 2, "d": 4}, everyone, CLUSTER, full) == full


# Voda's variant under the Pollux preset: whole nodes freed for the jobs that fill them.
FREEING = make_repack(simultaneous=True, free_whole_nodes=True)
SCATTERED = {"a": (("node-0", 1),), "b": (("node-1", 1),), "c": (("node-2", 2),)}


def test_a_one_node_job_moves_so_that_a_job_of_a_whole_node_gets_one() -> None:
    allocation = {"a": 1, "b": 1, "c": 2, "big": 4}
    plain = make_repack(simultaneous=True)(allocation, jobs(*allocation), CLUSTER, SCATTERED)
    assert len(plain["big"]) == 2, "without it the job of 4 is split over two nodes"
    placement = FREEING(allocation, jobs(*allocation), CLUSTER, SCATTERED)
    assert placement["big"] == (("node-0", 4),)
    assert placement["a"] == (("node-2", 1),), "into the tightest partly used node"
    assert placement["b"] == SCATTERED["b"] and placement["c"] == SCATTERED["c"]


def test_nothing_moves_when_whole_nodes_suffice_or_no_fresh_job_fills_a_node() -> None:
    roomy = {"a": (("node-0", 1),), "b": (("node-0", 1),)}
    allocation = {"a": 1, "b": 1, "big": 4}
    assert FREEING(allocation, jobs(*allocation), CLUSTER, roomy)["a"] == roomy["a"]
    small = {"a": 1, "b": 1, "c": 2, "new": 2}
    placement = FREEING(small, jobs(*small), CLUSTER, SCATTERED)
    assert all(placement[n] == SCATTERED[n] for n in SCATTERED)


def test_a_node_is_emptied_only_of_one_node_jobs_that_fit_elsewhere_on_their_gpu_type() -> None:
    spanning = {"a": (("node-0", 1), ("node-1", 1)), "c": (("node-2", 2),)}
    allocation = {"a": 2, "c": 2, "big": 4}
    placement = FREEING(allocation, jobs(*allocation), CLUSTER, spanning)
    assert placement["a"] == spanning["a"], "a job over two nodes pins both"
    assert placement["c"] == (("node-0", 2),) and placement["big"] == (("node-2", 4),)
    mixed = make_cluster().nodes(2, gpus=4, gpu_type="t4").nodes(1, gpus=4, gpu_type="v100").obj()
    names = [n.name for n in mixed.nodes]
    typed = {n: make_job(n).workers(1, 12).gpu_type("t4").obj() for n in ("a", "b", "big")}
    previous = {"a": ((names[0], 1),), "b": ((names[1], 1),)}
    placement = FREEING({"a": 1, "b": 1, "big": 4}, typed, mixed, previous)
    assert placement["big"] == ((names[0], 4),)
    assert placement["a"] == ((names[1], 1),), "onto the other t4 node, not the v100 one"


def test_freeing_whole_nodes_needs_every_change_at_once() -> None:
    with pytest.raises(ValueError, match="free_whole_nodes"):
        make_repack(free_whole_nodes=True)


def test_repack_is_a_named_placer() -> None:
    assert get_placer("repack") is repack


def test_the_optimus_variant_places_every_resized_job_afresh_fewest_gpus_first() -> None:
    optimus = make_most_free(keep_resized=False, fewest_first=True)
    previous = {"grow": (("node-0", 1),), "same": (("node-1", 2),)}
    placement = optimus({"grow": 3, "same": 2, "new": 1}, jobs("grow", "same", "new"),
                        CLUSTER, previous)
    assert placement["same"] == (("node-1", 2),)
    assert placement["new"] == (("node-0", 1),)  # 1 GPU before 3; node-0 and node-2 tie at 4
    assert placement["grow"] == (("node-2", 3),)
