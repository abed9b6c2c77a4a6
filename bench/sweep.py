"""Sweep an algorithm's knobs on the Pollux workloads: mean average JCT and preemptions.

    .venv/bin/python bench/sweep.py --algorithm Tiresias \
        --grid "queue_thresholds=3600;14400;57600" --grid "starvation_knob=none;2;8" \
        [--workloads 1 2 3 4] [--cluster 16x4] [--rigid] [--preset pollux]

Each --grid NAME=V1;V2;... gives the values of one knob (each read as `voda simulate
--param` reads a value, so "3600,14400" is a two-threshold list); every combination
runs on every workload (load 1.0). One line per combination, best mean JCT first:
the average JCT per workload, their mean, and the mean preemptions and rescales.
Results are deterministic; there is nothing to take a median of.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from typing import Any

from voda.cli.params import parse_value
from voda.sim.compare import RunRequest, run_many


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    grid: dict[str, list[Any]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"--grid {item!r}: expected NAME=V1;V2;...")
        grid[name.strip()] = [parse_value(v) for v in values.split(";")]
    return grid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithm", required=True)
    parser.add_argument("--grid", action="append", default=[])
    parser.add_argument("--workloads", nargs="+", default=["1", "2", "3", "4"])
    parser.add_argument("--cluster", default="16x4")
    parser.add_argument("--rigid", action="store_true")
    parser.add_argument("--preset", default=None)
    args = parser.parse_args()
    grid = parse_grid(args.grid)
    combos = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    requests = [
        RunRequest(f"workload-{w}", args.cluster, args.algorithm, rigid=args.rigid,
                   preset=args.preset, params=tuple(sorted(combo.items())))
        for combo in combos for w in args.workloads
    ]
    results = run_many(requests)
    per = len(args.workloads)
    rows = []
    for i, combo in enumerate(combos):
        runs = results[i * per:(i + 1) * per]
        rows.append((statistics.mean(r.avg_jct for r in runs), combo, runs))
    rows.sort(key=lambda row: row[0])
    print(f"{args.algorithm} on workloads {', '.join(args.workloads)} ({args.cluster}"
          f"{', rigid' if args.rigid else ''}{', preset ' + args.preset if args.preset else ''})")
    for mean, combo, runs in rows:
        knobs = " ".join(f"{k}={v}" for k, v in combo.items())
        jcts = " ".join(f"{r.avg_jct:7.0f}" for r in runs)
        left = sum(r.unfinished for r in runs)
        print(f"{knobs:60s} {jcts}  mean {mean:7.0f}  preempt "
              f"{statistics.mean(r.preemptions for r in runs):6.1f}  rescale "
              f"{statistics.mean(r.rescales for r in runs):6.1f}"
              + (f"  ({left} unfinished)" if left else ""))


if __name__ == "__main__":
    main()
