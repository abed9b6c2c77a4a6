"""Topology placements on random clusters and plans, as one digest per case, to prove that
a change of the placer's speed moved no worker.

A case is a seed: a cluster (random GPU counts and types, leaves and spines, some nodes
with no leaf; or every node alike, so that ties decide), jobs (every strategy, some
latency-sensitive, with preferred domains, bandwidths and learned layouts; sizes and
submit times often equal) and rounds of plans, each placed on the placement the last one
gave, under one of the topology placer's settings. Its digest is the SHA-256 of every
round's placement. `data/placements-9f78a45.json` holds the digests of the placer at
9f78a45 (before its steps were made incremental); tests/test_decisions_unchanged.py
checks them. Write them again (on the reference commit):
.venv/bin/python tests/placement_digests.py --write
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections.abc import Iterable
from pathlib import Path

from voda.core.model import Cluster, Job, Node, Placement
from voda.core.placement.manager import PlacementSettings, TopologyPlacer

RECORD = Path(__file__).parent / "data" / "placements-9f78a45.json"
CASES = 240
TYPES = ("t4", "v100")
STRATEGIES = ("consolidated",) * 5 + ("distributed", "balanced", "unknown")
SETTINGS = (
    PlacementSettings(),
    PlacementSettings(),
    PlacementSettings(defragment=False),
    PlacementSettings(max_nodes_per_leaf=2, max_gpus_per_leaf=6),
    PlacementSettings(spread_multi_node=True),
    PlacementSettings(spread_margin=0.0, relayout_margin=0.0),
    PlacementSettings(candidates=2, rebuild_changed_share=0.2),
    PlacementSettings(defragment_max_moved_jobs=0, domain_performance={"l0": 0.9, "s1": 0.2}),
)


def cluster_of(rng: random.Random) -> Cluster:
    """Random shapes, or (one case in three) identical nodes in identical leaves."""
    size = rng.choice((1, 3, 8, 16, 40, 96))
    if rng.random() < 1 / 3:
        per_leaf = rng.choice((1, 2, 4))
        return Cluster(tuple(
            Node(f"n{i}", 4, "t4", f"l{i // per_leaf}", f"s{i // (per_leaf * 2)}")
            for i in range(size)))
    leaves, spines = rng.randint(1, max(1, size // 3)), rng.randint(1, 3)
    nodes = []
    for i in range(size):
        leaf = rng.randrange(leaves)
        nodes.append(Node(f"n{i}", rng.choice((1, 2, 4, 4, 8, 8)), rng.choice(TYPES),
                          None if rng.random() < 0.05 else f"l{leaf}", f"s{leaf % spines}"))
    return Cluster(tuple(nodes))


def jobs_of(rng: random.Random, cluster: Cluster, count: int) -> dict[str, Job]:
    domains = [*sorted({n.leaf_name for n in cluster.nodes}), "s0", "s1", "n0", "nowhere"]
    types = sorted({n.gpu_type for n in cluster.nodes})
    jobs = {}
    for i in range(count):
        history = {}
        if rng.random() < 0.2:
            for _ in range(rng.randint(1, 4)):
                workers = rng.randint(2, 16)
                history[(workers, rng.randint(1, workers))] = rng.uniform(1.0, 100.0)
        name = f"j{i:03d}"
        jobs[name] = Job(
            name, 1, 64, submit_time=float(rng.randint(0, 3)), gpu_type=rng.choice(types),
            placement_strategy=rng.choice(STRATEGIES),
            preferred_domain=rng.choice(domains) if rng.random() < 0.1 else None,
            network_bandwidth=rng.choice((10.0, 500.0)) if rng.random() < 0.1 else None,
            latency_sensitive=rng.random() < 0.08, layout_throughput=history)
    return jobs


def allocation_of(rng: random.Random, jobs: dict[str, Job], cluster: Cluster,
                  previous: Placement) -> dict[str, int]:
    """Most running jobs keep their count; the others grow, shrink, stop or start."""
    left = {t: cluster.capacity(t) * rng.choice((0.6, 0.9, 1.0)) for t in TYPES}
    allocation = {}
    for name in rng.sample(sorted(jobs), len(jobs)):
        old = sum(c for _, c in previous.get(name, ()))
        want = old if old and rng.random() < 0.7 else rng.choice((0, 1, 1, 2, 2, 3, 4, 8, 12))
        gpus = want if want <= left[jobs[name].gpu_type] else 0
        left[jobs[name].gpu_type] -= gpus
        allocation[name] = gpus
    return allocation


def rounds(seed: int) -> list[Placement]:
    """The placements of one case's rounds, each on the placement of the round before;
    in one case in five the first previous placement is arbitrary (vanished nodes,
    nodes of another type, over capacity)."""
    rng = random.Random(seed)
    cluster = cluster_of(rng)
    jobs = jobs_of(rng, cluster, rng.choice((2, 6, 12, 30, 80)))
    placer = TopologyPlacer(SETTINGS[seed % len(SETTINGS)])
    previous: Placement = {}
    if rng.random() < 0.2:
        names = [n.name for n in cluster.nodes] + ["gone"]
        previous = {name: tuple((rng.choice(names), rng.randint(1, 6))
                                for _ in range(rng.randint(1, 3))) for name in jobs}
    placements = []
    for _ in range(rng.randint(1, 6)):
        placement = placer(allocation_of(rng, jobs, cluster, previous), jobs, cluster, previous)
        placements.append(placement)
        previous = placement
    return placements


def digest(placements: list[Placement]) -> str:
    text = json.dumps([sorted((name, list(map(list, shards))) for name, shards in p.items())
                       for p in placements])
    return hashlib.sha256(text.encode()).hexdigest()


def all_digests(seeds: Iterable[int]) -> dict[str, str]:
    return {str(seed): digest(rounds(seed)) for seed in seeds}


def writable_digests() -> dict[str, str]:
    """The digests of the first CASES seeds but those where the placer raises: at 9f78a45
    a rebuild (step 3a) that matches a leaf's layout onto a leaf of fewer nodes can leave
    a node unmatched (KeyError in voda.core.placement.matching.apply_mapping)."""
    found = {}
    for seed in range(CASES):
        try:
            found[str(seed)] = digest(rounds(seed))
        except KeyError:
            continue
    return found


def recorded() -> dict[str, str]:
    return dict(json.loads(RECORD.read_text())["digests"])


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: placement_digests.py --write")
    written = writable_digests()
    RECORD.write_text(json.dumps({"commit": "9f78a45", "digests": written}, indent=1) + "\n")
    print(f"{len(written)} digests written to {RECORD}")
