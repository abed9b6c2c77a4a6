"""The network topology of a cluster: nodes under leaf switches under spine switches.

`Topology` is the immutable model built from the nodes (their `leaf`/`spine`
fields, filled from the node labels `voda.io/leaf` and `voda.io/spine`).
`FreeIndex` is the mutable working view a placer builds for one GPU type: free
GPUs per node, per leaf and per spine, with nodes bucketed by free GPUs so the
best-fit node for a request is found without scanning the cluster.
See docs/design/003-placement.md.
"""

from __future__ import annotations

import array
import bisect
import copy
import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from voda.core.model import DEFAULT_GPU_TYPE, Cluster, Node

LEAF_LABEL = "voda.io/leaf"
SPINE_LABEL = "voda.io/spine"

# distance() values: same node, same leaf, same spine, different spines.
SAME_NODE, SAME_LEAF, SAME_SPINE, ACROSS_SPINES = 0, 1, 2, 3


def node_from_labels(
    name: str, gpus: int, labels: Mapping[str, str], gpu_type: str = DEFAULT_GPU_TYPE
) -> Node:
    """A Node whose leaf and spine come from its labels (absent: the defaults of Node)."""
    leaf = labels.get(LEAF_LABEL) or None
    spine = labels.get(SPINE_LABEL) or None
    return Node(name=name, gpus=gpus, gpu_type=gpu_type, leaf=leaf, spine=spine)


@dataclass(frozen=True)
class Topology:
    """Leaves and spines of a set of nodes, in the order the nodes come."""

    leaf_nodes: Mapping[str, tuple[str, ...]]
    spine_leaves: Mapping[str, tuple[str, ...]]
    leaf_of: Mapping[str, str]
    spine_of_leaf: Mapping[str, str]

    @classmethod
    def of(cls, nodes: Cluster | Iterable[Node]) -> Topology:
        """Build the topology; a leaf placed under two different spines is an error.
        Built once for the same nodes (the same, immutable, objects): placers ask at
        every decision."""
        node_list = nodes.nodes if isinstance(nodes, Cluster) else tuple(nodes)
        key = tuple(map(id, node_list))
        with _templates_lock:
            known = _topologies.get(key)
            if known is not None:
                _topologies.move_to_end(key)
                return known[1]
        topology = cls._build(node_list)
        with _templates_lock:
            _topologies[key] = (tuple(node_list), topology)  # holds the key's objects
            while len(_topologies) > _TEMPLATES_KEPT:
                _topologies.popitem(last=False)
        return topology

    @classmethod
    def _build(cls, node_list: Sequence[Node]) -> Topology:
        leaf_nodes: dict[str, list[str]] = {}
        spine_leaves: dict[str, list[str]] = {}
        leaf_of: dict[str, str] = {}
        spine_of_leaf: dict[str, str] = {}
        for node in node_list:
            leaf, spine = node.leaf_name, node.spine_name
            known = spine_of_leaf.get(leaf)
            if known is None:
                spine_of_leaf[leaf] = spine
                spine_leaves.setdefault(spine, []).append(leaf)
            elif known != spine:
                raise ValueError(
                    f"node {node.name!r}: spine: leaf {leaf!r} is under spine {known!r}, "
                    f"not {spine!r}"
                )
            leaf_nodes.setdefault(leaf, []).append(node.name)
            leaf_of[node.name] = leaf
        return cls(
            leaf_nodes=MappingProxyType({k: tuple(v) for k, v in leaf_nodes.items()}),
            spine_leaves=MappingProxyType({k: tuple(v) for k, v in spine_leaves.items()}),
            leaf_of=MappingProxyType(leaf_of),
            spine_of_leaf=MappingProxyType(spine_of_leaf),
        )

    def spine_of(self, node: str) -> str:
        return self.spine_of_leaf[self.leaf_of[node]]

    def distance(self, a: str, b: str) -> int:
        """0 same node, 1 same leaf, 2 same spine, 3 across spines."""
        if a == b:
            return SAME_NODE
        if self.leaf_of[a] == self.leaf_of[b]:
            return SAME_LEAF
        if self.spine_of(a) == self.spine_of(b):
            return SAME_SPINE
        return ACROSS_SPINES

    def nodes_in(self, domain: str) -> tuple[str, ...]:
        """Nodes of a leaf, a spine or a node, by name (leaf names first); () when unknown."""
        if domain in self.leaf_nodes:
            return self.leaf_nodes[domain]
        if domain in self.spine_leaves:
            return tuple(n for leaf in self.spine_leaves[domain] for n in self.leaf_nodes[leaf])
        if domain in self.leaf_of:
            return (domain,)
        return ()


class FreeIndex:
    """Free GPUs of the nodes of one GPU type, by node, leaf and spine.

    Nodes, leaves and spines are numbered in cluster order; every query breaks
    ties by these numbers, so whatever uses the index is deterministic.
    """

    def __init__(self, nodes: Sequence[Node], topology: Topology) -> None:
        self.nodes = tuple(nodes)
        self.topology = topology
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.names = [n.name for n in self.nodes]
        self.cap = [n.gpus for n in self.nodes]
        self.free = list(self.cap)
        self.max_cap = max(self.cap, default=0)
        leaf_ids: dict[str, int] = {}
        spine_ids: dict[str, int] = {}
        self.leaf: list[int] = []
        self.leaf_names: list[str] = []
        self.leaf_nodes: list[list[int]] = []
        self.leaf_spine: list[int] = []
        self.spine_names: list[str] = []
        self.spine_leaves: list[list[int]] = []
        for i, node in enumerate(self.nodes):
            leaf_name = topology.leaf_of[node.name]
            if leaf_name not in leaf_ids:
                spine_name = topology.spine_of_leaf[leaf_name]
                if spine_name not in spine_ids:
                    spine_ids[spine_name] = len(self.spine_names)
                    self.spine_names.append(spine_name)
                    self.spine_leaves.append([])
                leaf_ids[leaf_name] = len(self.leaf_names)
                self.leaf_names.append(leaf_name)
                self.leaf_nodes.append([])
                self.leaf_spine.append(spine_ids[spine_name])
                self.spine_leaves[spine_ids[spine_name]].append(leaf_ids[leaf_name])
            self.leaf.append(leaf_ids[leaf_name])
            self.leaf_nodes[leaf_ids[leaf_name]].append(i)
        self.leaf_ids = leaf_ids
        self.spine_ids = spine_ids
        self.leaf_cap = [sum(self.cap[i] for i in ns) for ns in self.leaf_nodes]
        # leaf_free_of[leaf](free): the free GPUs of the leaf's nodes, as a tuple.
        self.leaf_free_of = [_getter(ns) for ns in self.leaf_nodes]
        self.leaf_free = list(self.leaf_cap)
        self.spine_cap = [sum(self.leaf_cap[leaf] for leaf in ls) for ls in self.spine_leaves]
        self.spine_free = list(self.spine_cap)
        # buckets[f]: ids of the nodes with exactly f free GPUs, ascending, for f >= 1;
        # buckets[0] stays empty (full nodes are never asked for; on a full cluster it
        # would be the largest to keep sorted): see nodes_with_free.
        self.buckets: list[list[int]] = _buckets(self.cap, self.max_cap)
        # hist[leaf * (max_cap + 1) + f]: the leaf's nodes with exactly f free GPUs (for
        # voda.core.placement.leaf_kernel); hist_at[i]: where node i's leaf row starts.
        self.hist_at = [leaf * (self.max_cap + 1) for leaf in self.leaf]
        self.hist = _histogram(self.free, self.hist_at, len(self.leaf_names) * (self.max_cap + 1))
        # The free counts again, as an array (free_array[i] == free[i]), and per leaf its
        # first node, node count, spine and capacity (rows 0-3) where every leaf holds
        # consecutive node ids in leaf order, else None: for the compiled kernels.
        self.free_array = array.array("q", self.free)
        self.leaf_rows = _leaf_rows(self.leaf_nodes, self.leaf_spine, self.leaf_cap)
        # Latency-sensitive workers per node (for the "never co-located" rule).
        self.sensitive = [0] * len(self.nodes)
        # Bumped on every change of a leaf's free GPUs, for caches keyed by leaf.
        self.leaf_version = [0] * len(self.leaf_names)
        # Every such change, in order (its leaf id), for caches of every leaf at once.
        self.leaf_changes: list[int] = []

    @classmethod
    def of(cls, nodes: Sequence[Node], topology: Topology) -> FreeIndex:
        """A fresh index of `nodes` (all free), copied from one built before for the same
        nodes and topology (the same objects) when there is one: a placer is called on
        the same cluster at every decision and every step of a forecast, and building
        the index of a thousand nodes costs more than placing most jobs."""
        key = (id(topology), *map(id, nodes))
        with _templates_lock:
            template = _templates.get(key)
            if template is not None:
                _templates.move_to_end(key)
        if template is None:
            template = cls(nodes, topology)  # it holds the key's objects: ids not reused
            with _templates_lock:
                _templates[key] = template
                while len(_templates) > _TEMPLATES_KEPT:
                    _templates.popitem(last=False)
        return template.copy()

    def copy(self) -> FreeIndex:
        """An independent copy: the structure (nodes, leaves, spines, capacities) is
        shared, as nothing changes it after __init__; the free counts are the copy's own."""
        twin = copy.copy(self)
        twin.free = list(self.free)
        twin.buckets = [list(bucket) for bucket in self.buckets]
        twin.hist = array.array("q", self.hist)
        twin.free_array = array.array("q", self.free_array)
        twin.leaf_free = list(self.leaf_free)
        twin.spine_free = list(self.spine_free)
        twin.sensitive = list(self.sensitive)
        twin.leaf_version = list(self.leaf_version)
        twin.leaf_changes = list(self.leaf_changes)
        return twin

    @property
    def total_free(self) -> int:
        return sum(self.spine_free)

    def set_free(self, free: Sequence[int]) -> None:
        """Every node's free GPUs at once (each within [0, capacity]), in one pass."""
        if len(free) != len(self.nodes) or any(
                not 0 <= f <= c for f, c in zip(free, self.cap, strict=True)):
            raise ValueError("free: one count per node, each within [0, capacity]")
        self.free = list(free)
        self.buckets = _buckets(self.free, self.max_cap)
        self.hist = _histogram(self.free, self.hist_at, len(self.hist))
        self.free_array = array.array("q", self.free)
        self.leaf_free = [sum(self.free[i] for i in nodes) for nodes in self.leaf_nodes]
        self.spine_free = [sum(self.leaf_free[leaf] for leaf in leaves)
                           for leaves in self.spine_leaves]
        self.leaf_version = [v + 1 for v in self.leaf_version]
        self.leaf_changes.extend(range(len(self.leaf_names)))

    def take(self, i: int, count: int, sensitive: bool = False) -> None:
        self.move(i, -count)
        if sensitive:
            self.sensitive[i] += count

    def release(self, i: int, count: int, sensitive: bool = False) -> None:
        self.move(i, count)
        if sensitive:
            self.sensitive[i] -= count

    def move(self, i: int, delta: int) -> None:
        """`delta` GPUs more free on node i (fewer where negative): `take` and `release`
        without the latency-sensitive count, for callers that moved no such job."""
        free = self.free
        old = free[i]
        new = old + delta
        if new < 0 or new > self.cap[i]:
            raise ValueError(f"node {self.nodes[i].name!r}: {-delta} GPUs asked, {old} free")
        buckets = self.buckets
        if old:
            bucket = buckets[old]
            del bucket[_bisect_left(bucket, i)]
        if new:
            _insort(buckets[new], i)
        free[i] = new
        self.free_array[i] = new
        hist, at = self.hist, self.hist_at[i]
        hist[at + old] -= 1
        hist[at + new] += 1
        leaf = self.leaf[i]
        self.leaf_free[leaf] += delta
        self.leaf_version[leaf] += 1
        self.leaf_changes.append(leaf)
        self.spine_free[self.leaf_spine[leaf]] += delta

    def nodes_with_free(self, at_least: int) -> Iterable[int]:
        """Node ids with at least `at_least` free GPUs, tightest first (best fit)."""
        if at_least <= 0:
            yield from (i for i, f in enumerate(self.free) if f == 0)
        for f in range(max(at_least, 1), self.max_cap + 1):
            yield from self.buckets[f]

    def domain_leaves(self, domain: str) -> list[int]:
        """Leaf ids of a leaf or spine name (leaf names first); [] when not of this type."""
        if domain in self.leaf_ids:
            return [self.leaf_ids[domain]]
        if domain in self.spine_ids:
            return list(self.spine_leaves[self.spine_ids[domain]])
        if domain in self.index:
            return [self.leaf[self.index[domain]]]
        return []


_bisect_left, _insort = bisect.bisect_left, bisect.insort
# FreeIndex.of's templates: the last few built, by the identity of their nodes and
# topology (an entry holds both, so the ids in its key are not reused while it lives).
_TEMPLATES_KEPT = 8
_templates: OrderedDict[tuple[int, ...], FreeIndex] = OrderedDict()
_templates_lock = threading.Lock()
# Topology.of's, by the identity of the nodes (held, as above).
_topologies: OrderedDict[tuple[int, ...], tuple[tuple[Node, ...], Topology]] = OrderedDict()


def _buckets(free: Sequence[int], max_cap: int) -> list[list[int]]:
    """FreeIndex.buckets of these free counts (bucket 0 left empty)."""
    buckets: list[list[int]] = [[] for _ in range(max_cap + 1)]
    for i, f in enumerate(free):
        if f:
            buckets[f].append(i)
    return buckets


def _leaf_rows(leaf_nodes: Sequence[Sequence[int]], leaf_spine: Sequence[int],
               leaf_cap: Sequence[int]) -> np.ndarray | None:
    """FreeIndex.leaf_rows: None unless each leaf's nodes are the ids after the last
    node of the leaf before it."""
    first = 0
    for nodes in leaf_nodes:
        if list(nodes) != list(range(first, first + len(nodes))):
            return None
        first += len(nodes)
    return np.array([[nodes[0] if nodes else 0 for nodes in leaf_nodes],
                     [len(nodes) for nodes in leaf_nodes], list(leaf_spine), list(leaf_cap)],
                    dtype=np.int64).reshape(4, len(leaf_nodes))


def _histogram(free: Sequence[int], rows: Sequence[int], size: int) -> array.array[int]:
    """FreeIndex.hist of these free counts (`rows`: each node's row start)."""
    hist = array.array("q", bytes(8 * size))
    for f, at in zip(free, rows, strict=True):
        hist[at + f] += 1
    return hist


def _getter(items: Sequence[int]) -> Callable[[Sequence[int]], tuple[int, ...]]:
    """The items at these positions of a sequence, as a tuple (even of one or none)."""
    if len(items) == 1:
        only = items[0]
        return lambda values: (values[only],)
    if not items:
        return lambda values: ()
    return operator.itemgetter(*items)
