"""RequestPacker: one request at a time on free units, never spilling over a node or a scope."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voda.core.model import Job, Node
from voda.core.placement.manager import PlacementSettings
from voda.core.placement.request import CLUSTER, LEAF, NODE, SPINE, RequestPacker


def grid(spines: int, leaves: int, nodes: int, units: int = 4) -> list[Node]:
    return [Node(f"s{s}-l{l_}-n{n}", units, leaf=f"s{s}-l{l_}", spine=f"s{s}")
            for s in range(spines) for l_ in range(leaves) for n in range(nodes)]


def test_levels_by_size() -> None:
    packer = RequestPacker(grid(2, 2, 2))
    job = Job("j")
    assert packer.place(job, 3).level == NODE
    assert packer.place(job, 8).level == LEAF
    assert packer.place(job, 16).level == SPINE
    assert packer.place(job, 20).level == CLUSTER
    assert packer.place(job, 33) is None


def test_within_restricts_every_attempt_and_set_free_updates_the_view() -> None:
    packer = RequestPacker(grid(1, 2, 2))
    job = Job("j")
    assert set(packer.place(job, 4, within=["s0-l1"]).counts) <= {"s0-l1-n0", "s0-l1-n1"}
    packer.set_free("s0-l1-n0", 0)
    packer.set_free("s0-l1-n1", 1)
    assert packer.place(job, 2, within=["s0-l1"]) is None
    assert packer.free("s0-l1-n1") == 1 and packer.total_free == 9


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    caps=st.lists(st.integers(0, 8), min_size=1, max_size=12),
    used=st.lists(st.integers(0, 8), min_size=12, max_size=12),
    leaf_of=st.lists(st.integers(0, 3), min_size=12, max_size=12),
    k=st.integers(1, 40),
    strategy=st.sampled_from(["consolidated", "distributed", "balanced"]),
    sensitive=st.booleans(),
    scope=st.sampled_from([None, ["l0"], ["s1"], ["l2", "l3"]]),
    limits=st.sampled_from([PlacementSettings(), PlacementSettings(max_nodes_per_leaf=1,
                                                                     max_gpus_per_leaf=3)]),
)
def test_a_request_gets_exactly_k_units_of_free_room_or_nothing(
        caps, used, leaf_of, k, strategy, sensitive, scope, limits) -> None:
    nodes = [Node(f"n{i}", c, leaf=f"l{leaf_of[i]}", spine=f"s{leaf_of[i] % 2}")
             for i, c in enumerate(caps)]
    taken = {n.name: min(used[i], n.gpus) for i, n in enumerate(nodes)}
    packer = RequestPacker(nodes, taken, limits)
    free = {n.name: n.gpus - taken[n.name] for n in nodes}
    job = Job("j", placement_strategy=strategy, latency_sensitive=sensitive)
    packed = packer.place(job, k, within=scope)
    allowed = {n.name for n in nodes if scope is None or n.leaf in scope or n.spine in scope}
    fits = sum(f for name, f in free.items() if name in allowed) >= k
    assert (packed is not None) == fits  # never refused when the room is there
    if packed is None:
        return
    assert sum(packed.counts.values()) == k
    for name, count in packed.counts.items():
        assert 0 < count <= free[name] and name in allowed
