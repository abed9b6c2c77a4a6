"""First fit's test of a kept placement, with what it read of the placement's nodes kept
from one call to the next, says what the plain test (`_keeps_whole`) says, and leaves the
same room free."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from voda.core.model import Cluster, Node
from voda.core.placement.base import node_maps
from voda.core.placement.first_fit import _keeps_whole, _keeps_whole_as_before, _last_shapes

CLUSTERS = [
    Cluster(tuple(Node(f"n{i}", 4, "v100" if i % 3 else "t4") for i in range(6))),
    Cluster(tuple(Node(f"n{i}", 2 + i % 3, "v100") for i in range(5))),
]
NAMES = ["n0", "n1", "n2", "n3", "n4", "n5", "gone"]


@st.composite
def placements(draw: st.DrawFn) -> tuple:
    """Mostly a placement first fit keeps (nodes in order, counts of at least 1), else
    anything."""
    if draw(st.integers(0, 3)) == 0:
        return tuple(draw(st.lists(st.tuples(st.sampled_from(NAMES), st.integers(-1, 4)),
                                   min_size=2, max_size=4)))
    nodes = sorted(draw(st.sets(st.sampled_from(NAMES[:-1]), min_size=2, max_size=4)))
    return tuple((node, draw(st.integers(1, 4))) for node in nodes)


@settings(max_examples=400, deadline=None)
@given(cluster=st.sampled_from(CLUSTERS), before=placements(), more=st.integers(-1, 1),
       gpu_type=st.sampled_from([None, "v100", "t4"]),
       room=st.lists(st.integers(0, 8), min_size=7, max_size=7),
       calls=st.integers(1, 3), switch=st.booleans())
def test_the_kept_shapes_say_what_the_plain_test_says(
        cluster: Cluster, before: tuple, more: int, gpu_type: str | None, room: list[int],
        calls: int, switch: bool) -> None:
    gpus = sum(c for _, c in before) + more
    maps = node_maps(cluster)
    for call in range(calls):
        if switch and call == calls - 1:  # the same tuple, read on another cluster
            cluster = CLUSTERS[1] if cluster is CLUSTERS[0] else CLUSTERS[0]
            maps = node_maps(cluster)
        free = {name: min(r, maps.capacity[name]) for name, r in zip(NAMES, room, strict=True)
                if name in maps.capacity}
        plain, fast = dict(free), dict(free)
        shapes: dict = {}
        expected = _keeps_whole(before, gpus, gpu_type, plain, maps)
        assert _keeps_whole_as_before(before, gpus, gpu_type, fast, maps, shapes) == expected
        assert fast == plain
        _last_shapes[:] = [shapes]  # as first_fit hands them on
