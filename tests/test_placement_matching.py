"""Migration matching, the migration plan, and the placement metrics."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voda.core.model import Cluster, Job, Node
from voda.core.placement import matching
from voda.core.placement.matching import (
    Move,
    apply_mapping,
    layout_of,
    match_layouts,
    migration_plan,
    placement_of,
)
from voda.core.placement.metrics import domain_utilization, fragmentation_ratio, job_span
from voda.core.placement.topology import Topology


def two_leaves() -> Cluster:
    return Cluster((
        Node("a0", 4, leaf="la", spine="s"),
        Node("a1", 4, leaf="la", spine="s"),
        Node("b0", 4, leaf="lb", spine="s"),
        Node("b1", 4, leaf="lb", spine="s"),
    ))


def test_node_layouts_go_to_the_nodes_that_hold_their_workers() -> None:
    cluster = two_leaves()
    ideal = {"a0": {"x": 4}, "a1": {"y": 3}}
    current = {"a1": {"x": 4}, "a0": {"y": 1}}
    mapping = match_layouts(ideal, current, cluster.nodes, Topology.of(cluster))
    assert mapping["a0"] == "a1" and mapping["a1"] == "a0"
    assert apply_mapping(ideal, mapping) == {"a1": {"x": 4}, "a0": {"y": 3}}


def test_a_whole_leaf_layout_moves_to_the_leaf_that_holds_its_workers() -> None:
    cluster = two_leaves()
    ideal = {"a0": {"x": 4}, "a1": {"x": 4}, "b0": {"y": 2}}
    current = {"b0": {"x": 4}, "b1": {"x": 4}, "a0": {"y": 2}}
    mapping = match_layouts(ideal, current, cluster.nodes, Topology.of(cluster))
    moved = apply_mapping(ideal, mapping)
    assert moved == {"b0": {"x": 4}, "b1": {"x": 4}, "a0": {"y": 2}}


def test_a_tie_keeps_every_layout_where_it_was_computed() -> None:
    cluster = two_leaves()
    ideal = {"a0": {"x": 1}, "b1": {"y": 1}}
    mapping = match_layouts(ideal, {}, cluster.nodes, Topology.of(cluster))
    assert mapping == {n.name: n.name for n in cluster.nodes}


def test_a_layout_never_goes_to_a_node_too_small_for_it() -> None:
    cluster = Cluster((Node("big", 8, leaf="l"), Node("small", 2, leaf="l")))
    ideal = {"big": {"x": 6}, "small": {"y": 2}}
    current = {"small": {"x": 2}, "big": {"y": 2}}  # x would rather be on "small"
    mapping = match_layouts(ideal, current, cluster.nodes, Topology.of(cluster))
    assert mapping == {"big": "big", "small": "small"}


def test_a_pinned_leaf_stays_where_it_is() -> None:
    cluster = two_leaves()
    ideal = {"a0": {"x": 4}}
    current = {"b0": {"x": 4}}
    mapping = match_layouts(ideal, current, cluster.nodes, Topology.of(cluster),
                            pinned_leaves=frozenset({"la"}))
    assert mapping["a0"] == "a0"


def test_layouts_and_placements_convert_both_ways() -> None:
    placement = {"x": (("a0", 2), ("b0", 1)), "y": (("a0", 2),)}
    layout = layout_of(placement)
    assert layout == {"a0": {"x": 2, "y": 2}, "b0": {"x": 1}}
    order = {n.name: i for i, n in enumerate(two_leaves().nodes)}
    assert placement_of(layout, order) == placement


@pytest.mark.parametrize(
    ("old", "new", "moves", "restarts"),
    [
        pytest.param({"x": (("a0", 4),)}, {"x": (("a0", 4),)}, (), (),
                     id="an unchanged job moves nothing"),
        pytest.param({"x": (("a0", 4), ("a1", 1))}, {"x": (("a0", 4),)}, (), (),
                     id="a shrinking job drops workers without moving any"),
        pytest.param({"x": (("a0", 2),)}, {"x": (("a0", 2), ("a1", 2))}, (), (),
                     id="a growing job adds workers without moving any"),
        pytest.param({"x": (("a0", 2), ("a1", 2))}, {"x": (("a0", 2), ("b0", 2))},
                     (Move("x", "a1", "b0", 2),), (),
                     id="a job that keeps some workers moves the others"),
        pytest.param({"x": (("a0", 3),)}, {"x": (("b0", 2), ("b1", 1))},
                     (Move("x", "a0", "b0", 2), Move("x", "a0", "b1", 1)), ("x",),
                     id="a job none of whose workers stay must restart"),
        pytest.param({"x": (("a0", 3),)}, {}, (), (),
                     id="a halted job moves nothing"),
    ],
)
def test_migration_plan(old: dict, new: dict, moves: tuple, restarts: tuple) -> None:
    plan = migration_plan(old, new)
    assert plan.moves == moves
    assert plan.restarts == restarts
    assert plan.moved_workers == sum(m.workers for m in moves)


SHARDS = st.lists(st.tuples(st.sampled_from(("a0", "a1", "b0")), st.integers(-1, 3)),
                  min_size=1, max_size=3).map(tuple)
PLACEMENTS = st.dictionaries(st.sampled_from(("x", "y", "z", "w")), SHARDS)


@settings(max_examples=300, deadline=None)
@given(old=PLACEMENTS, new=PLACEMENTS)
def test_a_job_on_one_node_each_time_gets_the_plan_of_the_general_way(
    old: dict, new: dict
) -> None:
    """Also a job on one node before and on several after (`_kept_its_node`)."""
    with mock.patch.object(matching, "ONE_NODE_SHORTCUT", False):
        reference = migration_plan(old, new)
    assert migration_plan(old, new) == reference


def test_fragmentation_counts_free_gpus_no_waiting_job_can_use() -> None:
    cluster = two_leaves()
    placement = {"x": (("a0", 3), ("a1", 3), ("b0", 1))}  # free: 1, 1, 3, 4
    waiting = [Job("w", min_workers=4)]
    # Only b1 (4 free) can hold the 4-GPU job; 1 + 1 + 3 of the 9 free GPUs are stranded.
    assert fragmentation_ratio(cluster, placement, waiting) == pytest.approx(5 / 9)
    assert fragmentation_ratio(cluster, placement, [Job("w", min_workers=1)]) == 0.0
    assert fragmentation_ratio(cluster, placement, []) == 0.0
    # A job larger than a node can use whole free nodes only.
    assert fragmentation_ratio(cluster, {}, [Job("w", min_workers=8)]) == 0.0
    assert fragmentation_ratio(cluster, placement, [Job("w", min_workers=8)]) == 1.0


def test_domain_utilization_and_job_span() -> None:
    cluster = two_leaves()
    placement = {"x": (("a0", 4), ("a1", 2)), "y": (("b0", 2),)}
    utilization = domain_utilization(cluster, placement)
    assert dict(utilization.leaves) == {"la": 0.75, "lb": 0.25}
    assert dict(utilization.spines) == {"s": 0.5}
    span = job_span(placement["x"], Topology.of(cluster))
    assert (span.nodes, span.leaves, span.spines) == (2, 1, 1)


def test_a_leaf_s_layout_fits_a_leaf_of_fewer_nodes_with_every_worker_placed() -> None:
    """A leaf of two nodes, one of them with workers, onto a leaf of one node: the node
    with workers gets the one node, not the empty one (it was left out: a KeyError)."""
    cluster = Cluster((Node("a0", 4, leaf="la", spine="s"), Node("a1", 4, leaf="la", spine="s"),
                       Node("b0", 4, leaf="lb", spine="s")))
    ideal = {"a1": {"x": 4}, "b0": {"y": 4}}
    current = {"a0": {"y": 4}}  # y is on leaf la now: the leaves swap
    mapping = match_layouts(ideal, current, cluster.nodes, Topology.of(cluster))
    assert mapping["a1"] == "b0" and mapping["b0"] == "a0"
    assert apply_mapping(ideal, mapping) == {"b0": {"x": 4}, "a0": {"y": 4}}
