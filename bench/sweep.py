"""Sweep an algorithm's knobs on the Pollux workloads: mean average JCT and preemptions.

    .venv/bin/python bench/sweep.py --algorithm Tiresias \
        --grid "queue_thresholds=3600;14400;57600" --grid "starvation_knob=none;2;8" \
        [--workloads 1 2 3 4] [--cluster 16x4] [--rigid] [--preset pollux]
        [--jitter SECONDS --seeds N]

Each --grid NAME=V1;V2;... gives the values of one knob (each read as `voda simulate
--param` reads a value, so "3600,14400" is a two-threshold list); every combination
runs on every workload (load 1.0). One line per combination, best mean JCT first:
the average JCT per workload, their mean, and the mean preemptions and rescales.
Results are deterministic; there is nothing to take a median of. With --jitter, each
workload also runs with its arrivals moved by up to that many seconds under N seeds
(replicas that show which differences outlast the chance of one trace); the figures
per workload are then the mean over its replicas.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from dataclasses import dataclass
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
    parser.add_argument("--jitter", type=float, default=0.0)
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    seeds = list(range(1, args.seeds + 1)) if args.jitter > 0 else [0]
    grid = parse_grid(args.grid)
    combos = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    requests = [
        RunRequest(f"workload-{w}", args.cluster, args.algorithm, rigid=args.rigid,
                   preset=args.preset, params=tuple(sorted(combo.items())),
                   jitter=args.jitter, seed=seed)
        for combo in combos for w in args.workloads for seed in seeds
    ]
    results = run_many(requests)
    per = len(args.workloads) * len(seeds)
    rows = []
    for i, combo in enumerate(combos):
        replicas = results[i * per:(i + 1) * per]
        runs = [_mean_of(replicas[j:j + len(seeds)]) for j in range(0, per, len(seeds))]
        rows.append((statistics.mean(r.avg_jct for r in runs), combo, runs))
    rows.sort(key=lambda row: row[0])
    jitter = f", arrivals jittered by {args.jitter:g} s x {len(seeds)} seeds" if args.jitter else ""
    print(f"{args.algorithm} on workloads {', '.join(args.workloads)} ({args.cluster}"
          f"{', rigid' if args.rigid else ''}{', preset ' + args.preset if args.preset else ''}"
          f"{jitter})")
    for _, combo, runs in rows:
        print(summary_line(" ".join(f"{k}={v}" for k, v in combo.items()), runs, width=60))


def summary_line(label: str, runs: list, width: int = 16) -> str:
    """One row: the average JCT of each run, their mean, mean preemptions and rescales."""
    jcts = " ".join(f"{r.avg_jct:8.0f}" for r in runs)
    left = sum(r.unfinished for r in runs)
    return (f"{label:{width}s} {jcts}  mean {statistics.mean(r.avg_jct for r in runs):7.0f}"
            f"  preempt {statistics.mean(r.preemptions for r in runs):6.1f}"
            f"  rescale {statistics.mean(r.rescales for r in runs):6.1f}"
            + (f"  ({left} jobs unfinished)" if left else ""))


@dataclass
class _Mean:
    avg_jct: float
    preemptions: float
    rescales: float
    unfinished: int


def _mean_of(results: list) -> _Mean:
    return _Mean(statistics.mean(r.avg_jct for r in results),
                 statistics.mean(r.preemptions for r in results),
                 statistics.mean(r.rescales for r in results),
                 sum(r.unfinished for r in results))


if __name__ == "__main__":
    main()
