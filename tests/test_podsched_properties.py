"""Invariants of the pod scheduler's cycle on generated clusters, pods and gangs.

Whatever the input: no node goes over any resource, every binding passes the
filters of its pod, a gang binds all its pending pods or none, waiting and
invalid gangs bind nothing, a required topology level holds, and the cycle is
deterministic; no node gets two pods of one host port, and no placed pod shares a
node with a pod its required anti-affinity selects, or whose anti-affinity selects it.
Preemption evicts only lower-priority pods, makes room, and evicts none it need not.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.pod_builders import make_pod, snapshot_of
from voda.core.placement.manager import PlacementSettings
from voda.podsched import filters, preempt
from voda.podsched.config import SchedulerConfig
from voda.podsched.decide import Planner, schedule, topology_order
from voda.podsched.model import (
    CPU,
    GPU,
    PODS,
    Gang,
    Hints,
    NodeState,
    Outcome,
    Pod,
    PodTerm,
    Requirement,
    Snapshot,
    Strategy,
    Taint,
)

PROPERTY_SETTINGS = settings(max_examples=80, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])
LEVEL_LABELS = ("voda.io/leaf", "voda.io/spine", "zone")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[NodeState, ...]:
    spines = draw(st.integers(1, 2))
    leaves = draw(st.integers(1, 4))
    nodes = []
    for i in range(draw(st.integers(1, 10))):
        leaf_id = draw(st.integers(0, leaves - 1))
        leaf, spine = f"l{leaf_id}", f"s{leaf_id % spines}"
        labels = {"voda.io/leaf": leaf, "voda.io/spine": spine,
                  "kubernetes.io/hostname": f"n{i}", "pool": draw(st.sampled_from("ab"))}
        if draw(st.booleans()):
            labels["zone"] = draw(st.sampled_from(["z1", "z2"]))
        taints = (Taint("dedicated", "infer"),) if draw(st.integers(0, 5)) == 0 else ()
        nodes.append(NodeState(
            name=f"n{i}",
            allocatable={GPU: draw(st.sampled_from([0, 1, 2, 4, 8, 8])),
                         CPU: draw(st.sampled_from([4000, 16000])), PODS: draw(st.integers(1, 8))},
            labels=labels, taints=taints,
            ready=draw(st.integers(0, 6)) > 0, unschedulable=draw(st.integers(0, 6)) == 0,
            leaf=leaf, spine=spine,
        ))
    return topology_order(nodes)


@st.composite
def bound_pods(draw: st.DrawFn, nodes: tuple[NodeState, ...]) -> list[Pod]:
    """Pods already on the nodes, never over a node's resources."""
    out = []
    for node in nodes:
        free = dict(node.allocatable)
        for j in range(draw(st.integers(0, 3))):
            gpus = draw(st.integers(0, max(0, free[GPU])))
            cpu = draw(st.sampled_from([0, 1000, 2000]))
            if free[PODS] < 1 or cpu > free[CPU]:
                break
            free[GPU] -= gpus
            free[CPU] -= cpu
            free[PODS] -= 1
            out.append(neighbourly(draw, make_pod(f"bound-{node.name}-{j}").requests(
                **{GPU: gpus, CPU: cpu}).on(node.name).obj()))
    return out


def neighbourly(draw: st.DrawFn, pod: Pod, app: str | None = None) -> Pod:
    """The pod with, sometimes, a label, a host port, an anti-affinity by hostname."""
    app = app or draw(st.sampled_from(["a", "b"]))
    ports = frozenset({("0.0.0.0", "TCP", 80)}) if draw(st.integers(0, 3)) == 0 else frozenset()
    avoid = draw(st.sampled_from([None, None, "a", app]))
    terms = (PodTerm((Requirement("app", "In", (avoid,)),), frozenset({"default"})),
             ) if avoid else ()
    return replace(pod, labels={"app": app}, host_ports=ports, anti_affinity=terms)


def with_neighbours(snapshot: Snapshot, bound: list[Pod], everyone: bool) -> Snapshot:
    neighbours: dict[str, list[Pod]] = {}
    for pod in bound:
        if everyone or pod.host_ports or pod.anti_affinity:
            neighbours.setdefault(pod.node, []).append(pod)
    return Snapshot(snapshot.nodes, snapshot.requested, snapshot.sensitive,
                    {n: tuple(p) for n, p in neighbours.items()}, everyone)


@st.composite
def gangs(draw: st.DrawFn) -> list[Gang]:
    out = []
    for g in range(draw(st.integers(1, 5))):
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        cpu = draw(st.sampled_from([0, 500, 4000]))
        selector = {"pool": draw(st.sampled_from("ab"))} if draw(st.booleans()) else {}
        count = draw(st.integers(1, 5))
        pods = []
        for i in range(count):
            builder = make_pod(f"g{g}-p{i}").requests(**{GPU: gpus, CPU: cpu}).selector(
                **selector)
            if draw(st.booleans()):
                builder = builder.tolerates("dedicated", "infer", "NoSchedule")
            pods.append(builder.obj())
        if draw(st.integers(0, 2)) == 0:  # one template: the same ports, labels, anti-affinity
            first = neighbourly(draw, pods[0], app=f"g{g}")
            pods = [replace(p, labels=first.labels, host_ports=first.host_ports,
                            anti_affinity=first.anti_affinity) for p in pods]
        is_gang = draw(st.booleans())
        gpu_count = draw(st.sampled_from([count * gpus, count * gpus + 2, max(1, gpus)]))
        hints = Hints(
            gpu_count=max(1, gpu_count) if is_gang else None,
            strategy=draw(st.sampled_from(list(Strategy))),
            preferred_domain=draw(st.sampled_from([None, "l0", "s1", "n0", "nowhere"])),
            network_bandwidth=draw(st.sampled_from([None, 10.0, 400.0])),
            latency_sensitive=draw(st.booleans()),
            required_topology=draw(st.sampled_from([None, *LEVEL_LABELS])),
            preferred_topology=draw(st.sampled_from([None, *LEVEL_LABELS])),
        )
        out.append(Gang(key=f"ns/Job/g{g}", pending=tuple(pods), hints=hints))
    return out


CONFIGS = st.sampled_from([
    SchedulerConfig(),
    SchedulerConfig(PlacementSettings(learn_layout=False, max_nodes_per_leaf=1,
                                      max_gpus_per_leaf=4)),
    SchedulerConfig(PlacementSettings(learn_layout=False, resource_weight=0.0,
                                      topology_weight=1.0, utilization_weight=0.0,
                                      history_weight=0.0, domain_performance={"l0": 1.0})),
])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Snapshot, list[Gang], SchedulerConfig]:
    nodes = draw(clusters())
    bound = draw(bound_pods(nodes))
    sensitive = {n.name: draw(st.integers(0, 1)) for n in nodes}
    gang_list = draw(gangs())
    # Every neighbour when a pending pod has anti-affinity (as the controller asks for).
    everyone = draw(st.booleans()) or any(p.anti_affinity for g in gang_list for p in g.pending)
    snapshot = with_neighbours(snapshot_of(nodes, bound, sensitive), bound, everyone)
    return snapshot, gang_list, draw(CONFIGS)


@PROPERTY_SETTINGS
@given(scenarios())
def test_no_node_goes_over_any_resource(scenario) -> None:
    snapshot, gang_list, config = scenario
    used = {n.name: Counter(snapshot.requested.get(n.name, {})) for n in snapshot.nodes}
    for decision in schedule(gang_list, snapshot, config):
        for binding in decision.bindings:
            used[binding.node].update(binding.pod.requests)
            used[binding.node][PODS] += 1
    for node in snapshot.nodes:
        for resource, amount in used[node.name].items():
            if amount > 0:
                assert amount <= node.allocatable.get(resource, 0), (node.name, resource)


@PROPERTY_SETTINGS
@given(scenarios())
def test_bindings_pass_the_filters_and_gangs_are_all_or_nothing(scenario) -> None:
    snapshot, gang_list, config = scenario
    decisions = schedule(gang_list, snapshot, config)
    assert decisions == schedule(gang_list, snapshot, config)  # deterministic
    nodes = {n.name: n for n in snapshot.nodes}
    bound_by_gang: dict[str, set[str]] = {}
    seen: set[str] = set()
    for decision in decisions:
        if decision.outcome != Outcome.BOUND:
            assert not decision.bindings
        for binding in decision.bindings:
            assert binding.pod.key not in seen
            seen.add(binding.pod.key)
            node = nodes[binding.node]
            assert filters.static_problem(binding.pod, node) is None
            bound_by_gang.setdefault(decision.gang.key, set()).add(binding.pod.key)
    for gang in gang_list:
        bound = bound_by_gang.get(gang.key, set())
        if gang.is_gang:
            assert bound in (set(), {p.key for p in gang.pending})
        level = gang.hints.required_topology
        if level is not None and bound:
            values = {nodes[b.node].labels.get(level) for d in decisions
                      for b in d.bindings if d.gang.key == gang.key}
            assert len(values) == 1 and None not in values


@PROPERTY_SETTINGS
@given(scenarios())
def test_placed_pods_respect_host_ports_and_anti_affinity(scenario) -> None:
    snapshot, gang_list, config = scenario
    on: dict[str, list[Pod]] = {n: list(p) for n, p in snapshot.neighbours.items()}
    placed: list[tuple[Pod, str]] = []
    for decision in schedule(gang_list, snapshot, config):
        for binding in decision.bindings:
            placed.append((binding.pod, binding.node))
            on.setdefault(binding.node, []).append(binding.pod)
    for pod, node in placed:
        others = [p for p in on[node] if p is not pod]
        for other in others:
            assert not filters.ports_conflict(pod.host_ports, other.host_ports), (pod, other)
            assert not any(filters.selects(t, other) for t in pod.anti_affinity), (pod, other)
            assert not any(filters.selects(t, pod) for t in other.anti_affinity), (pod, other)


@PROPERTY_SETTINGS
@given(scenarios())
def test_a_gang_that_fits_nowhere_still_leaves_the_others_placed(scenario) -> None:
    snapshot, gang_list, config = scenario
    impossible = Gang("ns/Job/huge", tuple(make_pod(f"huge-{i}").gpus(8).obj()
                                           for i in range(200)), Hints(gpu_count=1600))
    with_it = schedule([*gang_list, impossible], snapshot, config)
    huge = [d for d in with_it if d.gang.key == "ns/Job/huge"]
    assert huge and all(not d.bindings for d in huge)
    assert [d for d in with_it if d.gang.key != "ns/Job/huge"] == schedule(
        gang_list, snapshot, config)


@PROPERTY_SETTINGS
@given(scenarios(), gangs(), st.randoms(use_true_random=False))
def test_the_planner_decides_what_a_fresh_cycle_decides(scenario, later, rng) -> None:
    snapshot, first, config = scenario
    planner = Planner()
    decided = planner.schedule(first, snapshot, config)
    assert decided == schedule(first, snapshot, config)
    # The next snapshot, of the same nodes: the bindings counted, some pods gone.
    requested = {n: dict(r) for n, r in snapshot.requested.items()}
    for decision in decided:
        for binding in decision.bindings:
            taken = requested.setdefault(binding.node, {})
            for resource, amount in binding.pod.requests.items():
                taken[resource] = taken.get(resource, 0) + amount
            taken[PODS] = taken.get(PODS, 0) + 1
    for node in list(requested):
        if rng.random() < 0.3:
            requested[node] = {}
    sensitive = {n: rng.randint(0, 1) for n in requested}
    neighbours = {n: list(p) for n, p in snapshot.neighbours.items()}
    for decision in decided:
        for binding in decision.bindings:
            pod = binding.pod
            if snapshot.everyone or pod.host_ports or pod.anti_affinity:
                neighbours.setdefault(binding.node, []).append(pod)
    for node in requested:
        if not requested[node]:
            neighbours.pop(node, None)
    later_snapshot = Snapshot(snapshot.nodes, requested, sensitive,
                              {n: tuple(p) for n, p in neighbours.items()}, snapshot.everyone)
    renamed = [Gang(f"{g.key}-later", tuple(replace(p, name=f"{p.name}-later")
                                             for p in g.pending), g.hints) for g in later]
    assert planner.schedule(renamed, later_snapshot, config) == schedule(
        renamed, later_snapshot, config)


@PROPERTY_SETTINGS
@given(st.data(), st.sampled_from([1, 2, 4, 8]), st.integers(1, 4))
def test_preemption_evicts_only_lower_priority_pods_and_no_more_than_needed(
        data, gpus, priority) -> None:
    cluster = data.draw(clusters())
    bound = [replace(p, priority=data.draw(st.integers(0, 3)))
             for p in data.draw(bound_pods(cluster))]
    snapshot = with_neighbours(snapshot_of(cluster, bound), bound, everyone=False)
    nodes = {n.name: n for n in snapshot.nodes}
    running: dict[str, list[Pod]] = {}
    for pod in bound:
        running.setdefault(pod.node, []).append(pod)
    preemptor = make_pod("vip").gpus(gpus).with_(priority=priority).obj()
    found = preempt.find(preemptor, snapshot.nodes, snapshot, running, snapshot.neighbours)
    event(f"preempts: {found is not None}")
    if found is None:
        return
    node = nodes[found.node]
    assert found.victims and all(v.priority < priority for v in found.victims)
    assert all(v in running[found.node] for v in found.victims)
    assert filters.static_problem(preemptor, node) is None
    staying = [p for p in running[found.node] if p not in found.victims]
    assert filters.neighbour_problem([preemptor], staying) is None

    def fits(victims: tuple[Pod, ...]) -> bool:
        need = filters.shape([preemptor])
        return all(snapshot.free(node, r) + (len(victims) if r == PODS else sum(
            v.requests.get(r, 0) for v in victims)) >= amount for r, amount in need.items())

    assert fits(found.victims)
    for victim in found.victims:  # each one had to go
        assert not fits(tuple(v for v in found.victims if v is not victim))
