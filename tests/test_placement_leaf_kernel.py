"""The compiled kernels of the packer (voda.core.placement.leaf_kernel) against the Python
code they stand in for, on random clusters of many leaves (hypothesis, the packers of
tests/test_placement_fast_paths.py):

- the leaves `_best_leaf` ties (`_compiled_winners`) against the leaf table's
  (`_table_winners`), and the tightest of them (`tightest`) against `_tightest_of`;
- `_best_node` compiled against its Python loop;
- the first leaves of a spread request (`_compiled_spread_first`) against
  `_spread_order`, and `_spread` with them and its first turn read node by node
  (`_first_turn`) against the columns built leaf by leaf;
- the index's histogram and array of free GPUs against its free counts;
- whole placement calls like bench/place.py's resized ones with every kernel and fast path
  on and off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_placement_afresh import resized_call
from tests.test_placement_fast_paths import FAST_PATH_SETTINGS, fewest_nodes, packers
from voda.core.model import Cluster, Node
from voda.core.placement import leaf_kernel
from voda.core.placement import packer as packer_module
from voda.core.placement.packer import Ask, Packer
from voda.core.placement.topology import FreeIndex, Topology

T = TypeVar("T")
KERNEL_FLAGS = ("COMPILED_WINNERS", "COMPILED_BEST_NODE", "COMPILED_SPREAD_FIRST",
                "FIRST_TURN_TOP_NODES")


@contextmanager
def plain_paths() -> Iterator[None]:
    """Every kernel and fast path of this change off: the reference code."""
    with mock.patch.multiple(packer_module, **dict.fromkeys(KERNEL_FLAGS, False)):
        yield


def index_agrees(ix: FreeIndex) -> None:
    stride = ix.max_cap + 1
    assert list(ix.free_array) == ix.free
    hist = np.frombuffer(ix.hist, dtype=np.int64).reshape(len(ix.leaf_names), stride)
    for leaf, nodes in enumerate(ix.leaf_nodes):
        assert hist[leaf].tolist() == [sum(1 for i in nodes if ix.free[i] == f)
                                       for f in range(stride)]
    for f in range(1, stride):
        assert ix.buckets[f] == [i for i, free in enumerate(ix.free) if free == f]
    assert ix.buckets[0] == []


def take_somewhere(packer: Packer, ask: Ask) -> None:
    """Change the free GPUs between asks: the request placed as the packer would."""
    if packer.ix.total_free >= ask.k:
        packer.take(ask.job, packer.place(ask))


@FAST_PATH_SETTINGS
@given(case=packers())
def test_the_compiled_winners_are_the_leaf_table_s(case: tuple[Packer, list[Ask]]) -> None:
    packer, asks = case
    kernel = packer_module._leaf_kernel()
    assert kernel is not None
    ix = packer.ix
    for ask in asks:
        index_agrees(ix)
        for attempt in (ask, ask.relaxed()):
            cap = min(attempt.node_cap, ix.max_cap)
            fewest = fewest_nodes(packer, attempt)
            table = packer._leaf_table(cap)
            assert table is not None
            compiled = packer._compiled_winners(kernel, attempt, cap, fewest)
            reference = packer._table_winners(table, attempt, fewest)
            if reference is None or not len(reference):
                assert compiled is None
                continue
            assert compiled is not None and compiled.tolist() == reference.tolist()
            free = packer._leaf_free(compiled)
            assert kernel.tightest(packer._kernel_arrays()[1], ix.max_cap + 1, compiled) == (
                packer_module._tightest_of(compiled, free))
            assert packer._best_leaf(attempt) == _without_kernels(packer._best_leaf, attempt)
        take_somewhere(packer, ask)


@FAST_PATH_SETTINGS
@given(case=packers())
def test_the_compiled_best_node_is_the_python_one(case: tuple[Packer, list[Ask]]) -> None:
    packer, asks = case
    for ask in asks:
        for attempt in attempts(ask):
            assert packer._best_node(attempt) == _without_kernels(packer._best_node, attempt)
        take_somewhere(packer, ask)
    index_agrees(packer.ix)


@FAST_PATH_SETTINGS
@given(case=packers(alike=True))
def test_the_first_spread_leaves_and_turn_as_leaf_by_leaf(case: tuple[Packer, list[Ask]]) -> None:
    packer, asks = case
    for attempt in (attempt for ask in asks for attempt in attempts(ask) if attempt.spread):
        first = packer._compiled_spread_first(attempt)
        assert first is None or first == list(packer._spread_order(attempt))[: attempt.k]
        got = packer._spread(attempt)
        expected = _without_kernels(packer._spread, attempt)
        assert got == expected
        assert got is None or list(got.items()) == list(expected.items())  # (its order)
        if got is not None:
            packer.take(attempt.job, got)


def attempts(ask: Ask) -> tuple[Ask, ...]:
    """The request and its relaxed forms (Packer.place's attempts, the domain kept)."""
    return ask, ask.relaxed(), ask.relaxed(keep_sensitive=True)


def _without_kernels(method: Callable[[Ask], T], ask: Ask) -> T:
    with plain_paths():
        return method(ask)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_placement_calls_are_the_same_with_the_kernels_and_without(seed: int) -> None:
    placer, allocation, jobs, cluster, previous = resized_call(seed)
    with plain_paths():
        expected = placer(allocation, jobs, cluster, previous)
    assert placer(allocation, jobs, cluster, previous) == expected


def test_leaves_of_scattered_node_ids_keep_the_python_paths() -> None:
    """The compiled best node reads a leaf's nodes as consecutive ids; where they are not,
    the index has no leaf rows and the Python loop runs (the same answers)."""
    nodes = tuple(Node(f"n{i}", 8, leaf=f"l{i % 64}", spine=f"s{i % 4}") for i in range(256))
    cluster = Cluster(nodes)
    ix = FreeIndex.of(cluster.nodes, Topology.of(cluster))
    assert ix.leaf_rows is None
    packed = FreeIndex.of(*_consecutive(256))
    assert packed.leaf_rows is not None
    assert packed.leaf_rows[:, 1].tolist() == [4, 4, 0, 32]  # first node, nodes, spine, GPUs


def _consecutive(count: int) -> tuple[tuple[Node, ...], Topology]:
    cluster = Cluster(tuple(Node(f"n{i}", 8, leaf=f"l{i // 4}", spine=f"s{i // 64}")
                            for i in range(count)))
    return cluster.nodes, Topology.of(cluster)


def test_the_histogram_follows_takes_releases_and_set_free() -> None:
    ix = FreeIndex.of(*_consecutive(8))
    ix.take(0, 3)
    ix.take(5, 8)
    index_agrees(ix)
    ix.release(5, 2)
    index_agrees(ix)
    ix.set_free([0, 1, 2, 3, 4, 5, 6, 7])
    index_agrees(ix)
    twin = ix.copy()
    twin.take(7, 7)
    index_agrees(twin)
    index_agrees(ix)
    assert list(ix.nodes_with_free(0)) == [0, *range(1, 8)]
    assert list(twin.nodes_with_free(0)) == [0, 7, *range(1, 7)]
    assert leaf_kernel._parts(np.frombuffer(ix.hist, dtype=np.int64), 0, 9, 6, 8) == 3
