"""The placer's bookkeeping against the former code it replaced: a call's result built
from its node counts (manager._placements, a job on one node compared without building a
tuple) and the free index moved through Packer.take and Packer.release (FreeIndex.move
for jobs not latency-sensitive, FreeIndex.take and release for the others).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from voda.core.model import Cluster, Job, JobPlacement, Node, Placement
from voda.core.placement.manager import PlacementSettings, _placements
from voda.core.placement.packer import NodeCounts, Packer
from voda.core.placement.topology import FreeIndex, Topology

NAMES = [f"n{i}" for i in range(6)]
COUNTS = st.dictionaries(st.integers(0, 5), st.integers(1, 3), min_size=1, max_size=3)
SHARDS = st.lists(st.tuples(st.sampled_from(NAMES), st.integers(0, 3)), min_size=1,
                  max_size=3)


def former_placements(placed: Mapping[str, NodeCounts], names: Sequence[str],
                      previous: Placement) -> dict[str, JobPlacement]:
    """manager._placements as it was (the reference)."""
    result: dict[str, JobPlacement] = {}
    before_of = previous.get
    for name, counts in placed.items():
        if len(counts) == 1:
            shards = tuple([(names[i], c) for i, c in counts.items()])
        else:
            shards = tuple([(names[i], counts[i]) for i in sorted(counts)])
        before = before_of(name)
        result[name] = before if (before is not None and type(before) is tuple
                                  and before == shards) else shards
    return result


@st.composite
def calls(draw: st.DrawFn) -> tuple[dict[str, NodeCounts], Placement]:
    """Node counts per job and a previous placement: often the same shards (as tuples, or
    lists, or a list of shards), else other ones, or none."""
    placed = draw(st.dictionaries(st.sampled_from("abcdefgh"), COUNTS, min_size=1))
    previous: dict[str, JobPlacement] = {}
    for name, counts in placed.items():
        same = [(NAMES[i], counts[i]) for i in sorted(counts)]
        kind = draw(st.sampled_from(("tuple", "tuple", "lists", "list", "other", "none")))
        if kind == "tuple":
            previous[name] = tuple(same)
        elif kind == "lists":
            previous[name] = tuple([list(shard) for shard in same])  # type: ignore[misc]
        elif kind == "list":
            previous[name] = same  # type: ignore[assignment]
        elif kind == "other":
            previous[name] = tuple(draw(SHARDS))
    return placed, previous


@settings(max_examples=300, deadline=None)
@given(call=calls())
def test_the_result_is_built_as_before(call: tuple[dict[str, NodeCounts], Placement]) -> None:
    placed, previous = call
    reference = former_placements(placed, NAMES, previous)
    result = _placements(placed, NAMES, previous)
    assert result == reference
    for name, shards in result.items():  # the previous tuple itself where it is kept
        assert (shards is previous.get(name)) == (reference[name] is previous.get(name))


def index_state(ix: FreeIndex) -> tuple:
    return (ix.free, ix.buckets, list(ix.hist), list(ix.free_array), ix.leaf_free,
            ix.spine_free, ix.sensitive, ix.leaf_version, ix.leaf_changes)


@settings(max_examples=150, deadline=None)
@given(moves=st.lists(st.tuples(st.booleans(), st.booleans(), COUNTS), max_size=12))
def test_taking_and_releasing_moves_the_index_as_before(
    moves: list[tuple[bool, bool, NodeCounts]],
) -> None:
    """Each move takes counts (or releases what an earlier take took) for a job that is
    latency-sensitive or not, through the Packer and through FreeIndex.take and release
    one node at a time (the former Packer.take and release)."""
    cluster = Cluster(tuple(Node(name, 8, leaf=f"l{i // 2}", spine=f"s{i // 4}")
                            for i, name in enumerate(NAMES)))
    packer = Packer(FreeIndex(cluster.nodes, Topology.of(cluster)), PlacementSettings())
    reference = FreeIndex(cluster.nodes, Topology.of(cluster))
    taken: list[tuple[Job, NodeCounts]] = []
    for sensitive, release, counts in moves:
        if release and taken:
            job, counts = taken.pop()
            packer.release(job, counts)
            for i, c in counts.items():
                reference.release(i, c, job.latency_sensitive)
        elif all(packer.ix.free[i] >= c for i, c in counts.items()):
            job = Job("j", latency_sensitive=sensitive)
            packer.take(job, counts)
            for i, c in counts.items():
                reference.take(i, c, job.latency_sensitive)
            taken.append((job, counts))
        assert index_state(packer.ix) == index_state(reference)
