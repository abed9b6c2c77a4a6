"""Speed-up of `voda sweep` from 1 to 2 workers, on the local process pool and on Ray.

    nice -n 5 .venv/bin/python bench/sweep_workers.py [--repeat 3] [--workloads 1 2]
        [--algorithms FIFO ElasticFIFO SRJF Tiresias] [--no-ray]

Each measurement is one whole `voda sweep` process into a fresh output directory (nothing
to resume): the grid's workloads x algorithms, one seed each, every run a full
simulation and its jobs timed alone. Wall time of the process, command start to exit,
so Ray's start (a private `--ray local` instance with N CPUs) is counted in. Printed: the
median over --repeat of each (executor, workers), and the ratio of the medians 1 / 2
workers. Target: above 1.5 on an idle machine with two cores or more (the runs are
independent; what is left is the process start, the grid's checks in the driver and, on
Ray, its start). On a loaded machine the ratio falls towards 1: the load average is
printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.5


def one_sweep(grid: Path, workers: int, ray: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="voda-sweep-bench-") as out:
        command = [sys.executable, "-m", "voda.cli.main", "sweep", "--json", "--grid",
                   str(grid), "--workers", str(workers), "--out", out]
        if ray:
            command += ["--ray", "local"]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({done.returncode}): {done.stderr[-2000:]}")
    last = json.loads(done.stdout.splitlines()[-1])
    assert last["event"] == "finished", last
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workloads", nargs="+", default=["1", "2"])
    parser.add_argument("--algorithms", nargs="+",
                        default=["FIFO", "ElasticFIFO", "SRJF", "Tiresias"])
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.repeat <= 20:
        raise SystemExit("--repeat: 1..20")
    executors = [("local pool", False)] + ([] if args.no_ray else [("Ray (--ray local)", True)])
    with tempfile.TemporaryDirectory() as folder:
        grid = Path(folder) / "grid.json"
        grid.write_text(json.dumps({"workloads": [f"workload-{w}" for w in args.workloads],
                                    "algorithms": args.algorithms, "clusters": ["16x4"]}))
        runs = len(args.workloads) * len(args.algorithms)
        print(f"voda sweep: {runs} runs (workloads {', '.join(args.workloads)} x "
              f"{', '.join(args.algorithms)}, 16x4), wall seconds of the whole command, "
              f"median of {args.repeat}; {os.cpu_count()} cores, load average before "
              f"{os.getloadavg()[0]:.1f}")
        walls: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.repeat):  # interleaved, so a burst of load hits every figure
            for name, ray in executors:
                for workers in (1, 2):
                    walls.setdefault((name, workers), []).append(one_sweep(grid, workers, ray))
        for name, _ in executors:
            one = statistics.median(walls[(name, 1)])
            two = statistics.median(walls[(name, 2)])
            print(f"{name:18s} 1 worker {one:6.1f} s  2 workers {two:6.1f} s  speed-up "
                  f"{one / two:4.2f} (target > {TARGET} on an idle machine)  "
                  f"[1: {', '.join(f'{w:.1f}' for w in walls[(name, 1)])}; "
                  f"2: {', '.join(f'{w:.1f}' for w in walls[(name, 2)])}]")
        print(f"load average after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
