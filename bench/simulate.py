"""Simulator wall time.

1. One 160-job Pollux workload under each of the eight algorithms, in parallel
   processes (target: under 10 s in total).
2. The full Philly trace (82,247 jobs) on a cluster sized to it, with
   ElasticFIFO and with Tiresias (target: under 5 min each).

Wall times depend on what else runs on the machine; CPU times are printed beside them.

Run: .venv/bin/python bench/simulate.py [--philly-rows N] [--skip-philly] [--profile]
     [--placement NAME]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

from voda.core.allocation.registry import BUILTIN_NAMES
from voda.sim.cluster_file import parse_cluster
from voda.sim.compare import RunRequest, run_many
from voda.sim.presets import apply_preset
from voda.sim.runner import simulate
from voda.sim.workloads import builtin_workload, load_workload

# 3.52e9 GPU-seconds over 9.4e6 s is 375 GPUs busy on average: 160 nodes x 4 GPUs
# (640 GPUs) keeps the average load near 60 % and fits the largest job (128 GPUs).
PHILLY_CLUSTER = "160x4"


def philly_path() -> Path:
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "philly" / "philly.csv"
    if shared.is_file():
        return shared
    found = builtin_workload("philly")
    if found is None:
        raise SystemExit("philly.csv not found")
    return found


def bench_all_algorithms() -> None:
    requests = [RunRequest("workload-1", "16x4", name) for name in BUILTIN_NAMES]
    started = time.perf_counter()
    results = run_many(requests)
    total = time.perf_counter() - started
    print(f"workload-1 (160 jobs) x {len(results)} algorithms, parallel: {total:.2f} s wall")
    cpu = time.process_time()
    run_many(requests, workers=1)
    print(f"  the same, one process: {time.process_time() - cpu:.2f} s CPU")
    for r in results:
        print(f"  {r.algorithm:16s} avg JCT {r.avg_jct:10.1f} s  makespan {r.makespan:9.0f} s")


def bench_philly(rows: int | None, profile: bool, placement: str | None) -> None:
    path = philly_path()
    if rows:
        lines = path.read_text().splitlines()[: rows + 1]
        path = Path("/tmp/philly-bench.csv")
        path.write_text("\n".join(lines) + "\n")
    t0 = time.perf_counter()
    workload = load_workload(path)
    print(f"philly: {len(workload.jobs)} jobs loaded in {time.perf_counter() - t0:.1f} s; "
          f"cluster {PHILLY_CLUSTER}, placement {placement or 'default'}")
    cluster = parse_cluster(PHILLY_CLUSTER)
    for algorithm in ("ElasticFIFO", "Tiresias"):
        settings = apply_preset(None, algorithm, placement=placement)
        profiler = cProfile.Profile() if profile else None
        started, cpu = time.perf_counter(), time.process_time()
        if profiler:
            profiler.enable()
        result = simulate(workload, cluster, settings)
        if profiler:
            profiler.disable()
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        print(f"  {algorithm:12s} {seconds:7.1f} s wall {cpu:7.1f} s CPU  "
              f"avg JCT {result.avg_jct:12.0f} s  p99 {result.p99_jct:12.0f} s  "
              f"utilization {result.utilization:.1%}  unfinished {result.unfinished}")
        if profiler:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--philly-rows", type=int, default=None,
                        help="only the first N rows of the trace")
    parser.add_argument("--skip-philly", action="store_true")
    parser.add_argument("--profile", action="store_true", help="print a cProfile summary")
    # Philly jobs run at linear speedup wherever they are placed: the bench uses the
    # cheapest placer by default, so it measures the scheduler loop, not placement.
    parser.add_argument("--placement", default="naive", help="placer for the Philly runs")
    args = parser.parse_args()
    bench_all_algorithms()
    if not args.skip_philly:
        bench_philly(args.philly_rows, args.profile, args.placement)


if __name__ == "__main__":
    main()
