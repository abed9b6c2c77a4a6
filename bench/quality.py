"""Schedule quality on the Pollux workloads 1-4 at loads 0.5, 1.0, 1.5 and 2.0.

Every algorithm runs under the Pollux artifact's simulator settings (`--preset
pollux`: 16 nodes x 4 GPUs, 60 s rounds, 30 s restart penalty) on the job model of
its published counterpart: Tiresias on rigid jobs, Optimus on fixed-batch jobs,
and every other algorithm on the batch-adaptive jobs Pollux schedules (the jobs
pick their batch by goodput whatever the scheduler does).

It prints:

1. the baselines against the published results (voda/data/pollux/published):
   Tiresias and Optimus job by job (how many JCTs match, and the difference of the
   average), Pollux by its average JCT per workload;
2. per algorithm and load: the average JCT, p99 JCT, makespan and GPU-hours the jobs
   held (means over the four workloads), rescales and preemptions per job, and the
   average JCT over Pollux's published one;
3. per algorithm: the mean of the 16 average JCTs over Pollux's published mean, the
   worst workload's ratio, and the p99 read four ways against Pollux's published one
   (voda.sim.tail): the mean p99 over Pollux's mean p99, in how many runs it is above
   Pollux's, the workload whose p99s summed over its loads are highest against Pollux's,
   and the p99 of every job of every run pooled;
4. with `--by-application`: per algorithm and load, what each application (a job's
   name without its number: cifar10, yolov3, ...) adds to the difference between the
   average JCT and Pollux's published one, so a gain or a loss can be traced to the
   jobs that make it.

Runs go in parallel over `--workers` processes (default: every core), with a
progress bar. `--rounds-only` steps every algorithm in the 60 s rounds alone (Voda
otherwise decides at arrivals between them too, as the service does: voda.sim.runner).

Run: .venv/bin/python bench/quality.py [--algorithms Pollux,Optimus] [--loads 1.0]
     [--workloads workload-1] [--workers N] [--json FILE] [--param NAME=VALUE ...]
     [--by-application] [--rounds-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from voda.cli.params import parse_param_items
from voda.core.allocation.registry import BUILTIN_NAMES
from voda.sim.compare import RunRequest, run_one
from voda.sim.published import REPRODUCTIONS, WORKLOADS, published
from voda.sim.report import SimResult
from voda.sim.tail import TailRun, p99, tail_readings
from voda.sim.workloads import LOADS

JOB_MODELS = {algorithm: model for model, algorithm in REPRODUCTIONS.values()}
DEFAULT_JOB_MODEL = "adaptive"
# Rough relative cost, so the longest runs start first.
LOAD_COST = {"0.5": 1, "1.0": 2, "1.5": 4, "2.0": 6}

Key = tuple[str, str, str]  # (algorithm, workload, load)


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def request(algorithm: str, workload: str, load: str,
            params: Mapping[str, Any] | None = None, rounds_only: bool = False) -> RunRequest:
    return RunRequest(f"{workload}@{load}", "16x4", algorithm, preset="pollux",
                      job_model=JOB_MODELS.get(algorithm, DEFAULT_JOB_MODEL),
                      params=tuple((params or {}).items()),
                      arrival_decisions=False if rounds_only else None)


def run_all(keys: list[Key], workers: int, params: Mapping[str, Any] | None = None,
            rounds_only: bool = False) -> dict[Key, SimResult]:
    keys = sorted(keys, key=lambda k: -LOAD_COST[k[2]])
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    results: dict[Key, SimResult] = {}
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar, \
            ProcessPoolExecutor(max_workers=workers) as pool:
        task = bar.add_task("simulating", total=len(keys))
        futures = {pool.submit(run_one, request(*key, params, rounds_only)): key
                   for key in keys}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            bar.advance(task)
    return results


def baseline_table(results: dict[Key, SimResult], workloads: list[str], loads: list[str]
                   ) -> Table:
    table = Table(title="Baselines against the published results", box=None, padding=(0, 1))
    for column in ("policy", "load", "jobs matching", "avg JCT", "published", "difference"):
        table.add_column(column, justify="right" if column != "policy" else "left")
    for policy, (_, algorithm) in REPRODUCTIONS.items():
        for load in loads:
            keys = [(algorithm, w, load) for w in workloads if (algorithm, w, load) in results]
            if not keys:
                continue
            ref = published(policy, load)
            matching = total = 0
            ours, theirs = [], []
            for key in keys:
                expected = ref.jct[key[1]]
                jobs = results[key].jobs
                matching += sum(1 for j in jobs if j.jct == expected.get(j.name))
                total += len(jobs)
                ours.append(results[key].avg_jct)
                theirs.append(ref.avg_jct[key[1]])
            mine, pub = statistics.mean(ours), statistics.mean(theirs)
            worst = max(abs(a / b - 1) for a, b in zip(ours, theirs, strict=True))
            table.add_row(policy, load, f"{matching}/{total}", f"{mine:,.1f}", f"{pub:,.1f}",
                          f"{(mine / pub - 1) * 100:+.2f} % (worst workload "
                          f"{worst * 100:.2f} %)")
    return table


def per_workload_table(results: dict[Key, SimResult], algorithm: str, policy: str,
                       workloads: list[str], loads: list[str]) -> Table:
    table = Table(title=f"{algorithm}: average JCT per workload against published {policy}",
                  box=None, padding=(0, 1))
    table.add_column("load")
    for w in workloads:
        table.add_column(w, justify="right")
    for load in loads:
        ref = published(policy, load)
        cells = []
        for w in workloads:
            r = results.get((algorithm, w, load))
            theirs = ref.avg_jct[w]
            cells.append("-" if r is None else
                         f"{r.avg_jct:,.0f} / {theirs:,.0f} ({r.avg_jct / theirs:.3f})")
        table.add_row(load, *cells)
    return table


def main_table(results: dict[Key, SimResult], algorithms: list[str], workloads: list[str],
               loads: list[str]) -> Table:
    table = Table(title="Mean over workloads; ratio = average JCT / Pollux published",
                  box=None, padding=(0, 1))
    for column in ("algorithm", "load", "avg JCT", "p99 JCT", "makespan", "GPU-h",
                   "rescales/job", "preempt/job", "ratio"):
        table.add_column(column, justify="left" if column == "algorithm" else "right")
    for load in loads:
        ref = published("pollux", load)
        pub_avg = statistics.mean(ref.avg_jct[w] for w in workloads)
        pub_p99 = statistics.mean(p99(list(ref.jct[w].values())) for w in workloads)
        table.add_row("Pollux (published)", load, f"{pub_avg:,.0f}", f"{pub_p99:,.0f}",
                      "", "", "", "", "1.000")
        for algorithm in algorithms:
            rs = [results[(algorithm, w, load)] for w in workloads
                  if (algorithm, w, load) in results]
            if not rs:
                continue
            jobs = sum(len(r.jobs) for r in rs)
            avg = statistics.mean(r.avg_jct for r in rs)
            table.add_row(
                algorithm, load, f"{avg:,.0f}", f"{statistics.mean(r.p99_jct for r in rs):,.0f}",
                f"{statistics.mean(r.makespan for r in rs):,.0f}",
                f"{statistics.mean(r.gpu_hours for r in rs):,.0f}",
                f"{sum(r.rescales + r.migrations for r in rs) / jobs:.2f}",
                f"{sum(r.preemptions for r in rs) / jobs:.2f}", f"{avg / pub_avg:.3f}")
    return table


def summary_table(results: dict[Key, SimResult], algorithms: list[str], workloads: list[str],
                  loads: list[str]) -> Table:
    table = Table(title="Over every workload and load, against Pollux published",
                  box=None, padding=(0, 1))
    for column in ("algorithm", "runs", "mean avg JCT ratio", "worst workload", "mean p99 ratio",
                   "runs p99 above", "worst workload p99", "pooled p99", "unfinished"):
        table.add_column(column, justify="left" if column == "algorithm" else "right")
    for algorithm in algorithms:
        keys = [(algorithm, w, load) for load in loads for w in workloads
                if (algorithm, w, load) in results]
        if not keys:
            continue
        ours = [results[k].avg_jct for k in keys]
        theirs = [published("pollux", k[2]).avg_jct[k[1]] for k in keys]
        worst = max(keys, key=lambda k: results[k].avg_jct
                    / published("pollux", k[2]).avg_jct[k[1]])
        worst_ratio = results[worst].avg_jct / published("pollux", worst[2]).avg_jct[worst[1]]
        tail = tail_readings([TailRun(k[1], results[k].finished_jcts,
                                      list(published("pollux", k[2]).jct[k[1]].values()))
                              for k in keys])
        table.add_row(algorithm, str(len(keys)),
                      f"{statistics.mean(ours) / statistics.mean(theirs):.3f}",
                      f"{worst_ratio:.3f} ({worst[1]}@{worst[2]})",
                      f"{tail.mean_p99:.3f}", str(tail.runs_above),
                      f"{tail.worst_group_ratio:.3f} ({tail.worst_group})",
                      f"{tail.pooled:.3f}",
                      str(sum(results[k].unfinished for k in keys)))
    return table


def application(job_name: str) -> str:
    """A Pollux workload job's application: its name without the number (yolov3-41)."""
    return job_name.rsplit("-", 1)[0]


def by_application_table(results: dict[Key, SimResult], algorithm: str, workloads: list[str],
                         loads: list[str]) -> Table:
    """Per load and application: seconds it adds to (average JCT - Pollux published),
    averaged over the workloads as the main table's average is."""
    table = Table(title=f"{algorithm}: what each application adds to the average JCT's "
                  "difference from Pollux published", box=None, padding=(0, 1))
    for column in ("load", "application", "jobs", "avg JCT", "published", "ratio",
                   "adds (s)", "of the average"):
        table.add_column(column, justify="left" if column == "application" else "right")
    for load in loads:
        ref = published("pollux", load)
        runs = [(w, results[(algorithm, w, load)]) for w in workloads
                if (algorithm, w, load) in results]
        if not runs:
            continue
        pub_avg = statistics.mean(ref.avg_jct[w] for w, _ in runs)
        ours: dict[str, list[float]] = {}
        theirs: dict[str, list[float]] = {}
        adds: dict[str, float] = {}
        for w, result in runs:
            done = [j for j in result.jobs if j.jct is not None]
            for job in done:
                app = application(job.name)
                pub = ref.jct[w][job.name]
                ours.setdefault(app, []).append(float(job.jct or 0.0))
                theirs.setdefault(app, []).append(float(pub))
                adds[app] = adds.get(app, 0.0) + (float(job.jct or 0.0) - pub) / len(done)
        for app in sorted(adds, key=adds.__getitem__):
            added = adds[app] / len(runs)
            table.add_row(load, app, str(len(ours[app])), f"{statistics.mean(ours[app]):,.0f}",
                          f"{statistics.mean(theirs[app]):,.0f}",
                          f"{sum(ours[app]) / sum(theirs[app]):.3f}", f"{added:+,.1f}",
                          f"{added / pub_avg:+.3f}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default=",".join(BUILTIN_NAMES))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--loads", default=",".join(LOADS))
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", help="also write every run's figures to this file")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="a knob of the algorithms run (repeatable; for an ablation)")
    parser.add_argument("--by-application", action="store_true",
                        help="also show what each application adds to the difference")
    parser.add_argument("--rounds-only", action="store_true",
                        help="no decisions at arrivals between rounds (for an ablation)")
    args = parser.parse_args()
    algorithms, workloads, loads = (_names(args.algorithms), _names(args.workloads),
                                    _names(args.loads))
    for load in loads:
        if load not in LOADS:
            parser.error(f"--loads: {load!r} is not one of {', '.join(LOADS)}")
    for w in workloads:
        if w not in WORKLOADS:
            parser.error(f"--workloads: {w!r} is not one of {', '.join(WORKLOADS)}")
    try:
        params = parse_param_items(args.param)
    except ValueError as e:
        parser.error(f"--param: {e}")
    keys = [(a, w, load) for a in algorithms for w in workloads for load in loads]
    started = time.perf_counter()
    results = run_all(keys, max(1, args.workers), params, args.rounds_only)
    out = Console(width=200)
    out.print(f"{len(keys)} simulations in {time.perf_counter() - started:.0f} s "
              f"on {args.workers} processes")
    out.print(baseline_table(results, workloads, loads))
    if "Pollux" in algorithms:
        out.print(per_workload_table(results, "Pollux", "pollux", workloads, loads))
    out.print(main_table(results, algorithms, workloads, loads))
    out.print(summary_table(results, algorithms, workloads, loads))
    if args.by_application:
        for algorithm in algorithms:
            out.print(by_application_table(results, algorithm, workloads, loads))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"algorithm": k[0], "workload": k[1], "load": k[2],
                        **{m: getattr(r, m) for m in ("avg_jct", "p99_jct", "makespan",
                                                      "gpu_hours", "rescales", "migrations",
                                                      "preemptions", "unfinished")}}
                       for k, r in sorted(results.items())], f, indent=1)


if __name__ == "__main__":
    main()
