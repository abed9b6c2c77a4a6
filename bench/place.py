"""Placement time of the topology-aware placer on large clusters.

Prints the median CPU time of one placement call (migration matching and the
migration plan included) with a realistic previous placement: the cluster is
packed by the placer first, then most jobs keep their size, some are resized,
some finish and new ones arrive; then the same with most jobs resized, where
the layout is rebuilt and matched. Each case makes one untimed call first (its time
is printed: the numba kernels compile then when their disk cache is cold). First fit
(`naive`) is measured first, at 10,000 jobs. Run: .venv/bin/python bench/place.py
"""

from __future__ import annotations

import random
import statistics
import time

from voda.core.model import Cluster, Job, Node
from voda.core.placement.base import placement_problems
from voda.core.placement.first_fit import first_fit
from voda.core.placement.manager import TopologyPlacer
from voda.core.placement.matching import migration_plan
from voda.core.placement.metrics import fragmentation_ratio

# Job sizes roughly as in the Philly trace: mostly small, a few large.
SIZES = (1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 16, 32)


def make_cluster(nodes: int, gpus: int, nodes_per_leaf: int, leaves_per_spine: int) -> Cluster:
    return Cluster(tuple(
        Node(f"n{i}", gpus, leaf=f"leaf-{i // nodes_per_leaf}",
             spine=f"spine-{i // (nodes_per_leaf * leaves_per_spine)}")
        for i in range(nodes)
    ))


def sizes_that_fit(rng: random.Random, count: int, capacity: int) -> list[int]:
    sizes = [rng.choice(SIZES) for _ in range(count)]
    while sum(sizes) > capacity:
        i = max(range(count), key=lambda j: (sizes[j], -j))
        sizes[i] = max(1, sizes[i] // 2)
    return sizes


def scenario(jobs_count: int, cluster: Cluster, resized: float = 0.10, seed: int = 7) -> tuple:
    rng = random.Random(seed)
    capacity = cluster.capacity()
    strategies = ("consolidated",) * 8 + ("distributed", "balanced")
    jobs = {
        f"job-{i}": Job(f"job-{i}", 1, 64, submit_time=float(i),
                        placement_strategy=rng.choice(strategies))
        for i in range(jobs_count + jobs_count // 20)
    }
    names = sorted(jobs, key=lambda n: jobs[n].sort_key)
    old_names, new_names = names[:jobs_count], names[jobs_count:]
    old_alloc = dict(zip(old_names, sizes_that_fit(rng, jobs_count, int(capacity * 0.9)),
                         strict=True))
    placer = TopologyPlacer()
    previous = placer(old_alloc, jobs, cluster, {})
    alloc = {}
    for name, gpus in old_alloc.items():
        r = rng.random()
        if r < 0.05:
            continue  # finished
        if r < 0.05 + resized / 2:
            alloc[name] = max(1, gpus // 2)
        elif r < 0.05 + resized:
            alloc[name] = gpus * 2
        else:
            alloc[name] = gpus
    for name in new_names:
        alloc[name] = rng.choice(SIZES)
    while sum(alloc.values()) > capacity:
        name = max(alloc, key=lambda n: (alloc[n], n))
        alloc[name] = max(1, alloc[name] // 2)
    previous = {name: p for name, p in previous.items() if name in alloc}
    return placer, alloc, jobs, previous


def measure(
    label: str, jobs_count: int, cluster: Cluster, repeats: int, resized: float = 0.10
) -> None:
    placer, alloc, jobs, previous = scenario(jobs_count, cluster, resized)
    # One untimed call first: from 64 leaves up the placer's numba kernels compile on their
    # first use (once; cached on disk), which is not what a decision costs.
    started = time.process_time()
    placer(alloc, jobs, cluster, previous)
    first = time.process_time() - started
    times = []
    placement = {}
    for _ in range(repeats):
        started = time.process_time()
        placement = placer(alloc, jobs, cluster, previous)
        plan = migration_plan(previous, placement)
        times.append(time.process_time() - started)
    problems = placement_problems(alloc, jobs, cluster, placement)
    unchanged = sum(1 for n, p in placement.items() if previous.get(n) == p)
    steady = {n for n, p in previous.items() if sum(c for _, c in p) == alloc.get(n)}
    migrated = sum(1 for n in steady if placement.get(n) != previous[n])
    print(
        f"{label}: median {statistics.median(times) * 1000:.1f} ms CPU over {repeats} runs "
        f"(first call {first * 1000:.0f} ms); {len(alloc)} jobs, "
        f"{sum(alloc.values())}/{cluster.capacity()} GPUs, "
        f"{unchanged} placements unchanged, {migrated} of {len(steady)} same-size jobs "
        f"migrated, {plan.moved_workers} workers moved (resized jobs included), "
        f"{len(plan.restarts)} jobs with no worker left in place, fragmentation for 8 GPUs "
        f"{fragmentation_ratio(cluster, placement, [Job('w', 8, 8)]):.2f}, "
        f"problems: {len(problems)}"
    )


def measure_first_fit(label: str, jobs_count: int, cluster: Cluster, repeats: int) -> None:
    """First fit (`naive`) with a previous placement of its own: 5 % of jobs finished,
    5 % new."""
    rng = random.Random(7)
    jobs = {f"job-{i}": Job(f"job-{i}", 1, 64, submit_time=float(i))
            for i in range(jobs_count + jobs_count // 20)}
    names = sorted(jobs, key=lambda n: jobs[n].sort_key)
    old = dict(zip(names[:jobs_count], sizes_that_fit(rng, jobs_count,
                                                      int(cluster.capacity() * 0.9)),
                   strict=True))
    previous = first_fit(old, jobs, cluster, {})
    alloc = {name: gpus for name, gpus in old.items() if rng.random() > 0.05}
    for name in names[jobs_count:]:
        alloc[name] = rng.choice((1, 2, 4))
    while sum(alloc.values()) > cluster.capacity():
        name = max(alloc, key=lambda n: (alloc[n], n))
        alloc[name] = max(1, alloc[name] // 2)
    previous = {name: p for name, p in previous.items() if name in alloc}
    times = []
    for _ in range(repeats):
        started = time.process_time()
        placement = first_fit(alloc, jobs, cluster, previous)
        times.append(time.process_time() - started)
    problems = placement_problems(alloc, jobs, cluster, placement)
    print(f"{label}: median {statistics.median(times) * 1000:.1f} ms CPU over {repeats} runs; "
          f"{len(alloc)} jobs, problems: {len(problems)}")


def main() -> None:
    small, large = make_cluster(512, 8, 16, 8), make_cluster(4096, 8, 16, 16)
    measure_first_fit("first fit, 10,000 jobs on 4,096 nodes x 8 GPUs (target <= 200 ms)",
                      10000, large, repeats=5)
    measure("1,000 jobs on 512 nodes x 8 GPUs, 32 leaves (target <= 50 ms)", 1000,
            small, repeats=7)
    measure("10,000 jobs on 4,096 nodes x 8 GPUs, 256 leaves (target <= 200 ms)", 10000,
            large, repeats=3)
    # Most jobs resized: the whole layout is rebuilt and matched onto the nodes.
    measure("1,000 jobs, 70% resized (rebuild + matching)", 1000, small, repeats=7,
            resized=0.70)
    measure("10,000 jobs, 70% resized (rebuild + matching)", 10000, large, repeats=3,
            resized=0.70)


if __name__ == "__main__":
    main()
