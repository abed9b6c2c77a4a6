"""Time a few algorithms on one cell of bench/allocate.py, interleaved, round after round.

    .venv/bin/python bench/allocate_cell.py [--algorithms AFS-L,ElasticTiresias,Optimus]
        [--jobs 1000] [--gpus 4096] [--rounds 7] [--repeats 7] [--seed 1]

Each round takes, for every algorithm in turn, the median of `--repeats` calls (as
bench/allocate.py does); the figure to quote is the median over the rounds. The
machine's speed swings between runs: interleaving shows whether an algorithm's time
moved or the machine did (the other algorithms move with it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Sequence

from allocate import make_jobs, median_seconds

from voda.core.allocation import registry


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default="AFS-L,ElasticTiresias,Optimus")
    parser.add_argument("--jobs", type=int, default=1_000)
    parser.add_argument("--gpus", type=int, default=4_096)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    jobs = make_jobs(args.jobs, args.seed)
    algorithms = {name: registry.create(name) for name in args.algorithms.split(",")}
    for algorithm in algorithms.values():
        algorithm(jobs, args.gpus)  # warm caches and imports
    times: dict[str, list[float]] = {name: [] for name in algorithms}
    for _ in range(args.rounds):
        for name, algorithm in algorithms.items():
            times[name].append(median_seconds(algorithm, jobs, args.gpus, args.repeats))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.jobs} jobs on {args.gpus} GPUs, medians of {args.repeats} calls per round "
          f"(load average {load:.1f}), ms")
    for name, samples in times.items():
        shown = " ".join(f"{s * 1000:.2f}" for s in samples)
        print(f"{name:<16} {shown}   median {statistics.median(samples) * 1000:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
