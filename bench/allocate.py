"""Time one allocation of every built-in algorithm at several sizes.

    .venv/bin/python bench/allocate.py [--repeats N] [--seed S]
    .venv/bin/python bench/allocate.py --scaling [--repeats N] [--seed S]
    .venv/bin/python bench/allocate.py --explanations [--repeats N] [--seed S]
    .venv/bin/python bench/allocate.py --queues [--repeats N] [--seed S | --seeds S1,S2]
    (the table and --queues also take --algorithms A,B: those built-in algorithms only)

Prints, per algorithm, the median CPU seconds of one call at 100, 1,000 and 10,000
active jobs on 64, 512, 4,096 and 32,768 GPUs, the ratio of the 10,000-job to the
1,000-job time at each capacity (10 would be linear growth; n log n is about 13), and
the two target cells against their targets. CPU time (time.process_time), not wall
time: on a shared machine it is the less disturbed by the load.
The jobs are seeded and mixed: elastic and rigid, with and without measured
epoch times, running and waiting, with attained service on both sides of the
Tiresias threshold.

Targets (TARGETS): Pollux and Voda at most 20 ms at 1,000 jobs on 4,096 GPUs and
200 ms at 10,000 jobs on 32,768 GPUs; every other built-in algorithm 5 ms and 50 ms.

`--scaling` fits, per algorithm, the exponent k of time ~ size^k (least squares on
logs) in three series: jobs from 250 to 8,000 on 4,096 GPUs; GPUs from 1,024 to
32,768 under 1,000 jobs; and both together, 250 to 10,000 jobs on 3.2768 GPUs a job
(819 to 32,768 GPUs). docs/design/001-allocation.md gives the exponents.

`--explanations` times, at 1,000 jobs on 4,096 GPUs, one allocation without and with
the reasons decide() adds (voda.core.allocation.reasons.explain: a Reason for every job
below its max). decide() defers them (Deferred), so they cost the decision path only
their hand-over until the engine reads them, once the plan's actions are out; both are
printed: 'with' (target: at most 1.10 x 'without') and '+ read' (worked out too).

`--queues` times, at 1,000 jobs on 4,096 GPUs, one allocation without and with 50 team
queues (voda.core.quotas; CPU-time medians; what the queues add is the median of the
differences of back-to-back pairs, the two calls of a pair interleaved `--repeats`
times). Target: the queues add at most 5 ms.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from voda.core.allocation import registry
from voda.core.allocation.reasons import Deferred, explain
from voda.core.model import Job, JobStatus
from voda.core.quotas import Queue, QueueSet, with_queues

JOB_COUNTS = (100, 1_000, 10_000)
CAPACITIES = (64, 512, 4_096, 32_768)
TARGET_CELLS = ((1_000, 4_096), (10_000, 32_768))
# Seconds at TARGET_CELLS: the exact programs over GPU counts, and every other algorithm.
TARGETS = {"Pollux": (0.020, 0.200), "Voda": (0.020, 0.200)}
DEFAULT_TARGETS = (0.005, 0.050)

SCALING_JOBS = (250, 500, 1_000, 2_000, 4_000, 8_000)  # on SCALING_GPUS
SCALING_GPUS = 4_096
SCALING_CAPACITIES = (1_024, 2_048, 4_096, 8_192, 16_384, 32_768)  # under 1,000 jobs
BOTH_JOBS = (250, 500, 1_000, 2_500, 5_000, 10_000)
GPUS_PER_JOB = 3.2768  # BOTH_JOBS on 819 to 32,768 GPUs


def make_jobs(count: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for i in range(count):
        lo = rng.choice((1, 1, 2, 4))
        hi = lo if rng.random() < 0.3 else lo * rng.choice((2, 4))
        known = rng.random() < 0.7
        times = {}
        if known:
            one = rng.uniform(30.0, 600.0)
            serial = rng.uniform(0.0, 0.3)
            times = {k: one * (serial + (1 - serial) / k) for k in sorted({1, lo, hi})}
        running = rng.random() < 0.4
        attained = rng.uniform(0.0, 8_000.0)
        jobs.append(
            Job(
                name=f"job-{i:05d}",
                min_workers=lo,
                max_workers=hi,
                preferred_workers=rng.randint(lo, hi) if rng.random() < 0.5 else None,
                submit_time=float(rng.randint(0, count)),
                epochs=rng.randint(1, 100),
                completed_epochs=0.0,
                status=JobStatus.RUNNING if running else JobStatus.WAITING,
                current_workers=lo if running else 0,
                attained_gpu_seconds=attained,
                attained_gpu_seconds_since_start=attained / 2,
                running_seconds=attained / lo,
                running_seconds_since_start=attained / lo / 2,
                waiting_seconds_since_start=0.0 if running else rng.uniform(0.0, 50_000.0),
                first_start_time=float(i) if attained > 0 else None,
                epoch_time_by_workers=times,
            )
        )
    return jobs


def median_seconds(algorithm, jobs: Sequence[Job], capacity: int, repeats: int) -> float:
    """Median CPU time of one call; garbage collection off while timing, as timeit does."""
    samples = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            started = time.process_time()
            algorithm(jobs, capacity)
            samples.append(time.process_time() - started)
    finally:
        gc.enable()
    return statistics.median(samples)


EXPLAIN_JOBS, EXPLAIN_CAPACITY = 1_000, 4_096
EXPLAIN_TARGET_RATIO = 1.10


def with_explanations(algorithm, read: bool):
    """The algorithm followed by its explanations as decide() hands them over: deferred
    (voda.core.allocation.reasons.Deferred), and with `read` also worked out, as the
    engine does once the plan's actions are out."""
    def allocate_and_explain(jobs: Sequence[Job], capacity: int) -> dict:
        allocation = algorithm(jobs, capacity)
        reasons = Deferred(partial(explain, algorithm, jobs, capacity, allocation))
        if read:
            len(reasons)
        return allocation
    return allocate_and_explain


def explanations(repeats: int, seed: int) -> int:
    """Median seconds without and with explanations, interleaved so load hits all alike."""
    jobs = make_jobs(EXPLAIN_JOBS, seed)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"median seconds of one allocation, {EXPLAIN_JOBS} jobs on {EXPLAIN_CAPACITY} GPUs, "
          f"without and with explanations ({os.cpu_count()} CPUs, load average {load:.1f})")
    print("  'with': what decide() adds before the plan's actions go out (the reasons, "
          "deferred);\n  '+ read': the reasons worked out too, as the engine does once "
          "the actions are out")
    print(f"{'algorithm':<16}{'without':>10}{'with':>10}{'ratio':>7}{'+ read':>10}"
          f"{'ratio':>7}{'reasons':>9}")
    over = 0
    totals = [0.0, 0.0, 0.0]
    for name in registry.BUILTIN_NAMES:
        algorithm = registry.create(name)
        deferred = with_explanations(algorithm, read=False)
        worked_out = with_explanations(algorithm, read=True)
        samples: list[list[float]] = [[], [], []]
        for _ in range(repeats):  # alternate, so a burst of load does not favour one side
            for i, call in enumerate((algorithm, deferred, worked_out)):
                samples[i].append(median_seconds(call, jobs, EXPLAIN_CAPACITY, 1))
        a, b, c = (statistics.median(x) for x in samples)
        for i, value in enumerate((a, b, c)):
            totals[i] += value
        reasons = len(explain(algorithm, jobs, EXPLAIN_CAPACITY,
                              algorithm(jobs, EXPLAIN_CAPACITY)))
        ratio = b / a
        over += ratio > EXPLAIN_TARGET_RATIO
        print(f"{name:<16}{a:>10.5f}{b:>10.5f}{ratio:>7.3f}{c:>10.5f}{c / a:>7.3f}"
              f"{reasons:>9}" + ("" if ratio <= EXPLAIN_TARGET_RATIO else "  OVER"))
    a, b, c = totals
    print(f"{'all together':<16}{a:>10.5f}{b:>10.5f}{b / a:>7.3f}{c:>10.5f}{c / a:>7.3f}")
    print(f"target: 'with' at most {EXPLAIN_TARGET_RATIO:.2f} x 'without'")
    return 0 if not over else 1


QUEUE_COUNT, QUEUE_TARGET_SECONDS = 50, 0.005


def team_queues(jobs: Sequence[Job], seed: int) -> tuple[list[Job], QueueSet]:
    """50 queues sharing 3/4 of the 4,096 GPUs as guarantees (some with borrowing and
    lending limits, weights 1 to 3), and the jobs spread over them (some in none)."""
    rng = random.Random(seed)
    queues = tuple(Queue(f"team-{i}", {"default": 3 * EXPLAIN_CAPACITY // 4 // QUEUE_COUNT},
                         {"default": rng.choice([16, 64, 256])} if i % 3 == 0 else None,
                         {"default": rng.choice([8, 32])} if i % 4 == 0 else None,
                         float(rng.choice([1, 2, 3])))
                   for i in range(QUEUE_COUNT))
    spread = [replace(j, queue=f"team-{rng.randrange(QUEUE_COUNT + 5)}") for j in jobs]
    return spread, QueueSet(queues)


def cpu_median(call, jobs: Sequence[Job], capacity: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.process_time()
        call(jobs, capacity)
        samples.append(time.process_time() - started)
    return statistics.median(samples)


def queue_cost(repeats: int, seed: int, names: Sequence[str] = registry.BUILTIN_NAMES) -> int:
    """CPU-time medians of one allocation without and with 50 queues, interleaved."""
    jobs, queues = team_queues(make_jobs(EXPLAIN_JOBS, seed), seed)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"CPU seconds (median) of one allocation, {EXPLAIN_JOBS} jobs on {EXPLAIN_CAPACITY} "
          f"GPUs, without and with {QUEUE_COUNT} queues, seed {seed} ({os.cpu_count()} CPUs, "
          f"load average {load:.1f})")
    print(f"{'algorithm':<16}{'without':>10}{'queues':>10}{'added ms':>10}")
    over = 0
    for name in names:
        algorithm = registry.create(name)
        queued = with_queues(algorithm, queues)
        a_s: list[float] = []
        b_s: list[float] = []
        for _ in range(repeats):
            a_s.append(cpu_median(algorithm, jobs, EXPLAIN_CAPACITY, 1))
            b_s.append(cpu_median(queued, jobs, EXPLAIN_CAPACITY, 1))
        a, b = statistics.median(a_s), statistics.median(b_s)
        # the median of each pair's difference: the machine's speed drifts between pairs,
        # and a pair's two calls run back to back
        added = statistics.median(q - p for p, q in zip(a_s, b_s, strict=True))
        over += added > QUEUE_TARGET_SECONDS
        print(f"{name:<16}{a:>10.5f}{b:>10.5f}{added * 1000:>10.2f}"
              + ("" if added <= QUEUE_TARGET_SECONDS else "  OVER"))
    print(f"target: the queues add at most {QUEUE_TARGET_SECONDS * 1000:.0f} ms")
    return 0 if not over else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--explanations", action="store_true",
                        help="compare one allocation without and with explanations")
    parser.add_argument("--scaling", action="store_true",
                        help="fit how the time of one allocation grows with jobs and GPUs")
    parser.add_argument("--queues", action="store_true",
                        help=f"the cost of {QUEUE_COUNT} team queues (voda.core.quotas)")
    parser.add_argument("--algorithms", default=",".join(registry.BUILTIN_NAMES),
                        help="comma-separated built-in algorithms (default: all)")
    parser.add_argument("--seeds", default=None,
                        help="with --queues: comma-separated seeds, each a table (default: "
                        "--seed)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.algorithms.split(",") if n.strip()]
    unknown = [n for n in names if n not in registry.BUILTIN_NAMES]
    if unknown or not names:
        parser.error(f"--algorithms: unknown {unknown}; built in: "
                     f"{', '.join(registry.BUILTIN_NAMES)}")
    if args.queues:
        try:
            seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
        except ValueError:
            parser.error(f"--seeds: comma-separated integers, got {args.seeds!r}")
        return max(queue_cost(args.repeats, seed, names) for seed in seeds)
    if args.explanations:
        return explanations(args.repeats, args.seed)
    if args.scaling:
        return scaling(args.repeats, args.seed)

    workloads = {n: make_jobs(n, args.seed) for n in JOB_COUNTS}
    header = f"{'algorithm':<16}" + "".join(
        f"{f'{n}j/{c}g':>13}" for n in JOB_COUNTS for c in CAPACITIES
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"median CPU seconds of one allocation ({os.cpu_count()} CPUs, "
          f"load average {load:.1f})")
    print(header)
    results: dict[str, dict[tuple[int, int], float]] = {}
    for name in names:
        algorithm = registry.create(name)
        row = {}
        for n in JOB_COUNTS:
            for c in CAPACITIES:
                repeats = args.repeats if n < 10_000 else max(1, args.repeats // 2)
                row[(n, c)] = median_seconds(algorithm, workloads[n], c, repeats)
        results[name] = row
        print(f"{name:<16}" + "".join(f"{row[(n, c)]:>13.5f}" for n in JOB_COUNTS
                                       for c in CAPACITIES))
    print()
    print("ratio of 10,000-job to 1,000-job time (n log n ~ 13)")
    print(f"{'algorithm':<16}" + "".join(f"{f'{c} GPUs':>12}" for c in CAPACITIES))
    for name, row in results.items():
        print(f"{name:<16}" + "".join(
            f"{row[(10_000, c)] / row[(1_000, c)]:>12.1f}" for c in CAPACITIES))
    return 0 if against_targets(results) else 1


def against_targets(results: dict[str, dict[tuple[int, int], float]]) -> bool:
    """Print the TARGET_CELLS of every algorithm beside its targets; whether all are met."""
    print()
    print("against the targets, ms (CPU time, medians)")
    print(f"{'algorithm':<16}" + "".join(f"{f'{n}j/{c}g':>26}" for n, c in TARGET_CELLS))
    met = True
    for name, row in results.items():
        cells = ""
        for (n, c), target in zip(TARGET_CELLS, TARGETS.get(name, DEFAULT_TARGETS),
                                  strict=True):
            seconds = row[(n, c)]
            verdict = "ok" if seconds <= target else "OVER"
            met &= seconds <= target
            cells += f"{seconds * 1000:>11.2f} (target {target * 1000:>3.0f}) {verdict:<4}"
        print(f"{name:<16}{cells}")
    return met


def exponent(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """The k of seconds ~ size^k that fits best (least squares on logs)."""
    x = [math.log(v) for v in sizes]
    y = [math.log(max(v, 1e-9)) for v in seconds]
    mx, my = statistics.fmean(x), statistics.fmean(y)
    return (sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
            / sum((a - mx) ** 2 for a in x))


def scaling(repeats: int, seed: int) -> int:
    """Per algorithm, the exponent of the time of one allocation in jobs (on 4,096 GPUs),
    in GPUs (under 1,000 jobs), and in both together, with the times it is fitted to."""
    series = {
        "jobs": [(n, SCALING_GPUS, n) for n in SCALING_JOBS],
        "GPUs": [(1_000, c, c) for c in SCALING_CAPACITIES],
        "both": [(n, round(n * GPUS_PER_JOB), n) for n in BOTH_JOBS],
    }
    workloads = {n: make_jobs(n, seed) for n in {*SCALING_JOBS, *BOTH_JOBS, 1_000}}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"exponent k of CPU time ~ size^k, one allocation ({os.cpu_count()} CPUs, "
          f"load average {load:.1f})")
    for label, points in series.items():
        sizes = ", ".join(f"{n}j/{c}g" for n, c, _ in points)
        print(f"  {label}: {sizes}")
    print(f"{'algorithm':<16}" + "".join(f"{label:>8}" for label in series)
          + "   ms (both: smallest .. largest)")
    for name in registry.BUILTIN_NAMES:
        algorithm = registry.create(name)
        fits, both = [], []
        for points in series.values():
            times = [median_seconds(algorithm, workloads[n], c,
                                    repeats if n * c < 10_000_000 else max(1, repeats // 3))
                     for n, c, _ in points]
            fits.append(exponent([size for _, _, size in points], times))
            both = times
        print(f"{name:<16}" + "".join(f"{k:>8.2f}" for k in fits) + "   "
              + " ".join(f"{t * 1000:.2f}" for t in both), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
