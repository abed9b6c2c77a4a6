"""The Philly trace: CPU time and peak memory of one simulation, and how its cost grows.

1. The trace (82,247 jobs; `--rows N`: its first N) on 160 nodes x 4 GPUs under each
   algorithm of `--algorithms`, each in a fresh process: CPU seconds (user + system, from
   the process's own rusage), peak RSS, decisions and the average JCT, with the targets:
   60 CPU-s under ElasticFIFO and Tiresias, 300 under Voda and Pollux, under 1 GiB.
2. With `--scaling`: per algorithm, CPU time against the jobs (the first 500, 1,000 and
   2,000 jobs on 160 x 4), the GPUs (the first 1,000 jobs on 160, 320 and 640 nodes of 4)
   and the decisions taken, each fitted as cost ~ x^k by least squares on the logs.

Jobs run at linear speedup wherever placed, so the runs use the first-fit placer
(`--placement`, default naive): the figures are the scheduler loop's, not placement's.

Run: .venv/bin/python bench/philly.py [--rows N] [--algorithms A,B] [--placement NAME]
     [--scaling] [--scaling-algorithms A,B]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from voda.core.allocation.registry import BUILTIN_NAMES  # noqa: E402

PHILLY_JOBS = 82_247
CLUSTER = "160x4"
TARGET_CPU = {"ElasticFIFO": 60.0, "Tiresias": 60.0, "Voda": 300.0, "Pollux": 300.0}
TARGET_RSS_MIB = 1024.0
SCALING_JOBS = (500, 1_000, 2_000)
SCALING_NODES = (160, 320, 640)
SCALING_FIXED_JOBS = 1_000


def child(rows: int, cluster: str, algorithm: str, placement: str) -> None:
    """Run one simulation in this process; print its figures as one JSON line."""
    from tests.results_digest import philly_prefix
    from voda.sim.cluster_file import parse_cluster
    from voda.sim.presets import apply_preset
    from voda.sim.runner import simulate

    workload = philly_prefix(rows)
    seen = []

    def observe(scheduler):  # type: ignore[no-untyped-def]
        seen.append(scheduler)
        from voda.engine.scheduler import SchedulerObserver
        return SchedulerObserver()

    started = time.process_time()
    result = simulate(workload, parse_cluster(cluster), apply_preset(None, algorithm,
                                                                     placement=placement),
                      observe=observe)
    print(json.dumps({"cpu_in_run": time.process_time() - started, "avg_jct": result.avg_jct,
                      "unfinished": result.unfinished, "decisions": seen[0].reschedules}))


def run(rows: int, cluster: str, algorithm: str, placement: str) -> dict[str, float]:
    """One simulation in a fresh process: its figures and its own CPU time and peak RSS."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--child", str(rows), cluster, algorithm, placement],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert process.stdout is not None
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{algorithm} on {rows} jobs failed ({process.returncode})")
    figures = json.loads(out.strip().splitlines()[-1])
    figures["cpu"] = usage.ru_utime + usage.ru_stime
    figures["rss_mib"] = usage.ru_maxrss / 1024  # KiB on Linux
    return figures


def fit_exponent(xs: list[float], ys: list[float]) -> float:
    """k of y ~ x^k, least squares on the logs."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((x - mx) ** 2 for x in lx)
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly, strict=True)) / den if den else 0.0


def bench_trace(rows: int, algorithms: list[str], placement: str) -> None:
    print(f"Philly trace, first {rows:,} jobs, {CLUSTER}, placement {placement}; "
          f"each run in its own process")
    for algorithm in algorithms:
        f = run(rows, CLUSTER, algorithm, placement)
        target = TARGET_CPU.get(algorithm)
        aim = f" (target <= {target:.0f} CPU-s on the whole trace)" if target else ""
        print(f"  {algorithm:15s} {f['cpu']:8.1f} CPU-s{aim}  peak RSS {f['rss_mib']:6.0f} MiB "
              f"(target < {TARGET_RSS_MIB:.0f})  {f['decisions']:6d} decisions  "
              f"avg JCT {f['avg_jct']:10.0f} s  unfinished {f['unfinished']}", flush=True)


def seconds(runs: list[dict[str, float]]) -> str:
    return ", ".join(f"{f['cpu_in_run']:.1f}" for f in runs)


def bench_scaling(algorithms: list[str], placement: str) -> None:
    print("Cost growth, cost ~ x^k (CPU seconds of the run, process start excluded):")
    print(f"  {'algorithm':15s} {'jobs k':>7s} {'GPUs k':>7s} {'decisions k':>12s}  "
          f"CPU-s at {', '.join(f'{n:,}' for n in SCALING_JOBS)} jobs | "
          f"{', '.join(str(4 * n) for n in SCALING_NODES)} GPUs")
    for algorithm in algorithms:
        by_jobs = [run(n, CLUSTER, algorithm, placement) for n in SCALING_JOBS]
        by_gpus = [run(SCALING_FIXED_JOBS, f"{n}x4", algorithm, placement)
                   for n in SCALING_NODES]
        k_jobs = fit_exponent(list(SCALING_JOBS), [f["cpu_in_run"] for f in by_jobs])
        k_gpus = fit_exponent([4.0 * n for n in SCALING_NODES],
                              [f["cpu_in_run"] for f in by_gpus])
        k_dec = fit_exponent([f["decisions"] for f in by_jobs],
                             [f["cpu_in_run"] for f in by_jobs])
        print(f"  {algorithm:15s} {k_jobs:7.2f} {k_gpus:7.2f} {k_dec:12.2f}  "
              f"{seconds(by_jobs)} | {seconds(by_gpus)}", flush=True)


def names(text: str) -> list[str]:
    chosen = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in BUILTIN_NAMES]
    if unknown or not chosen:
        raise SystemExit(f"--algorithms: unknown {unknown}; built in: {', '.join(BUILTIN_NAMES)}")
    return chosen


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=PHILLY_JOBS,
                        help="the first N jobs of the trace (default: all)")
    parser.add_argument("--algorithms", default="ElasticFIFO,Tiresias")
    parser.add_argument("--placement", default="naive")
    parser.add_argument("--scaling", action="store_true", help="fit the cost exponents")
    parser.add_argument("--scaling-algorithms", default=",".join(BUILTIN_NAMES))
    parser.add_argument("--skip-trace", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.rows <= PHILLY_JOBS:
        raise SystemExit(f"--rows: between 1 and {PHILLY_JOBS}")
    if not args.skip_trace:
        bench_trace(args.rows, names(args.algorithms), args.placement)
    if args.scaling:
        bench_scaling(names(args.scaling_algorithms), args.placement)


if __name__ == "__main__":
    main()
