"""Speed-up of `voda sweep` from 1 to 2 workers, on the local process pool and on Ray.

    nice -n 5 .venv/bin/python bench/sweep_workers.py [--repeat 3] [--workloads 1 2 3 4]
        [--algorithms ElasticFIFO Voda] [--no-ray]

Each measurement is one whole `voda sweep` process into a fresh output directory (nothing
to resume): the grid's workloads x algorithms, one seed each, every run a full
simulation and its jobs timed alone. Printed for each (executor, workers), the median
over --repeat of: `wall`, the process from start to exit (Python's start, the grid's
checks, Ray's start for a private `--ray local` instance with N CPUs, the table and the
report included); `runs`, from its "start" line to its last run's line (what more
workers can shorten; Ray's start is in it); and for the local pool `cpu`, the CPU
seconds of the process and its workers. The speed-up is the ratio of the medians,
1 worker / 2 workers. Target: above 1.5 for `runs` on an idle machine with two cores or
more (the runs are independent; what is left is the driver's share and, on Ray, its
start). On a loaded machine the ratio falls towards 1: the load average is
printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TARGET = 1.5


@dataclass(frozen=True)
class Timing:
    wall: float  # the whole command, start to exit
    runs: float  # its "start" line (grid checked, output directory read) to its last run
    cpu: float | None  # CPU seconds of the command and the processes it waited for


def one_sweep(grid: Path, workers: int, ray: bool) -> Timing:
    with tempfile.TemporaryDirectory(prefix="voda-sweep-bench-") as out:
        command = [sys.executable, "-m", "voda.cli.main", "sweep", "--json", "--grid",
                   str(grid), "--workers", str(workers), "--out", out]
        if ray:
            command += ["--ray", "local"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        assert process.stdout is not None
        began = last = start
        lines = []
        for line in process.stdout:
            lines.append(json.loads(line))
            if lines[-1]["event"] == "start":
                began = time.perf_counter()
            elif lines[-1]["event"] == "run":
                last = time.perf_counter()
        _, err = process.communicate()
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0 or lines[-1]["event"] != "finished":
        raise SystemExit(f"sweep failed ({process.returncode}): {err[-2000:]}")
    # Ray's workers are not this process's descendants once it has exited: no CPU figure.
    cpu = None if ray else (after.ru_utime + after.ru_stime - before.ru_utime
                            - before.ru_stime)
    return Timing(wall, last - began, cpu)


def _median(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):6.1f}" if known else "     -"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workloads", nargs="+", default=["1", "2", "3", "4"])
    parser.add_argument("--algorithms", nargs="+",
                        default=["ElasticFIFO", "Voda"])
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
        timings: dict[tuple[str, int], list[Timing]] = {}
        for _ in range(args.repeat):  # interleaved, so a burst of load hits every figure
            for name, ray in executors:
                for workers in (1, 2):
                    timings.setdefault((name, workers), []).append(
                        one_sweep(grid, workers, ray))
        for name, _ in executors:
            one, two = timings[(name, 1)], timings[(name, 2)]
            for what in ("wall", "runs"):
                a = statistics.median(getattr(t, what) for t in one)
                b = statistics.median(getattr(t, what) for t in two)
                print(f"{name:18s} {what:4s} 1 worker {a:6.1f} s  2 workers {b:6.1f} s  "
                      f"speed-up {a / b:4.2f}"
                      + (f" (target > {TARGET} on an idle machine)" if what == "runs" else "")
                      + "  "
                      f"[1: {', '.join(f'{getattr(t, what):.1f}' for t in one)}; "
                      f"2: {', '.join(f'{getattr(t, what):.1f}' for t in two)}]")
            if not name.startswith("Ray"):
                print(f"{name:18s} cpu  1 worker {_median([t.cpu for t in one])} s  "
                      f"2 workers {_median([t.cpu for t in two])} s")
        print(f"load average after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
