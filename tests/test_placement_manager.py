"""Hand-worked placements of the topology-aware placer, with the expected nodes written out.

The cluster of most cases: 2 spines, 4 leaves of 2 nodes of 4 GPUs.

    spine s0: leaf l0 = n0 n1, leaf l1 = n2 n3
    spine s1: leaf l2 = n4 n5, leaf l3 = n6 n7
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from builders import make_cluster, make_job

from voda.core.model import Cluster, Job, Placement
from voda.core.placement.base import placement_problems
from voda.core.placement.first_fit import first_fit
from voda.core.placement.manager import (
    PlacementSettings,
    TopologyPlacer,
    counts_only,
    sequence_problems,
)
from voda.core.placement.registry import DEFAULT_PLACER, get_placer, placer_names


def four_leaves() -> Cluster:
    builder = make_cluster()
    for i in range(8):
        builder.node(f"n{i}", 4, leaf=f"l{i // 2}", spine=f"s{i // 4}")
    return builder.obj()


def job(name: str, submit: float = 0.0, **hints: object) -> Job:
    return make_job(name).workers(1, 16).submitted_at(submit).with_(**hints).obj()


def place(
    allocation: Mapping[str, int],
    previous: Placement | None = None,
    jobs: list[Job] | None = None,
    cluster: Cluster | None = None,
    settings: PlacementSettings | None = None,
) -> Placement:
    cluster = cluster or four_leaves()
    by_name = {j.name: j for j in jobs or []}
    for i, name in enumerate(sorted({*allocation, *(previous or {})})):
        by_name.setdefault(name, job(name, submit=float(i)))
    placement = TopologyPlacer(settings)(allocation, by_name, cluster, previous or {})
    assert placement_problems(allocation, by_name, cluster, placement) == []
    return placement


CASES = [
    pytest.param(
        {"a": 3}, {}, [],
        {"a": (("n0", 3),)},
        id="a job that fits on one node goes on one node, the first of the emptiest",
    ),
    pytest.param(
        {"x": 2, "y": 3, "a": 2}, {"x": (("n0", 2),), "y": (("n1", 3),)}, [],
        {"x": (("n0", 2),), "y": (("n1", 3),), "a": (("n0", 2),)},
        id="best fit: a 2-GPU job fills the node with exactly 2 free GPUs",
    ),
    pytest.param(
        {"x": 1, "a": 8}, {"x": (("n0", 1),)}, [],
        {"x": (("n0", 1),), "a": (("n2", 4), ("n3", 4))},
        id="an 8-GPU job takes the two nodes of a whole leaf, not nodes of two leaves",
    ),
    pytest.param(
        {"x": 2, "a": 6}, {"x": (("n1", 2),)}, [],
        {"x": (("n1", 2),), "a": (("n0", 4), ("n1", 2))},
        id="a 6-GPU job fills a node and the best-fitting node of the same leaf",
    ),
    pytest.param(
        {"x": 1, "a": 16}, {"x": (("n0", 1),)}, [],
        {"x": (("n0", 1),), "a": (("n4", 4), ("n5", 4), ("n6", 4), ("n7", 4))},
        id="a 16-GPU job takes two whole leaves under the spine that has room",
    ),
    pytest.param(
        {"a": 4}, {}, [job("a", placement_strategy="distributed")],
        {"a": (("n0", 1), ("n2", 1), ("n4", 1), ("n6", 1))},
        id="a distributed job puts one worker on a node of each leaf",
    ),
    pytest.param(
        {"a": 4}, {}, [job("a", placement_strategy="balanced")],
        {"a": (("n0", 2), ("n1", 2))},
        id="a balanced job takes half nodes within one leaf",
    ),
    pytest.param(
        {"a": 3}, {}, [job("a", preferred_domain="l2")],
        {"a": (("n4", 3),)},
        id="a job preferring a leaf with room goes to that leaf",
    ),
    pytest.param(
        {"a": 8}, {}, [job("a", preferred_domain="s1")],
        {"a": (("n4", 4), ("n5", 4))},
        id="a job preferring a spine with room goes under that spine",
    ),
    pytest.param(
        {"x": 8, "a": 3}, {"x": (("n4", 4), ("n5", 4))}, [job("a", preferred_domain="l2")],
        {"x": (("n4", 4), ("n5", 4)), "a": (("n6", 3),)},
        id="a job whose preferred leaf is full goes as near as it can: under the same spine",
    ),
    pytest.param(
        {"a": 4}, {},
        [job("a", placement_strategy="distributed", network_bandwidth=200.0)],
        {"a": (("n0", 2), ("n1", 2))},
        id="a job needing more than a leaf uplink spreads within one leaf only",
    ),
    pytest.param(
        {"s": 1, "t": 2}, {"s": (("n0", 1),)},
        [job("s", latency_sensitive=True), job("t", 1.0, latency_sensitive=True)],
        {"s": (("n0", 1),), "t": (("n2", 1), ("n4", 1))},
        id="a latency-sensitive job spreads and avoids the node of another one",
    ),
    pytest.param(
        {"a": 4}, {"a": (("n0", 4), ("n1", 1))}, [],
        {"a": (("n0", 4),)},
        id="a shrinking job drops its smallest shard",
    ),
    pytest.param(
        {"a": 4}, {"a": (("n3", 2),)}, [],
        {"a": (("n3", 4),)},
        id="a growing job grows on its own node",
    ),
    pytest.param(
        {"a": 3, "b": 2}, {"a": (("n0", 2),), "b": (("n0", 2),)}, [],
        {"a": (("n1", 3),), "b": (("n0", 2),)},
        id="a growing job whose node is full moves whole to a node where it fits",
    ),
    pytest.param(
        {"a": 6}, {"a": (("n2", 4),)}, [],
        {"a": (("n2", 4), ("n3", 2))},
        id="a growing job spills over onto a node of its own leaf",
    ),
]


@pytest.mark.parametrize(("allocation", "previous", "jobs", "expected"), CASES)
def test_hand_worked_placements(
    allocation: dict[str, int], previous: Placement, jobs: list[Job], expected: Placement
) -> None:
    assert place(allocation, previous, jobs) == expected


def test_workers_on_a_removed_node_are_placed_again_and_the_others_stay() -> None:
    cluster = Cluster(tuple(n for n in four_leaves().nodes if n.name != "n0"))
    previous = {"a": (("n0", 4),), "b": (("n2", 2), ("n3", 2))}
    assert place({"a": 4, "b": 4}, previous, cluster=cluster) == {
        "a": (("n1", 4),),
        "b": (("n2", 2), ("n3", 2)),
    }


def test_a_job_that_fits_on_one_node_gets_one_by_moving_a_small_job() -> None:
    cluster = make_cluster().node("n0", 4, leaf="l").node("n1", 4, leaf="l").obj()
    previous = {"x": (("n0", 1),), "y": (("n1", 2),)}
    # Step 2 alone would split a over n0 (3) and n1 (1); moving x frees all of n0.
    assert place({"x": 1, "y": 2, "a": 4}, previous, cluster=cluster) == {
        "a": (("n0", 4),),
        "x": (("n1", 1),),
        "y": (("n1", 2),),
    }


def test_without_defragmentation_the_job_is_split_instead() -> None:
    cluster = make_cluster().node("n0", 4, leaf="l").node("n1", 4, leaf="l").obj()
    previous = {"x": (("n0", 1),), "y": (("n1", 2),)}
    settings = PlacementSettings(defragment=False)
    assert place({"x": 1, "y": 2, "a": 4}, previous, cluster=cluster, settings=settings) == {
        "a": (("n0", 3), ("n1", 1)),
        "x": (("n0", 1),),
        "y": (("n1", 2),),
    }


def test_when_half_the_jobs_are_new_the_layout_is_rebuilt_and_matched_onto_the_nodes() -> None:
    cluster = make_cluster().node("n0", 4, leaf="l").node("n1", 4, leaf="l").node(
        "n2", 4, leaf="l").obj()
    previous = {"a": (("n0", 1),), "b": (("n1", 1),), "c": (("n2", 1),)}
    # Alone, step 2 splits d and e over two nodes each. The ideal layout gives d and e
    # a whole node each and puts a, b, c and f together; matched onto the nodes, that
    # node is n2, where c already runs, so only a and b move.
    assert place({"a": 1, "b": 1, "c": 1, "d": 4, "e": 4, "f": 1}, previous,
                 cluster=cluster) == {
        "a": (("n2", 1),),
        "b": (("n2", 1),),
        "c": (("n2", 1),),
        "d": (("n0", 4),),
        "e": (("n1", 4),),
        "f": (("n2", 1),),
    }


def test_an_allocation_that_only_fits_scattered_is_still_placed() -> None:
    cluster = make_cluster().node("n0", 3, leaf="l0").node("n1", 3, leaf="l1").obj()
    previous = {"x": (("n0", 1),), "y": (("n1", 1),)}
    placement = place({"x": 1, "y": 1, "a": 4}, previous, cluster=cluster)
    assert placement["a"] == (("n0", 2), ("n1", 2))


def test_jobs_only_go_on_nodes_of_their_gpu_type() -> None:
    cluster = (
        make_cluster().node("t0", 4, "t4", leaf="l0").node("v0", 8, "v100", leaf="l0").obj()
    )
    jobs = [make_job("a").workers(1, 8).gpu_type("v100").obj(),
            make_job("b").workers(1, 8).gpu_type("t4").obj()]
    assert place({"a": 3, "b": 3}, jobs=jobs, cluster=cluster) == {
        "a": (("v0", 3),),
        "b": (("t0", 3),),
    }


def test_more_gpus_than_the_type_has_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="GPU type 'default' get 40 GPUs, the cluster has 32"):
        TopologyPlacer()({"a": 40}, {"a": job("a")}, four_leaves(), {})


def test_the_historical_performance_of_a_leaf_breaks_a_tie() -> None:
    settings = PlacementSettings(domain_performance={"l3": 1.0})
    assert place({"a": 2}, settings=settings) == {"a": (("n6", 2),)}


def test_a_job_never_takes_more_of_a_leaf_than_the_limit_when_it_can_be_avoided() -> None:
    settings = PlacementSettings(max_gpus_per_leaf=4)
    assert place({"a": 8}, settings=settings) == {"a": (("n0", 4), ("n2", 4))}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"resource_weight": -1}, "resource_weight: must be a non-negative",
                     id="a negative weight is refused"),
        pytest.param({"max_nodes_per_leaf": 0}, "max_nodes_per_leaf: must be None or",
                     id="a leaf limit of zero nodes is refused"),
        pytest.param({"leaf_uplink_bandwidth": 0}, "leaf_uplink_bandwidth: must be positive",
                     id="a zero uplink bandwidth is refused"),
        pytest.param({"domain_performance": {"l0": 2.0}}, r"domain_performance\['l0'\]",
                     id="a performance score above 1 is refused"),
    ],
)
def test_bad_settings_name_the_field(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PlacementSettings(**changes)  # type: ignore[arg-type]


def test_the_registry_knows_topology_off_and_naive_and_defaults_to_topology() -> None:
    assert DEFAULT_PLACER == "topology"
    assert {"topology", "off", "naive"} <= set(placer_names())
    assert isinstance(get_placer("topology"), TopologyPlacer)
    assert get_placer("off") is counts_only
    assert get_placer("naive") is first_fit
    with pytest.raises(ValueError, match="unknown placer 'nope'"):
        get_placer("nope")


def test_placement_off_only_keeps_counts_and_is_still_valid() -> None:
    cluster = four_leaves()
    jobs = {"a": job("a"), "b": job("b", 1.0)}
    allocation = {"a": 5, "b": 3}
    placement = counts_only(allocation, jobs, cluster, {"b": (("n7", 3),)})
    assert placement_problems(allocation, jobs, cluster, placement) == []
    assert placement["b"] == (("n7", 3),)
    assert getattr(counts_only, "ignores_topology", False)


def test_a_job_never_starts_on_gpus_that_a_later_scale_out_frees() -> None:
    cluster = make_cluster().node("n0", 4, leaf="l").node("n1", 4, leaf="l").obj()
    previous = {"g": (("n0", 2),), "x": (("n0", 2),)}
    # Moving g whole to n1 would leave n0's 2 GPUs to s, but a plan starts s before it
    # scales g out: so g grows in place instead.
    assert place({"g": 3, "x": 2, "s": 2}, previous, cluster=cluster) == {
        "g": (("n0", 2), ("n1", 1)),
        "s": (("n1", 2),),
        "x": (("n0", 2),),
    }


def test_sequence_problems_names_the_node_and_the_action() -> None:
    previous = {"g": (("n0", 2),), "x": (("n0", 2),)}
    moved = {"g": (("n1", 3),), "x": (("n0", 2),), "s": (("n0", 2),)}
    capacity = {"n0": 4, "n1": 4}
    assert sequence_problems(previous, moved, capacity) == [
        "node 'n0': 6 GPUs used of 4 after start s"
    ]
    assert sequence_problems(previous, {"g": (("n0", 3),), "x": (("n0", 1),)}, capacity) == []


def one_leaf_of_four_nodes() -> Cluster:
    builder = make_cluster()
    for i in range(4):
        builder.node(f"n{i}", 4, leaf="l0", spine="s0")
    return builder.obj()


@pytest.mark.parametrize(
    ("spread", "expected"),
    [
        (False, {"wide": (("n0", 4), ("n1", 4)), "small": (("n2", 2),)}),
        (True, {"wide": (("n0", 2), ("n1", 2), ("n2", 2), ("n3", 2)), "small": (("n0", 2),)}),
    ],
    ids=[
        "by default a job wider than a node takes as few whole nodes as it can",
        "with spread_multi_node it takes half of each node while a small job still packs",
    ],
)
def test_spread_multi_node_halves_the_workers_per_node_of_wide_jobs(
    spread: bool, expected: Placement
) -> None:
    placement = place({"wide": 8, "small": 2}, cluster=one_leaf_of_four_nodes(),
                      settings=PlacementSettings(spread_multi_node=spread))
    assert placement == expected


def test_topology_spread_is_a_named_placer() -> None:
    placer = get_placer("topology-spread")
    assert isinstance(placer, TopologyPlacer)
    assert placer.settings.spread_multi_node
