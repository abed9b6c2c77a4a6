"""Where the pod scheduler puts gangs and pods, and why it leaves them Pending."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.pod_builders import gang_of, make_nodes, make_pod, snapshot_of
from voda.podsched.config import SchedulerConfig
from voda.podsched.decide import Planner, schedule, topology_order
from voda.podsched.model import Decision, Gang, Hints, Outcome, Strategy

CONFIG = SchedulerConfig()


def pods(count: int, gpus: int, prefix: str = "w") -> list:
    return [make_pod(f"{prefix}-{i}").gpus(gpus).obj() for i in range(count)]


def nodes_of(decision: Decision) -> list[str]:
    return [b.node for b in decision.bindings]


def leaf(node: str) -> str:
    return node.rsplit("-", 1)[0]


def one(decisions: list[Decision]) -> Decision:
    assert len(decisions) == 1, decisions
    return decisions[0]


# ----- domain choice by size -------------------------------------------------------
EMPTY = make_nodes().spines(2).leaves(4).nodes(4, gpus=8).obj()


@pytest.mark.parametrize(
    ("count", "gpus", "level", "span_nodes", "span_leaves"),
    [
        (1, 4, "node", 1, 1),
        (4, 2, "node", 1, 1),
        (2, 8, "leaf", 2, 1),
        (4, 8, "leaf", 4, 1),
        (8, 8, "spine", 8, 2),
        (16, 8, "spine", 16, 4),
    ],
    ids=[
        "half a node's worth goes on one node",
        "a node's worth of small pods goes on one node",
        "two nodes' worth goes on two nodes of one leaf",
        "a leaf's worth takes a whole leaf",
        "eight nodes' worth takes two leaves of one spine",
        "sixteen nodes' worth takes four leaves of one spine",
    ],
)
def test_the_domain_follows_the_size(count, gpus, level, span_nodes, span_leaves) -> None:
    gang = gang_of(pods(count, gpus), gpu_count=count * gpus)
    decision = one(schedule([gang], snapshot_of(EMPTY), CONFIG))
    assert decision.outcome == Outcome.BOUND
    assert decision.level == level
    assert len(set(nodes_of(decision))) == span_nodes
    assert len({leaf(n) for n in nodes_of(decision)}) == span_leaves
    assert len({n.split("-")[0] for n in nodes_of(decision)}) == 1


def test_wide_gangs_take_adjacent_leaves_not_the_largest_ones() -> None:
    # Leaves s0-l0..l4: l0 full, l2 missing a node; the fewest-leaves rule alone would
    # take l1 and l3 (not adjacent); adjacency takes l3 and l4.
    nodes = make_nodes().spines(1).leaves(5).nodes(4, gpus=8).obj()
    busy = [make_pod(f"busy-{i}").gpus(8).on(f"s0-l0-n{i}").obj() for i in range(4)]
    busy.append(make_pod("busy-l2").gpus(8).on("s0-l2-n0").obj())
    decision = one(schedule([gang_of(pods(8, 8), gpu_count=64)], snapshot_of(nodes, busy),
                            CONFIG))
    assert sorted({leaf(n) for n in nodes_of(decision)}) == ["s0-l3", "s0-l4"]


def test_adjacent_means_natural_order_of_leaf_names() -> None:
    nodes = make_nodes().spines(1).leaves(12).nodes(1, gpus=8).obj()
    ordered = topology_order(reversed(nodes))
    assert [n.leaf for n in ordered][:3] == ["s0-l0", "s0-l1", "s0-l2"]
    assert [n.leaf for n in ordered][-2:] == ["s0-l10", "s0-l11"]


def test_one_node_is_the_tightest_that_fits() -> None:
    busy = [make_pod("a").gpus(6).on("s0-l1-n2").obj(), make_pod("b").gpus(3).on("s0-l0-n0").obj()]
    decision = one(schedule([gang_of(pods(1, 2), gpu_count=2)], snapshot_of(EMPTY, busy), CONFIG))
    assert nodes_of(decision) == ["s0-l1-n2"]


# ----- strategies and hints ---------------------------------------------------------
def test_distributed_puts_each_replica_on_its_own_node() -> None:
    nodes = make_nodes().spines(1).leaves(1).nodes(4, gpus=8).obj()
    gang = gang_of(pods(4, 1), gpu_count=4, strategy=Strategy.DISTRIBUTED)
    assert len(set(nodes_of(one(schedule([gang], snapshot_of(nodes), CONFIG))))) == 4


def test_distributed_replicas_without_a_gang_also_spread() -> None:
    nodes = make_nodes().spines(1).leaves(1).nodes(4, gpus=8).obj()
    gang = gang_of(pods(4, 1), strategy=Strategy.DISTRIBUTED)
    decisions = schedule([gang], snapshot_of(nodes), CONFIG)
    bound = [b.node for d in decisions for b in d.bindings]
    assert len(set(bound)) == 4


def test_balanced_puts_at_most_half_a_node_on_each_node() -> None:
    gang = gang_of(pods(8, 1), gpu_count=8, strategy=Strategy.BALANCED)
    decision = one(schedule([gang], snapshot_of(EMPTY), CONFIG))
    per_node = {n: nodes_of(decision).count(n) for n in nodes_of(decision)}
    assert max(per_node.values()) <= 4 and len(per_node) == 2


def test_the_preferred_domain_wins_when_it_has_room() -> None:
    gang = gang_of(pods(2, 8), gpu_count=16, preferred_domain="s1-l2")
    assert {leaf(n) for n in nodes_of(one(schedule([gang], snapshot_of(EMPTY), CONFIG)))} == {
        "s1-l2"}


def test_latency_sensitive_pods_avoid_each_other() -> None:
    nodes = make_nodes().spines(1).leaves(1).nodes(2, gpus=8).obj()
    snapshot = snapshot_of(nodes, [make_pod("svc").gpus(1).on("s0-l0-n0").obj()],
                           sensitive={"s0-l0-n0": 1})
    gang = gang_of(pods(1, 1), gpu_count=1, latency_sensitive=True)
    assert nodes_of(one(schedule([gang], snapshot, CONFIG))) == ["s0-l0-n1"]


def test_bandwidth_above_the_leaf_uplink_keeps_a_spreading_gang_in_one_leaf() -> None:
    nodes = make_nodes().spines(1).leaves(2).nodes(4, gpus=8).obj()
    spread = gang_of(pods(4, 1), gpu_count=4, strategy=Strategy.DISTRIBUTED)
    assert len({leaf(n) for n in nodes_of(one(schedule([spread], snapshot_of(nodes),
                                                        CONFIG)))}) == 2
    fast = replace(spread, hints=replace(spread.hints, network_bandwidth=400.0))
    decision = one(schedule([fast], snapshot_of(nodes), CONFIG))
    assert len({leaf(n) for n in nodes_of(decision)}) == 1
    assert len(set(nodes_of(decision))) == 4


# ----- Kueue-style topology levels --------------------------------------------------
def test_a_required_level_keeps_the_gang_in_one_domain_or_pending() -> None:
    nodes = make_nodes().spines(1).leaves(2).nodes(4, gpus=8).obj()
    busy = [make_pod("b").gpus(8).on("s0-l0-n0").obj(), make_pod("c").gpus(8).on("s0-l1-n0").obj()]
    gang = gang_of(pods(4, 8), gpu_count=32, required_topology="voda.io/leaf")
    decision = one(schedule([gang], snapshot_of(nodes, busy), CONFIG))
    assert decision.outcome == Outcome.UNSCHEDULABLE and not decision.bindings
    assert "require one voda.io/leaf domain" in decision.reason
    assert "the most is 3" in decision.reason
    # Without the requirement it spans the two leaves.
    loose = replace(gang, hints=Hints(gpu_count=32))
    assert one(schedule([loose], snapshot_of(nodes, busy), CONFIG)).level == "spine"


def test_a_required_level_can_be_any_node_label() -> None:
    nodes = tuple(replace(n, labels={**n.labels, "zone": "a" if n.leaf == "s0-l0" else "b"})
                  for n in make_nodes().spines(1).leaves(2).nodes(2, gpus=8).obj())
    busy = [make_pod("b").gpus(8).on("s0-l0-n0").obj()]
    gang = gang_of(pods(2, 8), gpu_count=16, required_topology="zone")
    assert {leaf(n) for n in nodes_of(one(schedule([gang], snapshot_of(nodes, busy),
                                                     CONFIG)))} == {"s0-l1"}


def test_a_preferred_level_falls_back_to_spanning() -> None:
    nodes = make_nodes().spines(1).leaves(2).nodes(2, gpus=8).obj()
    gang = gang_of(pods(3, 8), gpu_count=24, preferred_topology="voda.io/leaf")
    decision = one(schedule([gang], snapshot_of(nodes), CONFIG))
    assert decision.outcome == Outcome.BOUND and decision.level == "spine"


# ----- gangs -------------------------------------------------------------------------
def test_a_gang_that_cannot_fit_binds_nothing_and_says_why() -> None:
    nodes = make_nodes().spines(1).leaves(1).nodes(2, gpus=8).obj()
    decision = one(schedule([gang_of(pods(3, 8), gpu_count=24)], snapshot_of(nodes), CONFIG))
    assert decision.outcome == Outcome.UNSCHEDULABLE and not decision.bindings
    assert "room for 2" in decision.reason


def test_an_incomplete_gang_waits_holding_nothing() -> None:
    decisions = schedule([gang_of(pods(3, 2), gpu_count=8)], snapshot_of(EMPTY), CONFIG)
    assert one(decisions).outcome == Outcome.WAITING
    assert "6 so far" in decisions[0].reason


def test_a_gang_counts_the_gpus_its_bound_pods_hold() -> None:
    gang = gang_of(pods(1, 2), gpu_count=8, members={"s0-l0-n0": 3}, member_gpus=6)
    assert one(schedule([gang], snapshot_of(EMPTY), CONFIG)).outcome == Outcome.BOUND


def test_invalid_annotations_leave_the_gang_pending_naming_them() -> None:
    gang = Gang("default/Job/x", tuple(pods(1, 1)),
                hint_errors=("voda.io/gpu-count: must be an integer in [1, 65536], got 'x'",))
    decision = one(schedule([gang], snapshot_of(EMPTY), CONFIG))
    assert decision.outcome == Outcome.INVALID and "voda.io/gpu-count" in decision.reason


def test_gangs_do_not_share_gpus_within_a_cycle() -> None:
    nodes = make_nodes().spines(1).leaves(1).nodes(2, gpus=8).obj()
    first = gang_of(pods(2, 8, "a"), key="ns/Job/a", gpu_count=16)
    second = gang_of(pods(1, 8, "b"), key="ns/Job/b", gpu_count=8)
    decisions = schedule([first, second], snapshot_of(nodes), CONFIG)
    assert [d.outcome for d in decisions] == [Outcome.BOUND, Outcome.UNSCHEDULABLE]


def test_pods_without_a_gang_bind_what_fits() -> None:
    nodes = make_nodes().spines(1).leaves(1).nodes(2, gpus=8).obj()
    decisions = schedule([gang_of(pods(3, 8))], snapshot_of(nodes), CONFIG)
    assert [d.outcome for d in decisions] == [Outcome.BOUND, Outcome.BOUND,
                                               Outcome.UNSCHEDULABLE]
    assert decisions[-1].gang.pending[0].name == "w-2"


# ----- filters in the reasons ----------------------------------------------------------
def test_the_reason_counts_what_the_filters_left_out() -> None:
    nodes = (make_nodes().spines(1).leaves(1).nodes(4, gpus=8)
             .change("s0-l0-n0", ready=False).change("s0-l0-n1", unschedulable=True)
             .tainted("s0-l0-n2", "dedicated", "infer").obj())
    busy = [make_pod("b").gpus(8).on("s0-l0-n3").obj()]
    decision = one(schedule([gang_of(pods(1, 1), gpu_count=1)], snapshot_of(nodes, busy),
                            CONFIG))
    assert decision.outcome == Outcome.UNSCHEDULABLE
    for part in ("0/4 nodes are available", "1 Insufficient nvidia.com/gpu",
                 "1 node(s) were not ready", "1 node(s) were unschedulable",
                 "1 node(s) had untolerated taint {dedicated: infer}"):
        assert part in decision.reason


def test_a_nodes_reason_does_not_depend_on_the_order_of_a_gangs_pods() -> None:
    # One pod tolerates the taint but not the selector, the other neither: the node's
    # reason is the first filter it fails for the first pod checked, whatever the order the
    # gang lists them in, and a view the Planner cached for one order serves the other.
    nodes = (make_nodes().spines(1).leaves(1).nodes(1, gpus=8)
             .tainted("s0-l0-n0", "dedicated", "infer").obj())
    tolerant = make_pod("a").gpus(1).selector(pool="other").tolerates(
        "dedicated", "infer", "NoSchedule").obj()
    plain = make_pod("b").gpus(1).selector(pool="other").obj()
    forward = gang_of([tolerant, plain], key="default/Job/f", gpu_count=2)
    backward = gang_of([plain, tolerant], key="default/Job/b", gpu_count=2)
    snapshot = snapshot_of(nodes)
    reasons = {one(schedule([g], snapshot, CONFIG)).reason.split(": ", 1)[1]
               for g in (forward, backward)}
    assert len(reasons) == 1
    planner = Planner()
    planner.schedule([forward], snapshot, CONFIG)
    assert planner.schedule([backward], snapshot, CONFIG) == schedule([backward], snapshot, CONFIG)


def test_a_toleration_and_a_selector_open_and_close_nodes() -> None:
    nodes = (make_nodes().spines(1).leaves(1).nodes(2, gpus=8)
             .tainted("s0-l0-n1", "dedicated", "infer").obj())
    pod = make_pod("p").gpus(1).tolerates("dedicated", "infer", "NoSchedule").selector(
        **{"kubernetes.io/hostname": "s0-l0-n1"}).obj()
    assert nodes_of(one(schedule([gang_of([pod])], snapshot_of(nodes), CONFIG))) == [
        "s0-l0-n1"]


# ----- recovery -----------------------------------------------------------------------
def test_a_replacement_lands_in_the_domain_of_its_gang() -> None:
    # Three pods of the gang run in leaf s1-l1; the replacement goes there, not to the
    # tighter spot elsewhere.
    busy = [make_pod("x").gpus(7).on("s0-l0-n0").obj()]
    gang = replace(gang_of(pods(1, 1, "r"), gpu_count=4,
                           members={"s1-l1-n0": 1, "s1-l1-n1": 1, "s1-l1-n2": 1}, member_gpus=3),
                   recovering=True)
    snapshot = snapshot_of(EMPTY, busy + [make_pod(f"m{i}").gpus(1).on(f"s1-l1-n{i}").obj()
                                          for i in range(3)])
    assert leaf(nodes_of(one(schedule([gang], snapshot, CONFIG)))[0]) == "s1-l1"


def test_a_replacement_goes_to_the_nearest_domain_when_its_own_is_full() -> None:
    # Its leaf s1-l0 is full; s0-l0-n0 would fit it more tightly, but s1-l1 is nearer.
    nodes = make_nodes().spines(2).leaves(2).nodes(1, gpus=8).obj()
    busy = [make_pod("full").gpus(8).on("s1-l0-n0").obj(),
            make_pod("half").gpus(4).on("s0-l0-n0").obj()]
    gang = replace(gang_of(pods(1, 4, "r"), gpu_count=8, members={"s1-l0-n0": 1},
                           member_gpus=4), recovering=True)
    node = nodes_of(one(schedule([gang], snapshot_of(nodes, busy), CONFIG)))[0]
    assert node == "s1-l1-n0"
    # With no pod of its own anywhere, the tight fit wins.
    fresh = gang_of(pods(1, 4, "r"), gpu_count=4)
    assert nodes_of(one(schedule([fresh], snapshot_of(nodes, busy), CONFIG))) == ["s0-l0-n0"]


def test_recovering_gangs_go_first() -> None:
    nodes = make_nodes().spines(1).leaves(1).nodes(1, gpus=8).obj()
    new = gang_of([make_pod("a-0").gpus(8).created("2026-01-01T00:00:00Z").obj()],
                  key="ns/Job/a", gpu_count=8)
    old = replace(gang_of([make_pod("b-0").gpus(8).created("2026-01-02T00:00:00Z").obj()],
                          key="ns/Job/b", gpu_count=16, members={"s0-l0-n0": 0},
                          member_gpus=8), recovering=True)
    decisions = schedule([new, old], snapshot_of(nodes), CONFIG)
    assert decisions[0].gang.key == "ns/Job/b" and decisions[0].outcome == Outcome.BOUND
