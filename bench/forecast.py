"""How good, and how fast, is the forecast (voda.engine.forecast)?

1. Accuracy. Replay Pollux workloads through the simulator; at each decision, forecast
   every job present from the engine's state (what it measured: epoch times, epochs
   done; not the simulator's truth), assuming no new arrivals. Compare each forecast
   JCT (forecast finish - submit) with the job's actual JCT:
   relative error = |forecast - actual| / actual, and the signed one, whose median is
   the bias (negative: optimistic). "at submission": the first forecast that includes
   the job; "at each decision": every forecast of it. Printed per algorithm and load,
   with the bias of short and long jobs (below and above the median JCT).
2. Speed. Forecasting 1,000 jobs on 4,096 GPUs (bench/allocate.py's seeded job mix,
   all waiting): median wall time of several runs, per algorithm (target: 1 s).

Run: .venv/bin/python bench/forecast.py [--workloads workload-1] [--loads 0.5,1.0]
     [--algorithms ElasticFIFO,SRJF,Tiresias] [--every N] [--repeats 5] [--skip-speed]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from voda.core.model import Cluster, JobStatus, Plan
from voda.core.placement.registry import get_placer
from voda.engine.forecast import ForecastInput, forecast, snapshot
from voda.engine.scheduler import Scheduler, SchedulerObserver, SchedulerSettings
from voda.sim.cluster_file import parse_cluster
from voda.sim.presets import apply_preset
from voda.sim.runner import simulate
from voda.sim.workloads import load_workload

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allocate import make_jobs  # the seeded job mix of bench/allocate.py


class Recorder(SchedulerObserver):
    """Forecasts at every `every`-th decision; keeps (job, time, forecast finish)."""

    def __init__(self, scheduler: Scheduler, penalty: float, every: int) -> None:
        self.scheduler = scheduler
        self.penalty = penalty
        self.every = every
        self.decisions = 0
        self.points: list[tuple[str, float, float | None]] = []
        self.seconds: list[float] = []

    def on_plan(self, plan: Plan, now: float, seconds: float, allocation_seconds: float) -> None:
        self.decisions += 1
        if (self.decisions - 1) % self.every:
            return
        started = time.perf_counter()
        result = forecast(snapshot(self.scheduler, now, self.penalty))
        self.seconds.append(time.perf_counter() - started)
        for name, f in result.jobs.items():
            self.points.append((name, now, f.finish))


def errors(points: list[tuple[str, float, float | None]], submit: dict[str, float],
           actual: dict[str, float]) -> dict[str, Any]:
    first: dict[str, tuple[float, float | None]] = {}
    every, signed_every = [], []
    for name, _t, finish in points:
        if name not in actual:
            continue
        jct = actual[name]
        forecast_jct = (finish - submit[name]) if finish is not None else float("inf")
        first.setdefault(name, (jct, forecast_jct))
        every.append(abs(forecast_jct - jct) / jct)
        signed_every.append((forecast_jct - jct) / jct)
    at_submit = [abs(f - a) / a for a, f in first.values()]
    signed_submit = {name: (f - a) / a for name, (a, f) in first.items()}
    median_jct = statistics.median(actual.values())
    short = [v for n, v in signed_submit.items() if actual[n] <= median_jct]
    long = [v for n, v in signed_submit.items() if actual[n] > median_jct]

    def q(values: list[float], p: float) -> float:
        return float(np.percentile(values, p)) if values else float("nan")

    return {
        "submit_p50": q(at_submit, 50), "submit_p90": q(at_submit, 90),
        "each_p50": q(every, 50), "each_p90": q(every, 90),
        "bias_each": q(signed_every, 50), "bias_short": q(short, 50), "bias_long": q(long, 50),
        "forecasts": len(every),
    }


def bench_accuracy(workloads: list[str], loads: list[str], algorithms: list[str],
                   every: int) -> None:
    print("forecast JCT vs actual JCT: relative error |f - a| / a (median, p90); "
          "bias: median of (f - a) / a at submission, short / long jobs "
          "(below / above the median JCT); negative = optimistic")
    print(f"{'workload':<12}{'load':>5} {'algorithm':<12}{'at submission':>16}"
          f"{'at each decision':>20}{'bias each':>11}{'bias short':>12}{'bias long':>11}"
          f"{'forecasts':>10}{'s/forecast':>11}")
    for name in workloads:
        for load in loads:
            source = name if load == "1.0" else f"{name}@{load}"
            workload = load_workload(source)
            for algorithm in algorithms:
                settings = apply_preset(None, algorithm)
                holder: dict[str, Recorder] = {}

                def observe(s: Scheduler, settings=settings, holder=holder) -> Recorder:
                    holder["r"] = Recorder(s, settings.penalty, every)
                    return holder["r"]

                result = simulate(workload, parse_cluster("16x4"), settings, observe=observe)
                rec = holder["r"]
                submit = {j.name: j.submit for j in result.jobs}
                actual = {j.name: float(j.jct) for j in result.jobs if j.jct}
                e = errors(rec.points, submit, actual)
                print(f"{name:<12}{load:>5} {algorithm:<12}"
                      f"{e['submit_p50']:>8.1%}{e['submit_p90']:>8.1%}"
                      f"{e['each_p50']:>10.1%}{e['each_p90']:>10.1%}"
                      f"{e['bias_each']:>+11.1%}{e['bias_short']:>+12.1%}{e['bias_long']:>+11.1%}"
                      f"{e['forecasts']:>10d}{statistics.median(rec.seconds):>11.3f}",
                      flush=True)


def bench_speed(algorithms: list[str], placers: list[str], repeats: int) -> None:
    jobs = tuple(replace(j, status=JobStatus.WAITING, current_workers=0)
                 for j in make_jobs(1000, 1))
    cluster = Cluster.uniform(1024, 4)
    print(f"forecasting 1,000 jobs on 4,096 GPUs: median of {repeats} runs (target 1 s)")
    for algorithm in algorithms:
        for placer in placers:
            given = ForecastInput(
                jobs=jobs, nodes=cluster.nodes, placement={},
                settings=SchedulerSettings(algorithm=algorithm, rate_limit_seconds=30.0),
                placer=get_placer(placer), now=0.0)
            samples = []
            for _ in range(repeats):
                gc.collect()
                started = time.perf_counter()
                out = forecast(given)
                samples.append(time.perf_counter() - started)
            finished = sum(1 for f in out.jobs.values() if f.finish is not None)
            print(f"  {algorithm:<16}{placer:<10}{statistics.median(samples):8.3f} s  "
                  f"({out.decisions} decisions, resolution {out.resolution:.0f} s, "
                  f"{finished} jobs finish)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="workload-1")
    parser.add_argument("--loads", default="0.5,1.0,2.0")
    parser.add_argument("--algorithms", default="ElasticFIFO,SRJF,Tiresias")
    parser.add_argument("--speed-algorithms", default="ElasticFIFO,SRJF,Tiresias")
    parser.add_argument("--placers", default="naive,topology")
    parser.add_argument("--every", type=int, default=1, help="forecast every N-th decision")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-accuracy", action="store_true")
    args = parser.parse_args()
    if not args.skip_speed:
        bench_speed(args.speed_algorithms.split(","), args.placers.split(","), args.repeats)
    if not args.skip_accuracy:
        bench_accuracy(args.workloads.split(","), args.loads.split(","),
                       args.algorithms.split(","), args.every)


if __name__ == "__main__":
    main()
