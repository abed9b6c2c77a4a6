"""What placement is worth: average JCT and migrations per job by placer.

For each workload x algorithm x cluster x placer it prints the average JCT (s), the
migrations per job, and the best-layout bound: naive placement with every job at
the speed of its fastest layout (layout_speed "best"). No placer makes a job run
faster than that; the average JCT can still come out below the bound now and then,
because the allocation reacts to the speeds jobs report.
A summary per cluster and placer then gives the sum of the average JCTs over the
workload x algorithm runs relative to naive placement, and the same for the bound.

Every figure is the mean over `--replicas` runs: the trace as it is, then copies
whose arrivals move by up to `--jitter` seconds (seeds 1, 2, ...). One run is one
sample: a few jobs arriving a minute apart move an average JCT by several percent.
`--rigid` runs every job at exactly its requested GPUs.

Run: .venv/bin/python bench/placement_jct.py [--placements naive,topology]
     [--workloads workload-1,...] [--algorithms ElasticFIFO,AFS-L] [--clusters 16x4,...]
     [--replicas 3] [--jitter 60] [--rigid]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from voda.sim.compare import RunRequest, check_request, run_one
from voda.sim.report import SimResult
from voda.sim.throughput import warm
from voda.sim.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
CLUSTERS = ("16x4", str(ROOT / "examples/clusters/8-leaves-of-2.yaml"),
            str(ROOT / "examples/clusters/8-leaves-of-2-oversubscribed.yaml"))
WORKLOADS = ("workload-1", "workload-2", "workload-3", "workload-4")
ALGORITHMS = ("ElasticFIFO", "AFS-L")
BOUND = "best-layout bound"


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _label(cluster: str) -> str:
    return Path(cluster).stem if cluster.endswith((".yaml", ".yml")) else cluster


def _pct(value: float, base: float) -> str:
    return f"{(value / base - 1) * 100:+.1f} %"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--placements", default="naive,topology")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--clusters", default=",".join(CLUSTERS))
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--jitter", type=float, default=60.0)
    parser.add_argument("--rigid", action="store_true")
    args = parser.parse_args()
    if args.replicas < 1 or not args.jitter >= 0:
        parser.error("--replicas must be >= 1 and --jitter >= 0")
    placements = _names(args.placements)
    workloads, algorithms = _names(args.workloads), _names(args.algorithms)
    clusters = _names(args.clusters)
    if not (workloads and algorithms and clusters and placements):
        parser.error("--workloads, --algorithms, --clusters and --placements need a name each")
    if "naive" not in placements:
        placements.insert(0, "naive")  # the baseline of the summary

    # key: (cluster, workload, algorithm, placement, replica); placement BOUND is the bound
    keys = [(c, w, a, p, r) for c in clusters for w in workloads for a in algorithms
            for p in (*placements, BOUND) for r in range(args.replicas)]
    requests = {
        k: RunRequest(k[1], k[0], k[2], rigid=args.rigid,
                      placement="naive" if k[3] == BOUND else k[3],
                      layout_speed="best" if k[3] == BOUND else "actual",
                      jitter=args.jitter if k[4] else 0.0, seed=k[4])
        for k in keys
    }
    try:  # refuse bad names before starting anything
        for c in clusters:
            for p in placements:
                check_request(RunRequest(workloads[0], c, algorithms[0], placement=p))
        for w in workloads:
            for a in algorithms:
                check_request(RunRequest(w, clusters[0], a))
    except (ValueError, KeyError) as exc:  # bad workload, cluster, algorithm or placer
        parser.error(str(exc))
    for w in workloads:  # build the throughput tables once; forked workers inherit them
        warm(load_workload(w))
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as pool:
        futures = {k: pool.submit(run_one, requests[k]) for k in keys}
        runs: dict[tuple[str, str, str, str, int], SimResult] = {
            k: f.result() for k, f in futures.items()}
    wall = time.perf_counter() - started
    def mean(key: tuple[str, str, str, str], value: Callable[[SimResult], float]) -> float:
        return statistics.mean(value(runs[(*key, r)]) for r in range(args.replicas))

    # key -> (average JCT, migrations per job, split share, cross-leaf share), replica means
    results = {
        key: (mean(key, lambda r: r.avg_jct), mean(key, lambda r: r.migrations / len(r.jobs)),
              mean(key, lambda r: r.split_share), mean(key, lambda r: r.cross_leaf_share))
        for key in {k[:4] for k in keys}
    }
    mode = "rigid" if args.rigid else "elastic"
    print(f"{len(keys)} simulations in {wall:.0f} s (2 processes); {mode} jobs; means over "
          f"{args.replicas} replica(s), arrivals jittered by up to {args.jitter:g} s\n")

    header = f"{'cluster':34s} {'workload':11s} {'algorithm':12s}"
    for p in placements:
        header += f" {p + ' JCT':>16s} {'migr/job':>8s}"
    header += f" {BOUND:>18s}"
    print(header)
    for c in clusters:
        for w in workloads:
            for a in algorithms:
                line = f"{_label(c):34s} {w:11s} {a:12s}"
                for p in placements:
                    jct, migrations, _, _ = results[(c, w, a, p)]
                    line += f" {jct:16.0f} {migrations:8.2f}"
                line += f" {results[(c, w, a, BOUND)][0]:18.0f}"
                print(line)

    runs = len(workloads) * len(algorithms)
    print(f"\nsum of average JCTs over {runs} runs, change relative to naive placement; "
          "split: share of GPU time held by jobs that fit on one node but span several; "
          "cross-leaf: by jobs that fit in one leaf but span several (means over the runs)")
    print(f"{'cluster':34s} {'placement':18s} {'sum avg JCT':>12s} {'vs naive':>9s} "
          f"{'split':>6s} {'cross-leaf':>10s}")
    for c in clusters:
        def total(p: str, c: str = c) -> float:
            return sum(results[(c, w, a, p)][0] for w in workloads for a in algorithms)

        def share(p: str, i: int, c: str = c) -> float:
            return statistics.mean(results[(c, w, a, p)][i] for w in workloads
                                   for a in algorithms)

        base = total("naive")
        for p in (*placements, BOUND):
            print(f"{_label(c):34s} {p:18s} {total(p):12.0f} {_pct(total(p), base):>9s} "
                  f"{share(p, 2):6.1%} {share(p, 3):10.1%}")


if __name__ == "__main__":
    main()
