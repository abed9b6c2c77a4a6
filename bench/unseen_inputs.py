"""Voda against Pollux on inputs its knobs were not chosen on.

`bench/quality.py` compares Voda with Pollux's published results on the 16 runs of the
Pollux workloads (workloads 1-4 at loads 0.5-2.0 on 16 x 4 GPUs), the runs its knobs were
chosen on. This bench runs both, simulated here under the same settings (`--preset
pollux`, the batch-adaptive job model), on three kinds of other inputs, 16 runs each:

- `jitter:S`: the same workloads, each arrival moved by up to ±`--jitter` seconds
  (seed S);
- `cluster:NxG`: the same workloads on another cluster shape;
- `resampled:S`: at each load L, four workloads of 160 x L jobs drawn with replacement
  from the four Pollux workloads, arriving uniformly over eight hours (seeds S, S+1, S+2,
  S+3; voda.sim.resample): the job mix and the load without the trace's bursts.

Per input set it prints Voda's average JCTs summed over Pollux's (the issue's mean), the
worst run, the mean p99 over Pollux's mean p99, the runs whose p99 is above Pollux's, the
p99 of every job of the set's runs pooled over Pollux's (voda.sim.tail), and the ratio per
load. For a jitter set it also counts, for each side, the runs whose p99 is above the p99
Pollux's artifact published for the unmoved run: with `--jitter 5` that shows how often a
run's p99 lands on either side of one published figure by chance (Pollux itself
included). Pollux runs its optimiser every 60 s round, so a set takes minutes.

Run: .venv/bin/python bench/unseen_inputs.py [--sets jitter:1,cluster:8x8,resampled:11]
     [--jitter 300] [--algorithm Voda] [--param NAME=VALUE ...] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from voda.cli.params import parse_param_items
from voda.core.allocation.registry import BUILTIN_NAMES
from voda.sim.compare import RunRequest, run_many
from voda.sim.published import WORKLOADS, published
from voda.sim.report import SimResult
from voda.sim.resample import POLLUX_JOBS_AT_LOAD_1, write_resampled
from voda.sim.tail import TailRun, p99, tail_readings
from voda.sim.workloads import LOADS

DEFAULT_SETS = ("jitter:1,jitter:3,jitter:4,jitter:5,cluster:8x4,cluster:32x4,cluster:8x8,"
                "resampled:11,resampled:21")
BASELINE = "Pollux"


@dataclass(frozen=True)
class Run:
    """One of a set's 16 runs: the load it is at and the request for each algorithm."""

    load: str
    request: RunRequest
    published_p99: float | None = None  # Pollux's published p99 of the unmoved run (jitter)


def runs_of(spec: str, jitter: float, folder: Path) -> list[Run]:
    """The 16 runs of an input set (`jitter:S`, `cluster:NxG` or `resampled:S`), as
    requests for the baseline (the algorithm is set per run)."""
    kind, _, value = spec.partition(":")
    if kind not in ("jitter", "cluster", "resampled") or not value or (
            kind != "cluster" and not value.isdigit()):
        raise ValueError(f"{spec!r}: expected jitter:SEED, cluster:NxG or resampled:SEED")
    base = RunRequest("", "16x4", BASELINE, preset="pollux", job_model="adaptive")
    if kind == "jitter":
        return [Run(load, replace(base, workload=f"{w}@{load}", jitter=jitter, seed=int(value)),
                    p99(list(published("pollux", load).jct[w].values())))
                for load in LOADS for w in WORKLOADS]
    if kind == "cluster":
        return [Run(load, replace(base, workload=f"{w}@{load}", cluster=value))
                for load in LOADS for w in WORKLOADS]
    runs = []
    for load in LOADS:  # resampled
        count = round(POLLUX_JOBS_AT_LOAD_1 * float(load))
        for seed in range(int(value), int(value) + 4):
            path = write_resampled(folder / f"resampled-{seed}-{count}.csv", count, seed)
            runs.append(Run(load, replace(base, workload=str(path))))
    return runs


def summary(ours: list[SimResult], theirs: list[SimResult], loads: list[str]
            ) -> dict[str, float | str]:
    ratios = [o.avg_jct / t.avg_jct for o, t in zip(ours, theirs, strict=True)]
    per_load = []
    for load in LOADS:
        pairs = [(o, t) for o, t, lo in zip(ours, theirs, loads, strict=True) if lo == load]
        per_load.append(sum(o.avg_jct for o, _ in pairs) / sum(t.avg_jct for _, t in pairs))
    tail = tail_readings([TailRun(load, o.finished_jcts, t.finished_jcts)
                          for o, t, load in zip(ours, theirs, loads, strict=True)])
    return {
        "mean": sum(o.avg_jct for o in ours) / sum(t.avg_jct for t in theirs),
        "worst": max(ratios),
        "p99": tail.mean_p99,
        "above": tail.runs_above,
        "pooled": tail.pooled,
        "per_load": " / ".join(f"{r:.3f}" for r in per_load),
    }


def above_published(results: list[SimResult], runs: list[Run]) -> int | None:
    """The runs whose p99 is above Pollux's published p99 of the unmoved run; None for a
    set with no published figures (another cluster, resampled workloads)."""
    if any(r.published_p99 is None for r in runs):
        return None
    return sum(res.p99_jct > run.published_p99
               for res, run in zip(results, runs, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=DEFAULT_SETS,
                        help="comma-separated input sets: jitter:SEED, cluster:NxG, "
                             "resampled:SEED")
    parser.add_argument("--jitter", type=float, default=300.0,
                        help="seconds an arrival may move in a jitter set")
    parser.add_argument("--algorithm", default="Voda")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="a knob of --algorithm (as `voda simulate --param`)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    try:
        params = tuple(parse_param_items(args.param).items())
    except ValueError as e:
        parser.error(f"--param: {e}")
    if args.algorithm not in BUILTIN_NAMES:
        parser.error(f"--algorithm: {args.algorithm!r} is not one of {', '.join(BUILTIN_NAMES)}")
    specs = [s.strip() for s in args.sets.split(",") if s.strip()]
    console = Console(width=150)
    table = Table(title=f"{args.algorithm} against {BASELINE} simulated on the same inputs")
    for column in ("inputs", "mean", "worst run", "p99", "p99 above", "pooled p99",
                   "per load 0.5-2.0", "above published (ours / Pollux)"):
        table.add_column(column, justify="left" if column == "inputs" else "right")
    above = total = 0
    with tempfile.TemporaryDirectory() as folder:
        try:  # every set built before any runs, so a bad one stops nothing half-done
            sets = [(spec, runs_of(spec, args.jitter, Path(folder))) for spec in specs]
        except ValueError as e:
            parser.error(f"--sets: {e}")
        for spec, runs in sets:
            requests = [replace(r.request, algorithm=args.algorithm, params=params)
                        for r in runs] + [r.request for r in runs]
            results = run_many(requests, args.workers)
            ours, theirs = results[:len(runs)], results[len(runs):]
            row = summary(ours, theirs, [r.load for r in runs])
            above += int(row["above"])
            total += len(runs)
            ours_over, theirs_over = above_published(ours, runs), above_published(theirs, runs)
            over = "-" if ours_over is None else f"{ours_over} / {theirs_over} of {len(runs)}"
            table.add_row(spec, f"{row['mean']:.3f}", f"{row['worst']:.3f}",
                          f"{row['p99']:.3f}", f"{row['above']} of {len(runs)}",
                          f"{row['pooled']:.3f}", str(row["per_load"]), over)
            console.print(f"{spec}: mean {row['mean']:.4f}, worst {row['worst']:.3f}, "
                          f"p99 {row['p99']:.3f}, p99 above in {row['above']} of {len(runs)}, "
                          f"pooled p99 {row['pooled']:.3f}, above the published p99 {over}")
    console.print(table)
    console.print(f"runs with p99 above {BASELINE}'s: {above} of {total}")


if __name__ == "__main__":
    main()
