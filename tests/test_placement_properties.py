"""Invariants of the placers on generated clusters, allocations and previous placements.

Clusters mix GPU counts and types under random leaves and spines; allocations
fit per GPU type (the only guarantee an allocation gives); previous placements
are arbitrary: on vanished nodes, on nodes of another type, over capacity.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voda.core.goodput import GoodputModel, PerfParams
from voda.core.model import Cluster, Job, Node, Placement
from voda.core.placement.base import placement_problems
from voda.core.placement.first_fit import first_fit
from voda.core.placement.manager import PlacementSettings, TopologyPlacer, counts_only
from voda.core.placement.repack import make_repack, repack
from voda.core.plan import diff

PROPERTY_SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TYPES = ("t4", "v100")
PLACERS = {
    "topology": TopologyPlacer(),
    "topology without defragmentation": TopologyPlacer(PlacementSettings(defragment=False)),
    "topology with leaf limits": TopologyPlacer(
        PlacementSettings(max_nodes_per_leaf=2, max_gpus_per_leaf=6)
    ),
    "topology-spread": TopologyPlacer(PlacementSettings(spread_multi_node=True)),
    "topology, moves on any learned gain": TopologyPlacer(
        PlacementSettings(spread_margin=0.0, relayout_margin=0.0)
    ),
    "off": counts_only,
    "repack": repack,
}


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    spines = draw(st.integers(1, 2))
    leaves = draw(st.integers(1, 4))
    nodes = []
    for i in range(draw(st.integers(1, 9))):
        leaf = draw(st.integers(0, leaves - 1))
        nodes.append(Node(
            name=f"n{i}",
            gpus=draw(st.sampled_from([1, 2, 4, 4, 8])),
            gpu_type=draw(st.sampled_from(TYPES)),
            leaf=draw(st.sampled_from([f"l{leaf}", None])) if leaves > 1 else f"l{leaf}",
            spine=f"s{leaf % spines}",
        ))
    # A node with no leaf is its own leaf under the default spine "spine".
    return Cluster(tuple(nodes))


@st.composite
def layout_histories(draw: st.DrawFn) -> dict[tuple[int, int], float]:
    """Learned throughput by (workers, nodes): empty, or favouring packed or spread."""
    history = {}
    for _ in range(draw(st.integers(0, 4))):
        workers = draw(st.integers(2, 12))
        nodes = draw(st.integers(1, workers))
        history[(workers, nodes)] = draw(st.floats(1.0, 100.0))
    return history


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, Job], Cluster, Placement]:
    cluster = draw(clusters())
    names = [n.name for n in cluster.nodes]
    domains = [*sorted({n.leaf_name for n in cluster.nodes}), "s0", "s1", "nowhere"]
    left = {t: cluster.capacity(t) for t in TYPES}
    allocation: dict[str, int] = {}
    jobs: dict[str, Job] = {}
    for j in range(draw(st.integers(0, 8))):
        gpu_type = draw(st.sampled_from(TYPES))
        want = draw(st.integers(0, 10))
        gpus = want if want <= left[gpu_type] else 0
        left[gpu_type] -= gpus
        name = f"j{j}"
        allocation[name] = gpus
        jobs[name] = Job(
            name=name,
            min_workers=draw(st.integers(1, max(1, gpus))),
            max_workers=max(1, gpus) + 4,
            submit_time=float(draw(st.integers(0, 3))),
            gpu_type=gpu_type,
            placement_strategy=draw(st.sampled_from(["consolidated", "distributed", "balanced",
                                                     "unknown"])),
            preferred_domain=draw(st.none() | st.sampled_from(domains)),
            network_bandwidth=draw(st.none() | st.sampled_from([10.0, 500.0])),
            latency_sensitive=draw(st.booleans()),
            layout_throughput=draw(layout_histories()),
        )
    previous: dict[str, tuple[tuple[str, int], ...]] = {}
    for name in jobs:
        shards = draw(st.lists(
            st.tuples(st.sampled_from([*names, "gone"]), st.integers(1, 6)), max_size=3
        ))
        if shards:
            previous[name] = tuple(shards)
    return allocation, jobs, cluster, previous


def valid_previous(
    allocation: Mapping[str, int], jobs: Mapping[str, Job], cluster: Cluster, seed: Placement
) -> Placement:
    """A valid placement of `allocation`, built by first fit from an arbitrary seed."""
    node_type = {n.name: n.gpu_type for n in cluster.nodes}
    seed = {
        name: tuple((n, c) for n, c in shards if node_type.get(n) == jobs[name].gpu_type)
        for name, shards in seed.items()
    }
    return first_fit(allocation, jobs, cluster, seed)


@pytest.mark.parametrize("placer_name", list(PLACERS))
@PROPERTY_SETTINGS
@given(scenario=scenarios())
def test_every_allocated_gpu_is_placed_on_a_node_of_its_type_within_capacity(
    placer_name: str, scenario: tuple
) -> None:
    allocation, jobs, cluster, previous = scenario
    placement = PLACERS[placer_name](allocation, jobs, cluster, previous)
    assert placement_problems(allocation, jobs, cluster, placement) == []
    for name, gpus in allocation.items():
        placed = sum(c for _, c in placement.get(name, ()))
        assert placed == gpus
        assert gpus == 0 or placed >= jobs[name].min_workers


@pytest.mark.parametrize("placer_name", list(PLACERS))
@PROPERTY_SETTINGS
@given(scenario=scenarios())
def test_the_same_inputs_give_the_same_placement_whatever_the_order_of_the_jobs(
    placer_name: str, scenario: tuple
) -> None:
    allocation, jobs, cluster, previous = scenario
    placer = PLACERS[placer_name]
    first = placer(allocation, jobs, cluster, previous)
    again = placer(
        dict(reversed(allocation.items())), dict(reversed(jobs.items())), cluster, previous
    )
    assert first == again


@pytest.mark.parametrize("placer_name", list(PLACERS))
@PROPERTY_SETTINGS
@given(scenario=scenarios())
def test_nothing_moves_when_nothing_changed(placer_name: str, scenario: tuple) -> None:
    allocation, jobs, cluster, seed = scenario
    previous = valid_previous(allocation, jobs, cluster, seed)
    assert PLACERS[placer_name](allocation, jobs, cluster, previous) == previous


@PROPERTY_SETTINGS
@given(scenario=scenarios())
def test_latency_sensitive_jobs_share_no_node_when_there_are_nodes_enough(
    scenario: tuple,
) -> None:
    allocation, jobs, cluster, _ = scenario
    sensitive = {n: g for n, g in allocation.items() if g and jobs[n].latency_sensitive}
    for t in TYPES:
        nodes = sum(1 for n in cluster.nodes if n.gpu_type == t)
        if sum(g for n, g in sensitive.items() if jobs[n].gpu_type == t) > nodes:
            return  # not enough nodes to keep them apart: nothing to check
    placement = TopologyPlacer()(sensitive, jobs, cluster, {})
    holders: dict[str, list[str]] = {}
    for name in sensitive:
        for node, _ in placement[name]:
            holders.setdefault(node, []).append(name)
    assert all(len(names) == 1 for names in holders.values())


@PROPERTY_SETTINGS
@given(scenario=scenarios())
def test_a_job_that_fits_on_one_empty_node_is_placed_on_one_node(scenario: tuple) -> None:
    allocation, jobs, cluster, _ = scenario
    biggest = {t: max((n.gpus for n in cluster.nodes if n.gpu_type == t), default=0)
               for t in TYPES}
    for name, gpus in allocation.items():
        job = jobs[name]
        alone = {name: gpus}
        if 0 < gpus <= biggest[job.gpu_type] and job.placement_strategy == "consolidated" \
                and not job.latency_sensitive:
            placement = TopologyPlacer()(alone, jobs, cluster, {})
            assert len(placement[name]) == 1


@st.composite
def changes(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, Job], Cluster, Placement]:
    """A valid placement in force and a new allocation: jobs grow, shrink, stop, start."""
    allocation, jobs, cluster, seed = draw(scenarios())
    previous = valid_previous(allocation, jobs, cluster, seed)
    left = {t: cluster.capacity(t) for t in TYPES}
    new: dict[str, int] = {}
    for name in sorted(jobs):
        want = draw(st.integers(0, 10))
        gpus = want if want <= left[jobs[name].gpu_type] else 0
        left[jobs[name].gpu_type] -= gpus
        new[name] = gpus
    return new, jobs, cluster, previous


@pytest.mark.parametrize("placer_name", list(PLACERS))
@PROPERTY_SETTINGS
@given(change=changes())
def test_the_actions_of_a_plan_can_be_applied_one_by_one(placer_name: str, change: tuple) -> None:
    """Halts, scale-ins and migrations free GPUs before starts and scale-outs take them."""
    allocation, jobs, cluster, previous = change
    placement = PLACERS[placer_name](allocation, jobs, cluster, previous)
    apply_in_order(previous, placement, cluster)


def apply_in_order(previous: Placement, placement: Placement, cluster: Cluster) -> None:
    capacity = {n.name: n.gpus for n in cluster.nodes}
    used: dict[str, int] = {}
    for shards in previous.values():
        for node, count in shards:
            used[node] = used.get(node, 0) + count
    for action in diff(previous, placement):
        for node, count in action.old:
            used[node] -= count
        for node, count in action.new:
            used[node] = used.get(node, 0) + count
            assert used[node] <= capacity[node], f"{action.kind} {action.job} on {node}"


@pytest.mark.parametrize("seed", range(6), ids=lambda s: f"rounds of seed {s}")
def test_rounds_of_changes_on_a_busy_cluster_stay_valid_and_applicable(seed: int) -> None:
    """Like a scheduler: each placement is the previous one of the next round."""
    rng = random.Random(seed)
    nodes = [Node(f"n{i}", rng.choice([4, 4, 8]), rng.choice(TYPES), f"l{i // 3}", f"s{i // 12}")
             for i in range(24)]
    cluster = Cluster(tuple(nodes))
    strategies = ["consolidated"] * 6 + ["distributed", "balanced"]
    jobs = {
        f"j{i}": Job(f"j{i}", 1, 16, submit_time=float(i), gpu_type=rng.choice(TYPES),
                     placement_strategy=rng.choice(strategies),
                     latency_sensitive=rng.random() < 0.1)
        for i in range(40)
    }
    placer = TopologyPlacer()
    previous: Placement = {}
    for _ in range(25):
        left = {t: cluster.capacity(t) for t in TYPES}
        allocation = {}
        for name in sorted(jobs):
            old = sum(c for _, c in previous.get(name, ()))
            want = old if old and rng.random() < 0.6 else rng.choice([0, 1, 1, 2, 3, 4, 6, 8, 12])
            gpus = want if want <= left[jobs[name].gpu_type] else 0
            left[jobs[name].gpu_type] -= gpus
            allocation[name] = gpus
        placement = placer(allocation, jobs, cluster, previous)
        assert placement_problems(allocation, jobs, cluster, placement) == []
        apply_in_order(previous, placement, cluster)
        previous = placement


def scattered(allocation: Mapping[str, int], jobs: Mapping[str, Job], cluster: Cluster,
              rng: random.Random) -> Placement:
    """A valid placement of `allocation` that spreads each job one GPU at a time over the
    nodes of its type (in a random order): jobs span more nodes than they need."""
    free = {n.name: n.gpus for n in cluster.nodes}
    placement: dict[str, tuple[tuple[str, int], ...]] = {}
    for name, gpus in allocation.items():
        nodes = [n.name for n in cluster.nodes if n.gpu_type == jobs[name].gpu_type]
        rng.shuffle(nodes)
        shards: dict[str, int] = {}
        while sum(shards.values()) < gpus:
            node = next(n for n in nodes if free[n] > 0)  # the allocation fits its type
            nodes.append(nodes.pop(nodes.index(node)))
            free[node] -= 1
            shards[node] = shards.get(node, 0) + 1
        placement[name] = tuple(shards.items())
    return placement


@st.composite
def measured_jobs(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, Job], Cluster]:
    """Nodes of 4 or 8 GPUs, half full or less; jobs of 1-8 GPUs whose models find links
    between nodes 1-50 x slower than within one, at ages from new to old."""
    cluster = Cluster(tuple(Node(name=f"n{i}", gpus=draw(st.sampled_from([4, 4, 8])),
                                 gpu_type="t4") for i in range(draw(st.integers(2, 8)))))
    left = cluster.capacity("t4") // 2
    allocation: dict[str, int] = {}
    jobs: dict[str, Job] = {}
    for j in range(draw(st.integers(1, 6))):
        gpus = min(draw(st.integers(1, 8)), left)
        left -= gpus
        within = draw(st.floats(1e-3, 0.5))
        perf = PerfParams(draw(st.floats(1e-3, 0.5)), draw(st.floats(1e-5, 1e-2)),
                          within * draw(st.floats(1.0, 50.0)), 1e-3, within, 1e-3,
                          draw(st.floats(1.0, 3.0)))
        name = f"j{j}"
        allocation[name] = gpus
        jobs[name] = dataclasses.replace(
            Job(name=name, min_workers=1, max_workers=8, submit_time=float(j), gpu_type="t4"),
            running_seconds=draw(st.sampled_from([0.0, 50.0, 5000.0])),
            restarts=draw(st.integers(0, 3)),
            goodput=GoodputModel(perf=perf, grad_sqr=1.0, grad_var=1.0, init_batch=128,
                                 max_batch=4096, min_local=32, max_local=256,
                                 max_profiled_replicas=4))
    return allocation, jobs, cluster


@PROPERTY_SETTINGS
@given(scenario=measured_jobs(), seed=st.integers(0, 10**6))
def test_the_pollux_variant_gathers_within_capacity_and_never_onto_more_nodes(
    scenario: tuple, seed: int
) -> None:
    allocation, jobs, cluster = scenario
    previous = scattered(allocation, jobs, cluster, random.Random(seed))
    gather = make_repack(simultaneous=True, consolidate_penalty=30.0)
    placement = gather(allocation, jobs, cluster, previous)
    assert placement_problems(allocation, jobs, cluster, placement) == []
    plain = make_repack(simultaneous=True)(allocation, jobs, cluster, previous)
    for name, gpus in allocation.items():
        assert sum(c for _, c in placement.get(name, ())) == gpus
        if placement.get(name) != plain.get(name):  # gathered: onto fewer nodes
            assert len(placement[name]) < len(plain[name])


@PROPERTY_SETTINGS
@given(change=changes())
def test_freeing_whole_nodes_stays_valid_and_moves_only_one_node_jobs_it_would_keep(
    change: tuple,
) -> None:
    """Voda's repack under the Pollux preset: whatever the change, a valid placement of
    the allocation; a job moved to free a node is one the plain variant keeps where it is,
    on one node, and it lands on one node of its type; the same inputs in any order give
    the same placement; and nothing moves when nothing changed."""
    allocation, jobs, cluster, previous = change
    freeing = make_repack(simultaneous=True, free_whole_nodes=True)
    placement = freeing(allocation, jobs, cluster, previous)
    assert placement_problems(allocation, jobs, cluster, placement) == []
    plain = make_repack(simultaneous=True)(allocation, jobs, cluster, previous)
    for name, gpus in allocation.items():
        assert sum(c for _, c in placement.get(name, ())) == gpus
        kept = plain.get(name) == previous.get(name)
        if gpus and kept and placement[name] != plain[name]:
            assert len(plain[name]) == 1 and len(placement[name]) == 1
    again = freeing(dict(reversed(allocation.items())), dict(reversed(jobs.items())),
                    cluster, previous)
    assert again == placement
    unchanged = {n: sum(c for _, c in shards) for n, shards in previous.items()}
    assert freeing(unchanged, jobs, cluster, previous) == previous
