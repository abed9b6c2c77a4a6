"""How far Voda and Sia (ours) are from the best any scheduler could do, on the Sia workloads.

For each workload: Voda's and Sia's (ours) average JCT from the simulator (as
bench/hetero.py runs them), and the lower bound of voda.sim.jct_bound on the average JCT
of any schedule, with each job's speed on a configuration at its peak (a bound for
certain) or at its whole run's average (`--rates mean`: what a schedule that keeps each
configuration for a whole job could reach; a job that changes configuration as its
statistical efficiency changes may beat it). `--cap` holds the bound's schedule to Sia's
(ours) GPU-seconds ("no more GPU-hours than Sia"). The program's restarts are free, so
the bound is the further below what any policy reaches, the more restarts cost.

Run: nice -n 5 .venv/bin/python bench/hetero_bound.py [--sets saturn,philly,newtrace]
     [--workloads 1] [--jobs 160] [--slot 120] [--rates peak|mean] [--cap]
Each workload takes minutes: the program has about 2 million variables at 160 jobs and
120 s slots (a shorter slot tightens the bound by up to a slot per job).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hetero import DATA, POLICIES, SIA_CLUSTER, cluster_file, first_jobs

from voda.sim.cluster_file import parse_cluster
from voda.sim.compare import RunRequest, run_many, settings_for, workload_for
from voda.sim.jct_bound import RATES, mean_jct_bound

HORIZON_MARGIN = 1.2  # the program's horizon: this times the later policy's makespan
SLOTS = (10.0, 3600.0)  # --slot, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="saturn,philly,newtrace")
    parser.add_argument("--workloads", default="1")
    parser.add_argument("--jobs", type=int, default=160,
                        help="each workload's first N jobs (default: 160)")
    parser.add_argument("--slot", type=float, default=120.0,
                        help="the program's time slot in seconds (default: 120)")
    parser.add_argument("--rates", choices=RATES, default="peak")
    parser.add_argument("--cap", action="store_true",
                        help="at most Sia's (ours) GPU-seconds")
    parser.add_argument("--cluster", default=SIA_CLUSTER)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if not 1 <= args.jobs <= 1000:
        parser.error("--jobs: must be 1 to 1000")
    if not SLOTS[0] <= args.slot <= SLOTS[1]:
        parser.error(f"--slot: must be {SLOTS[0]:g} to {SLOTS[1]:g} seconds")
    cluster_path = cluster_file(args.cluster)
    if not cluster_path.is_file():
        parser.error(f"--cluster: no bundled cluster or file named {args.cluster!r}")
    slices = Path(tempfile.mkdtemp(prefix="hetero-bound-"))
    paths = [(wset, n, first_jobs(DATA / "workloads" / wset / f"workload-{n}.csv",
                                  args.jobs, slices))
             for wset in args.sets.split(",") if wset
             for n in (int(x) for x in args.workloads.split(",") if x)
             if (DATA / "workloads" / wset / f"workload-{n}.csv").is_file()]
    requests = [RunRequest(str(path), str(cluster_path), POLICIES[p][0], preset="sia",
                           job_model="adaptive", hetero_policy=POLICIES[p][1])
                for _, _, path in paths for p in ("voda", "sia")]
    started = time.perf_counter()
    results = run_many(requests, workers=args.workers)
    print(f"{len(requests)} simulations in {time.perf_counter() - started:.0f} s; bound with "
          f"{args.rates} rates, {args.slot:g} s slots"
          + (", at most Sia's (ours) GPU-seconds" if args.cap else ""))
    ratios = []
    for i, (wset, n, _) in enumerate(paths):
        voda, sia = results[2 * i], results[2 * i + 1]
        request = requests[2 * i + 1]
        sia_gpu_seconds = sum(j.gpu_seconds for j in sia.jobs)
        horizon = HORIZON_MARGIN * max(j.finish for r in (voda, sia) for j in r.jobs
                                       if j.finish is not None)
        started = time.perf_counter()
        bound = mean_jct_bound(
            workload_for(request), parse_cluster(str(cluster_path)), slot_seconds=args.slot,
            horizon=horizon, calibration=settings_for(request).calibration,
            gpu_seconds=sia_gpu_seconds if args.cap else None, rates=args.rates)
        lb, v, s = bound.mean_jct / 3600, voda.avg_jct / 3600, sia.avg_jct / 3600
        ratios.append((lb / s, v / s))
        print(f"{wset} workload-{n} ({len(sia.jobs)} jobs, {time.perf_counter() - started:.0f}"
              f" s): bound {lb:.3f} h (each job alone at its fastest "
              f"{bound.mean_fastest / 3600:.3f} h), Voda {v:.3f} h, Sia (ours) {s:.3f} h; "
              f"bound / Sia {lb / s:.2f}, Voda / Sia {v / s:.2f}; the bound's GPU-h per job "
              f"{bound.gpu_seconds / 3600 / len(sia.jobs):.2f}, Sia's "
              f"{sia_gpu_seconds / 3600 / len(sia.jobs):.2f}")
    if ratios:
        print(f"median over {len(ratios)} workloads: bound / Sia "
              f"{statistics.median(r[0] for r in ratios):.2f}, Voda / Sia "
              f"{statistics.median(r[1] for r in ratios):.2f}")


if __name__ == "__main__":
    main()
