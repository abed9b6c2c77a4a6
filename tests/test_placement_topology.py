"""The topology model, the free-GPU index and the topology file loader."""

from __future__ import annotations

import pytest

from voda.core.model import Cluster, Node
from voda.core.placement.topology import (
    LEAF_LABEL,
    SPINE_LABEL,
    FreeIndex,
    Topology,
    node_from_labels,
)
from voda.core.placement.topology_file import TopologyFileError, cluster_from_topology


def small() -> Cluster:
    return Cluster((
        Node("a0", 4, leaf="la", spine="s0"),
        Node("a1", 4, leaf="la", spine="s0"),
        Node("b0", 8, leaf="lb", spine="s0"),
        Node("c0", 4, leaf="lc", spine="s1"),
    ))


def test_labels_give_the_leaf_and_spine_of_a_node() -> None:
    node = node_from_labels("n", 8, {LEAF_LABEL: "rack-1", SPINE_LABEL: "pod-a"}, "a100")
    assert node == Node("n", 8, "a100", "rack-1", "pod-a")


def test_a_node_without_labels_is_its_own_leaf_under_the_default_spine() -> None:
    node = node_from_labels("n", 4, {})
    topology = Topology.of([node])
    assert topology.leaf_of == {"n": "leaf-n"}
    assert topology.spine_of("n") == "spine"


def test_the_topology_lists_leaves_and_spines_in_node_order() -> None:
    topology = Topology.of(small())
    assert dict(topology.leaf_nodes) == {"la": ("a0", "a1"), "lb": ("b0",), "lc": ("c0",)}
    assert dict(topology.spine_leaves) == {"s0": ("la", "lb"), "s1": ("lc",)}
    assert topology.nodes_in("s0") == ("a0", "a1", "b0")
    assert topology.nodes_in("lc") == ("c0",)
    assert topology.nodes_in("b0") == ("b0",)
    assert topology.nodes_in("nowhere") == ()


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        pytest.param("a0", "a0", 0, id="a node is at distance 0 from itself"),
        pytest.param("a0", "a1", 1, id="two nodes of one leaf are at distance 1"),
        pytest.param("a0", "b0", 2, id="two leaves of one spine are at distance 2"),
        pytest.param("a0", "c0", 3, id="two spines are at distance 3"),
    ],
)
def test_distance(a: str, b: str, distance: int) -> None:
    assert Topology.of(small()).distance(a, b) == distance


def test_a_leaf_under_two_spines_is_an_error_naming_the_node() -> None:
    nodes = [Node("x", 4, leaf="l", spine="s0"), Node("y", 4, leaf="l", spine="s1")]
    with pytest.raises(ValueError, match="node 'y': spine: leaf 'l' is under spine 's0'"):
        Topology.of(nodes)


def test_the_free_index_tracks_nodes_leaves_spines_and_buckets() -> None:
    cluster = small()
    index = FreeIndex(cluster.nodes, Topology.of(cluster))
    index.take(0, 3)
    index.take(2, 8, sensitive=True)
    assert index.free == [1, 4, 0, 4]
    assert index.leaf_free == [5, 0, 4]
    assert index.spine_free == [5, 4]
    assert list(index.nodes_with_free(2)) == [1, 3]
    # (bucket 0 is not kept: the full nodes come from the free counts)
    assert index.buckets[0] == [] and list(index.nodes_with_free(0)) == [2, 0, 1, 3]
    assert index.sensitive[2] == 8
    index.release(2, 8, sensitive=True)
    assert list(index.nodes_with_free(5)) == [2]
    with pytest.raises(ValueError, match="node 'a0': 2 GPUs asked, 1 free"):
        index.take(0, 2)


def test_a_topology_file_with_spines_and_leaf_counts() -> None:
    cluster = cluster_from_topology({
        "gpu_type": "t4",
        "gpus": 4,
        "spines": [
            {"name": "s0", "leaves": [{"name": "l0", "nodes": 2}, {"name": "l1", "nodes": 2}]},
            {"name": "s1", "leaves": [{"name": "l2", "nodes": [{"name": "big", "gpus": 8}]}]},
        ],
    })
    assert cluster.nodes == (
        Node("l0-node-0", 4, "t4", "l0", "s0"),
        Node("l0-node-1", 4, "t4", "l0", "s0"),
        Node("l1-node-0", 4, "t4", "l1", "s0"),
        Node("l1-node-1", 4, "t4", "l1", "s0"),
        Node("big", 8, "t4", "l2", "s1"),
    )


def test_eight_leaves_of_two_nodes_of_four_gpus() -> None:
    cluster = cluster_from_topology(
        {"gpus": 4, "leaves": [{"name": f"leaf-{i}", "nodes": 2} for i in range(8)]}
    )
    topology = Topology.of(cluster)
    assert cluster.capacity() == 64
    assert len(topology.leaf_nodes) == 8
    assert all(len(nodes) == 2 for nodes in topology.leaf_nodes.values())


def test_a_flat_node_list_with_labels() -> None:
    cluster = cluster_from_topology({"nodes": [
        {"name": "n0", "gpus": 4, "labels": {LEAF_LABEL: "r1", SPINE_LABEL: "p"}},
        {"name": "n1", "gpus": 2, "leaf": "r2"},
    ]})
    assert cluster.nodes == (Node("n0", 4, leaf="r1", spine="p"), Node("n1", 2, leaf="r2"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param([], "topology: must be a mapping", id="a list is not a topology"),
        pytest.param({}, "topology: no nodes", id="a topology without nodes is refused"),
        pytest.param({"leaves": [{"name": "l", "nodes": 2, "gpus": 0}]},
                     r"leaves\[0\].gpus: must be a positive integer, got 0",
                     id="zero GPUs per node is refused with the field's path"),
        pytest.param({"spines": [{"name": "s", "leaves": "x"}]},
                     r"spines\[0\].leaves: must be a non-empty list",
                     id="leaves that are not a list are refused"),
        pytest.param({"nodes": [{"name": "a"}, {"name": "a"}]},
                     "nodes: name 'a' is used twice", id="a node name used twice is refused"),
        pytest.param({"nodes": [{"name": "a", "leaf": "l", "spine": "s0"},
                                {"name": "b", "leaf": "l", "spine": "s1"}]},
                     "node 'b': spine: leaf 'l' is under spine 's0'",
                     id="a leaf under two spines is refused"),
    ],
)
def test_a_bad_topology_file_names_the_field(data: object, message: str) -> None:
    with pytest.raises(TopologyFileError, match=message):
        cluster_from_topology(data)


def test_an_index_of_the_same_nodes_is_a_fresh_copy_each_time() -> None:
    cluster = small()
    topology = Topology.of(cluster)
    assert Topology.of(Cluster(tuple(cluster.nodes))) is topology  # same nodes: built once
    first = FreeIndex.of(cluster.nodes, topology)
    first.take(first.index["b0"], 8, sensitive=True)
    first.take(first.index["a0"], 3)
    second = FreeIndex.of(list(cluster.nodes), topology)
    assert second is not first and second.free == [4, 4, 8, 4]
    assert second.leaf_free == second.leaf_cap and second.spine_free == second.spine_cap
    assert list(second.nodes_with_free(8)) == [second.index["b0"]]
    assert second.sensitive == [0, 0, 0, 0]
    assert first.free == [1, 4, 0, 4]  # the first is unchanged by the second
    # Other nodes (equal in value, other objects): an index of their own.
    other = Cluster(tuple(Node(n.name, n.gpus, leaf=n.leaf, spine=n.spine)
                          for n in cluster.nodes))
    assert FreeIndex.of(other.nodes, Topology.of(other)).nodes == other.nodes
    with pytest.raises(ValueError, match="spine"):
        Topology.of(Cluster((Node("x", 1, leaf="l", spine="s0"),
                             Node("y", 1, leaf="l", spine="s1"))))
