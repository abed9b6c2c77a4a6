"""Team queues on the Philly trace: each busy virtual cluster a queue, per algorithm with
and without the queues (docs/design/013-queues.md, "Measured").

The Philly trace names each job's virtual cluster (`cluster`); the ones with at least
BUSY_SHARE of the trace's GPU-time are the teams, the others go to `default` (no
guarantee). Two settings: guarantees in proportion to each team's share of the trace's
GPU-time ("share"), and equal ones ("equal"); either way they add up to the cluster.
A window is the jobs arriving within `--hours` of a seeded start (at most `--jobs` of
them; a start giving fewer than MIN_WINDOW_JOBS is drawn again); the Philly reader
(voda.sim.workloads) reads it as a workload of its own, its first arrival at 0, every
job elastic from 1 GPU to its `num_gpus`. The cluster is sized to the window: the GPUs
its jobs would hold on average over its span, each from its arrival, divided by
`--load`, in nodes of 4 GPUs.

Per algorithm (`--algorithms`), setting and window, without and with queues: average and
p99 JCT overall and per queue, reclaim seconds p50/p99, guarantee violations,
finish-time fairness, GPUs reclaimed by shrinking and by preemption, and the idle GPUs
while jobs wait; each beside the issue's target:

- reclaim: within one decision (the rate limit, 60 s) plus the restart penalty (30 s) at
  p99; a reclaim is timed from the decision that takes GPUs back for a queue owed its
  guarantee to the first after which it holds them, plus the restart penalty
  (voda.sim.queue_stats);
- guarantee violations: 0;
- average JCT with queues within 5 % of the same algorithm without;
- more GPUs reclaimed by shrinking than by preemption;
- finish-time fairness: a job's rho is its JCT over its JCT with its queue's guarantee
  alone, measured: the queue's jobs simulated alone, same algorithm, on a cluster of its
  guarantee (one GPU nodes). Jobs of `default` (no guarantee) have none. Printed: the
  share of jobs with rho <= 1 and the worst rho;
- idle GPUs while jobs wait: the mean of (GPUs - GPUs held) over the time some job
  waits; every Philly job here can run on 1 GPU, so the rule "no GPU idle while a queue
  that may borrow has a job whose min fits" makes it 0 with queues.

Run: nice -n 5 .venv/bin/python bench/quotas_philly.py [--algorithms A,B] [--hours H]
     [--jobs N] [--windows K] [--seed S] [--load L] [--settings share,equal] [--per-queue]
"""

from __future__ import annotations

import argparse
import bisect
import csv
import math
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from voda.core.allocation.registry import BUILTIN_NAMES
from voda.core.quotas import DEFAULT_QUEUE, Queue, QueueSet
from voda.core.quotas.usage import apportion
from voda.sim.cluster_file import parse_cluster
from voda.sim.presets import apply_preset
from voda.sim.queues import QueueFile
from voda.sim.report import SimResult
from voda.sim.runner import simulate
from voda.sim.workloads import Workload, builtin_workload, load_workload

BUSY_SHARE = 0.005  # a virtual cluster with this share of the trace's GPU-time is a team
SETTINGS = ("share", "equal")
DEFAULT_ALGORITHMS = "ElasticFIFO,Tiresias,Voda"
MAX_JOBS, MAX_WINDOWS, MAX_HOURS = 5_000, 20, 24 * 14
MIN_WINDOW_JOBS = 20
NODE_GPUS = 4
JCT_TARGET = 1.05  # queues' average JCT at most 5 % over the same algorithm's without


@dataclass(frozen=True)
class Run:
    """One simulation's figures, with or without queues."""

    avg_jct: float
    p99_jct: float
    per_queue: dict[str, tuple[float, float, int]]  # queue -> (avg JCT, p99 JCT, jobs)
    rho_share: float | None  # jobs with rho <= 1, of those with a rho
    rho_worst: float | None
    idle_while_waiting: float
    violations: int = 0
    reclaim_p99_worst: float | None = None
    reclaim_p50_median: float | None = None
    by_shrinking: int = 0
    by_preemption: int = 0
    unfinished: int = 0


def philly_rows() -> list[dict[str, str]]:
    path = builtin_workload("philly")
    if path is None:
        raise SystemExit("philly.csv not found (voda/data/philly)")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    rows.sort(key=lambda r: r["timestamp"])  # ISO dates: their text order is time order
    return rows


def busy_clusters(rows: Sequence[Mapping[str, str]]) -> dict[str, float]:
    """Each virtual cluster with at least BUSY_SHARE of the GPU-time: its share."""
    used: dict[str, float] = defaultdict(float)
    for r in rows:
        used[r["cluster"]] += float(r["gpu_time"])
    total = sum(used.values())
    return {c: u / total for c, u in sorted(used.items(), key=lambda x: -x[1])
            if u / total >= BUSY_SHARE}


def windows(rows: Sequence[dict[str, str]], hours: float, most: int, count: int, seed: int
            ) -> list[list[dict[str, str]]]:
    """`count` windows: the jobs arriving within `hours` of a seeded start, the first
    `most` of them; a start whose window holds fewer than MIN_WINDOW_JOBS is drawn again."""
    rng = np.random.default_rng(seed)
    stamps = [_seconds(r["timestamp"]) for r in rows]
    span = hours * 3600.0
    found: list[tuple[float, list[dict[str, str]]]] = []
    for _ in range(20 * count):
        if len(found) == count:
            break
        start = float(rng.uniform(stamps[0], stamps[-1] - span))
        lo = bisect.bisect_left(stamps, start)
        hi = bisect.bisect_left(stamps, start + span)
        if hi - lo >= MIN_WINDOW_JOBS:
            found.append((start, list(rows[lo:min(hi, lo + most)])))
    return [w for _, w in sorted(found, key=lambda x: x[0])]


def cluster_gpus(rows: Sequence[Mapping[str, str]], load: float) -> int:
    """Nodes of NODE_GPUS for the GPUs the window's jobs would hold on average over its
    span, each from its arrival, divided by `load`; at least the largest job."""
    stamps = [_seconds(r["timestamp"]) for r in rows]
    first, span = min(stamps), (max(stamps) - min(stamps)) or 1.0
    held = sum(int(r["num_gpus"]) * min(float(r["duration"]), first + span - t)
               for r, t in zip(rows, stamps, strict=True))
    need = held / span / load
    largest = max(int(r["num_gpus"]) for r in rows)
    return NODE_GPUS * max(2, math.ceil(max(need, largest) / NODE_GPUS))


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()


def guarantees(shares: Mapping[str, float], gpus: int, equal: bool) -> dict[str, int]:
    """GPUs per team adding up to `gpus`: by share, or equal (largest remainders)."""
    return apportion(gpus, {c: 1.0 if equal else s for c, s in shares.items()})


def queue_file(guaranteed: Mapping[str, int]) -> QueueFile:
    queues = tuple(Queue(f"vc-{c}", {"default": g}) for c, g in guaranteed.items())
    return QueueFile(QueueSet(queues), {f"vc-{c}": {"cluster": c} for c in guaranteed})


def simulate_on(workload: Workload, gpus: int, algorithm: str,
                queues: QueueFile | None) -> SimResult:
    nodes = f"{gpus // NODE_GPUS}x{NODE_GPUS}" if gpus % NODE_GPUS == 0 else f"{gpus}x1"
    settings = replace(apply_preset(None, algorithm, placement="naive"), queues=queues)
    return simulate(workload, parse_cluster(nodes), settings)


def alone_jcts(workload: Workload, qf: QueueFile, algorithm: str) -> dict[str, float]:
    """Each job of a queue with a guarantee: its JCT with its queue's jobs alone on a
    cluster of the guarantee (the denominator of its rho)."""
    members: dict[str, list] = defaultdict(list)
    for spec in workload.jobs:
        members[qf.queue_of(spec.columns)].append(spec)
    out: dict[str, float] = {}
    for queue in qf.queues:
        g = queue.guaranteed("default")
        jobs = members.get(queue.name)
        if not g or not jobs:
            continue
        alone = Workload(f"{workload.source}:{queue.name}", tuple(jobs))
        result = simulate_on(alone, g, algorithm, None)
        out.update({j.name: j.jct for j in result.jobs if j.jct is not None})
    return out


def idle_while_waiting(result: SimResult, gpus: int) -> float:
    """Mean idle GPUs over the time at least one job waits."""
    held_changes = sorted(result.timeline, key=lambda e: e[0])
    held: dict[str, int] = {}
    steps: list[tuple[float, int]] = []
    for t, name, g in held_changes:
        held[name] = g
        steps.append((t, sum(held.values())))
    waits = list(result.queue)
    idle_seconds = wait_seconds = 0.0
    j = 0
    busy = 0
    for k, (t, waiting, _) in enumerate(waits):
        end = waits[k + 1][0] if k + 1 < len(waits) else t
        if waiting <= 0 or end <= t:
            continue
        # GPUs held over [t, end): step through the holding changes inside it
        while j < len(steps) and steps[j][0] <= t:
            busy = steps[j][1]
            j += 1
        cursor, level, i = t, busy, j
        while i < len(steps) and steps[i][0] < end:
            idle_seconds += (gpus - level) * (steps[i][0] - cursor)
            cursor, level = steps[i][0], steps[i][1]
            i += 1
        idle_seconds += (gpus - level) * (end - cursor)
        wait_seconds += end - t
    return idle_seconds / wait_seconds if wait_seconds else 0.0


def figures(result: SimResult, workload: Workload, qf: QueueFile,
            alone: Mapping[str, float], gpus: int) -> Run:
    jcts = np.array([j.jct for j in result.jobs if j.jct is not None], dtype=float)
    by_queue: dict[str, list[float]] = defaultdict(list)
    rhos = []
    for spec, job in zip(workload.jobs, result.jobs, strict=True):
        if job.jct is None:
            continue
        by_queue[qf.queue_of(spec.columns)].append(job.jct)
        if alone.get(job.name):
            rhos.append(job.jct / alone[job.name])
    per_queue = {q: (float(np.mean(v)), float(np.percentile(v, 99)), len(v))
                 for q, v in by_queue.items()}
    run = Run(float(jcts.mean()), float(np.percentile(jcts, 99)), per_queue,
              sum(1 for r in rhos if r <= 1.0) / len(rhos) if rhos else None,
              max(rhos) if rhos else None, idle_while_waiting(result, gpus),
              unfinished=result.unfinished)
    if not result.queues:
        return run
    p50 = [q["reclaim_seconds_p50"] for q in result.queues if q["reclaim_seconds_p50"] is not None]
    p99 = [q["reclaim_seconds_p99"] for q in result.queues if q["reclaim_seconds_p99"] is not None]
    return replace(run, violations=sum(q["guarantee_violations"] for q in result.queues),
                   reclaim_p50_median=statistics.median(p50) if p50 else None,
                   reclaim_p99_worst=max(p99) if p99 else None,
                   by_shrinking=sum(q["gpus_reclaimed_by_shrinking"] for q in result.queues),
                   by_preemption=sum(q["gpus_reclaimed_by_preemption"] for q in result.queues))


def _f(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


HEADER = (f"    {'algorithm':<12}{'queues':<7}{'avg JCT':>9}{'p99 JCT':>10}{'ratio':>7}"
          f"{'reclaim p50/p99':>17}{'viol':>6}{'rho<=1':>8}{'worst rho':>10}"
          f"{'shrunk/preempt':>16}{'idle|wait':>10}{'unfin':>6}")


def row(algorithm: str, label: str, run: Run, base: Run) -> str:
    ratio = run.avg_jct / base.avg_jct
    reclaim = f"{_f(run.reclaim_p50_median)}/{_f(run.reclaim_p99_worst)}"
    moved = f"{run.by_shrinking}/{run.by_preemption}" if label == "yes" else "-"
    return (f"    {algorithm:<12}{label:<7}{run.avg_jct:>9.0f}{run.p99_jct:>10.0f}"
            f"{ratio:>7.3f}{reclaim:>17}{run.violations if label == 'yes' else '-':>6}"
            f"{_f(run.rho_share, '.3f'):>8}{_f(run.rho_worst, '.2f'):>10}{moved:>16}"
            f"{run.idle_while_waiting:>10.1f}{run.unfinished:>6}")


def per_queue_lines(algorithm: str, none: Run, queued: Run, guaranteed: Mapping[str, int]
                    ) -> list[str]:
    lines = [f"      {algorithm}: per queue, avg / p99 JCT (s) without -> with queues"]
    for name in sorted(set(none.per_queue) | set(queued.per_queue)):
        a = none.per_queue.get(name, (math.nan, math.nan, 0))
        b = queued.per_queue.get(name, (math.nan, math.nan, 0))
        g = guaranteed.get(name.removeprefix("vc-"), 0) if name != DEFAULT_QUEUE else 0
        lines.append(f"        {name:<10} G={g:<4} jobs {a[2]:>4}  {a[0]:>9.0f} / {a[1]:>9.0f}"
                     f"  ->  {b[0]:>9.0f} / {b[1]:>9.0f}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default=DEFAULT_ALGORITHMS)
    parser.add_argument("--hours", type=float, default=12.0, help="hours of arrivals a window")
    parser.add_argument("--jobs", type=int, default=300, help="at most this many jobs a window")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--load", type=float, default=2.0,
                        help="the window's GPU-time over its span, per GPU of the cluster")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--per-queue", action="store_true", help="JCTs per queue too")
    args = parser.parse_args(argv)
    algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    unknown = [a for a in algorithms if a not in BUILTIN_NAMES]
    if unknown or not algorithms:
        parser.error(f"--algorithms: unknown {unknown}; built in: {', '.join(BUILTIN_NAMES)}")
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    if not settings or any(s not in SETTINGS for s in settings):
        parser.error(f"--settings: a list of {', '.join(SETTINGS)}")
    if not 0.1 <= args.hours <= MAX_HOURS:
        parser.error(f"--hours: between 0.1 and {MAX_HOURS}")
    if not 10 <= args.jobs <= MAX_JOBS:
        parser.error(f"--jobs: between 10 and {MAX_JOBS}")
    if not 1 <= args.windows <= MAX_WINDOWS:
        parser.error(f"--windows: between 1 and {MAX_WINDOWS}")
    if not 0.1 <= args.load <= 10.0:
        parser.error("--load: between 0.1 and 10")

    rows = philly_rows()
    shares = busy_clusters(rows)
    print(f"Philly trace: {len(rows):,} jobs; {len(shares)} busy virtual clusters (>= "
          f"{BUSY_SHARE:.1%} of the GPU-time): " + ", ".join(f"{c} {s:.1%}"
                                                        for c, s in shares.items()))
    print("targets: reclaim p99 <= 60 s decision + 30 s restart penalty = 90 s; violations "
          f"0; JCT ratio (queues / none) <= {JCT_TARGET:.2f}; shrunk > preempted; idle|wait "
          "0 with queues (every job's min is 1 GPU)")
    print("reclaim p50/p99: the median of the queues' p50s / the worst queue's p99 (s); "
          "rho: JCT over JCT with its queue's guarantee alone (queues with a guarantee)")
    summary: dict[tuple[str, str], list[tuple[Run, Run]]] = defaultdict(list)
    started = time.process_time()
    runs_seen = windows(rows, args.hours, args.jobs, args.windows, args.seed)
    for w, window in enumerate(runs_seen):
        gpus = cluster_gpus(window, args.load)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "window.csv"
            with open(path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(window[0]))
                writer.writeheader()
                writer.writerows(window)
            workload = load_workload(path)
        present = {r["cluster"] for r in window}
        print(f"\nwindow {w + 1}: {len(window)} jobs from {window[0]['timestamp']} to "
              f"{window[-1]['timestamp']}, {gpus} GPUs, teams present: "
              f"{sum(1 for c in shares if c in present)} of {len(shares)}")
        for setting in settings:
            guaranteed = guarantees(shares, gpus, equal=setting == "equal")
            qf = queue_file(guaranteed)
            print(f"  guarantees by {setting}: " + ", ".join(
                f"{c}={g}" for c, g in guaranteed.items()))
            print(HEADER)
            for algorithm in algorithms:
                alone = alone_jcts(workload, qf, algorithm)
                none = figures(simulate_on(workload, gpus, algorithm, None), workload, qf,
                               alone, gpus)
                queued = figures(simulate_on(workload, gpus, algorithm, qf), workload, qf,
                                 alone, gpus)
                summary[(setting, algorithm)].append((none, queued))
                print(row(algorithm, "no", none, none))
                print(row(algorithm, "yes", queued, none), flush=True)
                if args.per_queue:
                    print("\n".join(per_queue_lines(algorithm, none, queued, guaranteed)))
    print(f"\nover {len(runs_seen)} windows (CPU {time.process_time() - started:.0f} s):")
    print(f"    {'setting':<8}{'algorithm':<13}{'JCT ratio':>10}{'viol':>6}"
          f"{'reclaim p99':>12}{'shrunk':>8}{'preempt':>8}{'rho<=1':>8}{'worst rho':>10}"
          f"{'idle|wait':>10}")
    for (setting, algorithm), runs in summary.items():
        ratio = statistics.fmean(q.avg_jct / n.avg_jct for n, q in runs)
        p99 = [q.reclaim_p99_worst for _, q in runs if q.reclaim_p99_worst is not None]
        shares_ok = [q.rho_share for _, q in runs if q.rho_share is not None]
        worst = [q.rho_worst for _, q in runs if q.rho_worst is not None]
        print(f"    {setting:<8}{algorithm:<13}{ratio:>10.3f}"
              f"{sum(q.violations for _, q in runs):>6}{_f(max(p99) if p99 else None):>12}"
              f"{sum(q.by_shrinking for _, q in runs):>8}"
              f"{sum(q.by_preemption for _, q in runs):>8}"
              f"{_f(statistics.fmean(shares_ok) if shares_ok else None, '.3f'):>8}"
              f"{_f(max(worst) if worst else None, '.2f'):>10}"
              f"{statistics.fmean(q.idle_while_waiting for _, q in runs):>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
