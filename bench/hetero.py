"""Heterogeneous GPUs: Voda against Sia on Sia's own setting.

On the Sia paper's heterogeneous cluster (6 x 4 T4 + 3 x 8 RTX 2080Ti + 2 x 8 A100,
voda/data/sia/clusters/heterogeneous-64.yaml) and the Sia workloads (voda/data/sia/workloads:
philly, saturn, newtrace), under the `sia` preset (the Pollux artifact's 60 s rounds with the
Sia artifact's calibration and restart penalties), batch-adaptive jobs that accept any type:

- Voda: the heterogeneity-aware policy (type and count chosen together), Voda per type;
- Sia (ours): voda.core.allocation.sia;
- Pollux (adapted): type-unaware Pollux, then "most GPUs of one type";
- Voda, types isolated: each job keeps the first type it was given.

Printed per workload: average and p99 JCT (hours), makespan (hours), GPU-hours per job and
restarts per job; per set, the means and the Sia paper's Table 3 figures beside them; for
each workload the Sia artifact's own simulator was run on here (saturn 1-5, philly 1-4,
newTrace 1-3's first 160 jobs: voda/data/sia/published), its average JCT beside our
Sia's. With Voda and Sia both run, per set: by model, the hours Voda's JCTs save and lose
against Sia's, job by job, and Voda's average had it finished no job later than Sia (what
removing its losses alone could win).

Targets: Voda's average JCT at most 0.8 x Sia's (ours) on every workload set, its p99 and
GPU-hours per job no worse; our Sia's average JCT within 5 % of the artifact's on each
workload it was run on.

Beyond Sia's setting: `--cluster physical-44` runs the paper's physical cluster (RTX, Quadro
RTX 6000 and A100 nodes) or any cluster file instead, and `--jitter S --seed N` moves every
arrival by up to S seconds (voda.sim.workloads.jitter_arrivals), the same for every policy:
the samples the policy was not chosen on. `--restart-scale X` makes every restart cost X
times the artifact's checkpoint-restore time, for every policy (0: free restarts, what
adapting would be worth without their cost). `--load L` divides every arrival time by L
(L = 2: jobs come twice as often). The Sia paper's and the artifact's figures are printed
only for its own cluster, arrivals and restarts.

Run: nice -n 5 .venv/bin/python bench/hetero.py [--sets saturn,philly,newtrace]
     [--workloads 1,2] [--policies voda,sia,pollux,isolated] [--workers N] [--jobs N]
     [--cluster heterogeneous-64|physical-44|FILE] [--jitter SECONDS] [--seed N]
     [--restart-scale X] [--load L]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from voda.sim.compare import MAX_RESTART_SCALE, RunRequest, run_many
from voda.sim.hetero_published import PAPER, artifact_jcts
from voda.sim.job_gaps import category_gaps, merge_gaps, no_loss_mean_jct
from voda.sim.report import SimResult
from voda.sim.tail import p99

DATA = Path(__file__).resolve().parents[1] / "voda" / "data" / "sia"
SIA_CLUSTER = "heterogeneous-64"
MAX_JITTER = 86_400.0  # a day: every workload's arrivals span less
LOADS = (0.1, 10.0)  # --load: arrivals from ten times as sparse to ten times as dense
POLICIES = {  # label -> (per-type algorithm, heterogeneity policy)
    "voda": ("Voda", "voda"),
    "sia": ("Pollux", "sia"),
    "pollux": ("Pollux", "pollux"),
    "isolated": ("Voda", "isolated"),
}
LABELS = {"voda": "Voda", "sia": "Sia (ours)", "pollux": "Pollux (adapted)",
          "isolated": "Voda, types isolated"}


@dataclass(frozen=True)
class Row:
    avg: float  # hours
    p99: float
    makespan: float
    gpu_hours: float  # per job
    restarts: float  # per job
    unfinished: int


def row_of(result: SimResult) -> Row:
    n = max(len(result.jobs), 1)
    restarts = sum(j.rescales + j.migrations + j.preemptions for j in result.jobs) / n
    return Row(result.avg_jct / 3600, result.p99_jct / 3600, result.makespan / 3600,
               result.gpu_hours / n, restarts, result.unfinished)


def mean_row(rows: list[Row]) -> Row:
    avg, p99_, makespan, gpu_hours, restarts = (
        statistics.fmean(getattr(r, f) for r in rows)
        for f in ("avg", "p99", "makespan", "gpu_hours", "restarts"))
    return Row(avg, p99_, makespan, gpu_hours, restarts, sum(r.unfinished for r in rows))


def show(label: str, r: Row) -> str:
    left = f" ({r.unfinished} unfinished)" if r.unfinished else ""
    return (f"  {label:<22} avg {r.avg:5.2f} h  p99 {r.p99:6.2f} h  makespan {r.makespan:6.2f} h"
            f"  GPU-h/job {r.gpu_hours:5.2f}  restarts/job {r.restarts:5.2f}{left}")


def show_gaps(pairs: list[tuple[SimResult, SimResult]]) -> None:
    """Where Voda's average gains and loses against Sia (ours), by model, over a set's
    workloads; and its average had it finished no job later than Sia (voda.sim.job_gaps)."""
    print("  by model, Voda against Sia (ours), hours summed over the workloads:")
    for g in merge_gaps([category_gaps(v.jobs, s.jobs) for v, s in pairs]):
        print(f"    {g.category:<12} {g.jobs:4d} jobs  JCT {g.jct_hours:7.1f} / "
              f"{g.other_jct_hours:7.1f}  saved {g.saved_hours:6.1f}  lost {g.lost_hours:5.1f}"
              f" ({g.later_jobs} jobs later)")
    bound = statistics.fmean(no_loss_mean_jct(v.jobs, s.jobs) for v, s in pairs) / 3600
    sia = statistics.fmean(s.avg_jct for _, s in pairs) / 3600
    print(f"  Voda's average had it finished no job later than Sia (ours): {bound:.2f} h, "
          f"{bound / sia:.2f} x Sia's")


def first_jobs(path: Path, count: int, into: Path) -> Path:
    """A copy of the workload `path` with only its first `count` jobs (by submit time)."""
    header, *lines = path.read_text().splitlines()
    out = into / f"{path.parent.name}-{path.name}"
    out.write_text("\n".join([header, *lines[:count]]) + "\n")
    return out


def at_load(path: Path, load: float, into: Path) -> Path:
    """A copy of the workload `path` (a CSV with a `time` column, in seconds) with every
    arrival time divided by `load`."""
    header, *lines = path.read_text().splitlines()
    at = header.split(",").index("time")
    rows = []
    for line in lines:
        fields = line.split(",")
        fields[at] = f"{float(fields[at]) / load:.1f}"
        rows.append(",".join(fields))
    out = into / f"{path.parent.name}-{path.stem}-at-{load:g}.csv"
    out.write_text("\n".join([header, *rows]) + "\n")
    return out


def cluster_file(name: str) -> Path:
    """A bundled cluster by its name (voda/data/sia/clusters), else a cluster file's path."""
    bundled = DATA / "clusters" / f"{name}.yaml"
    return bundled if bundled.is_file() else Path(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="saturn,philly,newtrace")
    parser.add_argument("--workloads", default="1",
                        help="workload numbers per set, e.g. 1,2,3 (default: 1)")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=0,
                        help="run only each workload's first N jobs (a slice; 0: all)")
    parser.add_argument("--cluster", default=SIA_CLUSTER,
                        help="a bundled cluster's name or a cluster file (default: the paper's "
                             "heterogeneous-64)")
    parser.add_argument("--jitter", type=float, default=0.0,
                        help="move each arrival by up to this many seconds (default: 0)")
    parser.add_argument("--seed", type=int, default=0, help="the jitter's seed (default: 0)")
    parser.add_argument("--restart-scale", type=float, default=1.0,
                        help="every restart costs this times the artifact's (default: 1)")
    parser.add_argument("--load", type=float, default=1.0,
                        help="divide every arrival time by this (default: 1)")
    args = parser.parse_args()
    if not 0 <= args.jobs <= 100_000:
        parser.error("--jobs: must be 0 to 100000")
    if not 0 <= args.jitter <= MAX_JITTER:
        parser.error(f"--jitter: must be 0 to {MAX_JITTER:.0f} seconds")
    if not 0 <= args.restart_scale <= MAX_RESTART_SCALE:
        parser.error(f"--restart-scale: must be 0 to {MAX_RESTART_SCALE:g}")
    if not LOADS[0] <= args.load <= LOADS[1]:
        parser.error(f"--load: must be {LOADS[0]:g} to {LOADS[1]:g}")
    cluster = cluster_file(args.cluster)
    if not cluster.is_file():
        parser.error(f"--cluster: no bundled cluster or file named {args.cluster!r}")
    sias_setting = (cluster.name == f"{SIA_CLUSTER}.yaml" and not args.jitter
                    and args.restart_scale == 1.0 and args.load == 1.0)
    sets = [s for s in args.sets.split(",") if s]
    numbers = [int(n) for n in args.workloads.split(",") if n]
    policies = [p for p in args.policies.split(",") if p]
    requests, keys = [], []
    slices = Path(tempfile.mkdtemp(prefix="hetero-slices-"))
    for wset in sets:
        for n in numbers:
            path = DATA / "workloads" / wset / f"workload-{n}.csv"
            if not path.is_file():
                continue
            if args.jobs:
                path = first_jobs(path, args.jobs, slices)
            if args.load != 1.0:
                path = at_load(path, args.load, slices)
            for policy in policies:
                algorithm, hetero = POLICIES[policy]
                requests.append(RunRequest(str(path), str(cluster), algorithm, preset="sia",
                                           job_model="adaptive", hetero_policy=hetero,
                                           jitter=args.jitter, seed=args.seed,
                                           restart_scale=args.restart_scale))
                keys.append((wset, n, policy))
    started, cpu = time.perf_counter(), time.process_time()
    results = run_many(requests, workers=args.workers)
    print(f"{len(requests)} simulations in {time.perf_counter() - started:.0f} s wall "
          f"({time.process_time() - cpu:.0f} CPU-s in this process)")
    if not sias_setting:
        print(f"cluster {cluster.stem}; arrivals moved by up to {args.jitter:.0f} s "
              f"(seed {args.seed}); restarts at {args.restart_scale:g} x the artifact's; "
              f"arrivals {args.load:g} x as dense")
    runs = dict(zip(keys, results, strict=True))
    rows = {key: row_of(r) for key, r in runs.items()}
    verdicts = []
    for wset in sets:
        done = sorted({n for (s, n, _) in rows if s == wset})
        if not done:
            continue
        print(f"\n{wset} (workloads {', '.join(map(str, done))})")
        for n in done:
            print(f" workload-{n}")
            for policy in policies:
                print(show(LABELS[policy], rows[(wset, n, policy)]))
            artifact = artifact_jcts(wset, n, args.jobs) if sias_setting else None
            if artifact and "sia" in policies:
                ours = rows[(wset, n, "sia")].avg
                theirs = statistics.fmean(artifact) / 3600
                print(f"  Sia artifact's simulator: avg {theirs:5.2f} h  p99 "
                      f"{p99(artifact) / 3600:6.2f} h; ours / artifact {ours / theirs:.3f} "
                      f"(target 0.95-1.05)")
        means = {p: mean_row([rows[(wset, n, p)] for n in done]) for p in policies}
        print(" mean")
        for policy in policies:
            print(show(LABELS[policy], means[policy]))
        for policy, figures in (PAPER.get(wset, {}) if sias_setting else {}).items():
            print(f"  paper: {policy:<15} avg {figures.avg_jct:5.2f} h  p99 {figures.p99_jct:6.2f}"
                  f" h  makespan {figures.makespan:6.2f} h  GPU-h/job {figures.gpu_hours:5.2f}")
        if "voda" in means and "sia" in means:
            v, s = means["voda"], means["sia"]
            ok = v.avg <= 0.8 * s.avg and v.p99 <= s.p99 and v.gpu_hours <= s.gpu_hours
            verdicts.append(ok)
            print(f"  Voda / Sia (ours): avg {v.avg / s.avg:.2f} (target <= 0.80), p99 "
                  f"{v.p99 / s.p99:.2f} (<= 1), GPU-h/job {v.gpu_hours / s.gpu_hours:.2f} "
                  f"(<= 1): {'met' if ok else 'NOT met'}")
            show_gaps([(runs[(wset, n, "voda")], runs[(wset, n, "sia")]) for n in done])
    if verdicts:
        print(f"\ntarget met on {sum(verdicts)} of {len(verdicts)} workload sets")


if __name__ == "__main__":
    main()
