"""A trace replayed through the running service, against the simulator on the same jobs.

For each algorithm: starts `voda serve --backend emulated` (its own SQLite file in a temp
dir, real HTTP on loopback, an API token), submits the first --jobs jobs of a Pollux workload
at their arrival times / --time-scale, waits for every job to end, reads each job's submit and
finish from the API, and simulates the same jobs arriving when the service took them in
(voda_testing.replay). Prints, in trace seconds, the average and p99 JCT of both and their
ratio, the median and worst per-job |service - simulated| / simulated JCT, and the rescale,
migration and preemption counts of both. A last column shows the simulator on the trace's own
clock for the same arrivals, and its spread when every arrival of the trace moves by up to
5 s (20 seeds): what a few seconds of timing change in the simulator alone.

    .venv/bin/python bench/service_replay.py --jobs 10 --cluster 4x4 --time-scale 100

`--job-model adaptive` runs the Pollux workload's own batch-adaptive jobs through the
service (they report their goodput models) against the simulator's adaptive job model.
`--workload` and `--load` take comma-separated lists and `--jobs all` takes each workload
whole; with more than one run a last line per algorithm gives the median and range of the
ratios over the runs. The sixteen Pollux runs on their cluster, one after another:

    .venv/bin/python bench/service_replay.py --workload workload-1,workload-2,workload-3,\
        workload-4 --load 0.5,1.0,1.5,2.0 --jobs all --cluster 16x4 --time-scale 200 \
        --algorithms Voda --job-model adaptive --jitter-seeds 0 --timeout 2400
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from voda.sim.workloads import jitter_arrivals, load_workload
from voda_testing.replay import (
    REPLAY_JOB_MODELS,
    ReplaySettings,
    replay_workload,
    run_replay,
    simulate_twin,
)

MAX_ALGORITHMS = 8
MAX_RUNS = 16  # workloads x loads: the Pollux workloads' four by four
JITTER_SECONDS = 5.0
JITTER_SEEDS = 20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="workload-1",
                        help="built-in Pollux workloads (workload-N), comma-separated")
    parser.add_argument("--load", default=None,
                        help="load variants (0.5, 1.0, 1.5, 2.0), comma-separated")
    parser.add_argument("--jobs", default="10", help="the first N jobs, or all")
    parser.add_argument("--cluster", default="4x4", help="NODESxGPUS (at most 256 GPUs)")
    parser.add_argument("--algorithms", default="Voda,ElasticFIFO")
    parser.add_argument("--rigid", action="store_true", help="min = max = num_replicas")
    parser.add_argument("--job-model", default="emulated", choices=REPLAY_JOB_MODELS,
                        help="the emulated backend's epoch jobs, or the Pollux workload's "
                             "batch-adaptive jobs")
    parser.add_argument("--jitter-seeds", type=int, default=JITTER_SEEDS,
                        help="simulations with arrivals moved by up to 5 s (0: none)")
    parser.add_argument("--time-scale", type=float, default=100.0,
                        help="trace seconds per wall second")
    parser.add_argument("--rate-limit", type=float, default=60.0,
                        help="trace seconds between decisions")
    parser.add_argument("--step-interval", type=float, default=0.05,
                        help="wall seconds between the service's scheduling steps")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="wall seconds per algorithm")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    if not 1 <= len(algorithms) <= MAX_ALGORITHMS:
        parser.error(f"--algorithms: 1 to {MAX_ALGORITHMS} names")
    if not 0 <= args.jitter_seeds <= 100:
        parser.error("--jitter-seeds: 0 to 100")
    runs = _runs(args.workload, args.load)
    if not 1 <= len(runs) <= MAX_RUNS:
        parser.error(f"--workload x --load: 1 to {MAX_RUNS} runs, got {len(runs)}")
    rows = []
    for workload in runs:
        jobs = _job_count(parser, workload, args.jobs)
        for algorithm in algorithms:
            settings = ReplaySettings(
                workload=workload, jobs=jobs, cluster=args.cluster, algorithm=algorithm,
                rigid=args.rigid, time_scale=args.time_scale, rate_limit=args.rate_limit,
                step_interval=args.step_interval, timeout=args.timeout,
                job_model=args.job_model)
            try:
                settings.check()
            except ValueError as exc:
                parser.error(str(exc))
            figures = {"workload": workload, **_replay(settings, args.jitter_seeds)}
            rows.append(figures)
            print(_line(figures), file=sys.stderr if args.json else sys.stdout, flush=True)
    if len(runs) > 1:
        for algorithm in algorithms:
            print(_summary([r for r in rows if r["algorithm"] == algorithm]),
                  file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        print(json.dumps({"workloads": runs, "jobs": args.jobs, "cluster": args.cluster,
                          "job_model": args.job_model,
                          "time_scale": args.time_scale, "results": rows}, indent=2))
    return 0


def _runs(workloads: str, loads: str | None) -> list[str]:
    names = [w.strip() for w in workloads.split(",") if w.strip()]
    if loads is None:
        return names
    return [f"{name}@{load.strip()}" for name in names
            for load in loads.split(",") if load.strip()]


def _job_count(parser: argparse.ArgumentParser, workload: str, jobs: str) -> int:
    """--jobs as a count; `all` is the workload's whole length."""
    if jobs.strip().lower() == "all":
        try:
            return len(load_workload(workload).jobs)
        except (ValueError, OSError) as exc:
            parser.error(f"--workload: {exc}")
    try:
        return int(jobs)
    except ValueError:
        parser.error(f"--jobs: a whole number or all, got {jobs!r}")


def _replay(settings: ReplaySettings, jitter_seeds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="voda-replay-") as folder:
        replay = run_replay(settings, Path(folder))
    figures = replay.figures()
    arrivals = {name: job.submit for name, job in replay.service.items()}
    trace = replay_workload(settings)
    trace_clock = simulate_twin(trace, settings, arrivals, time_scale=1.0)
    figures["sim_trace_clock_avg_jct"] = trace_clock.avg_jct
    # What a few seconds of timing change in the simulator alone: the trace's arrivals
    # each moved by up to JITTER_SECONDS, jitter_seeds times.
    spread = [simulate_twin(jitter_arrivals(trace, JITTER_SECONDS, seed),
                            settings, time_scale=1.0).avg_jct
              for seed in range(jitter_seeds)]
    figures["sim_jitter_avg_jct"] = ([min(spread), statistics.median(spread), max(spread)]
                                     if spread else [])
    return figures


def _summary(rows: list[dict]) -> str:
    def spread(key: str) -> str:
        values = [r[key] for r in rows]
        return (f"median {statistics.median(values):.3f} "
                f"({min(values):.3f}-{max(values):.3f})")
    return (f"{rows[0]['algorithm']:<12} {len(rows)} runs  avg JCT service / sim "
            f"{spread('avg_ratio')}  p99 {spread('p99_ratio')}  "
            f"jobs finished {sum(r['finished'] for r in rows)}/{sum(r['jobs'] for r in rows)}  "
            f"steps at most {max(r['longest_step_period'] for r in rows):g} s apart")


def _worst_job(f: dict) -> str:
    if f["worst_job"] is None:
        return ""
    service, sim = f["worst_job_jct"]
    return f" ({f['worst_job']}: {service:.0f} s against {sim:.0f} s)"


def _line(f: dict) -> str:
    return (f"{f['workload']:<16} {f['algorithm']:<12} jobs {f['finished']}/{f['jobs']}  "
            f"avg JCT service {f['service_avg_jct']:.0f} s sim {f['sim_avg_jct']:.0f} s "
            f"(ratio {f['avg_ratio']:.3f})  p99 service {f['service_p99_jct']:.0f} s "
            f"sim {f['sim_p99_jct']:.0f} s (ratio {f['p99_ratio']:.3f})  "
            f"|diff|/sim median {f['median_rel_diff']:.4f} worst {f['worst_rel_diff']:.4f}"
            f"{_worst_job(f)}  "
            f"rescales {f['service_rescales']}/{f['sim_rescales']} "
            f"migrations {f['service_migrations']}/{f['sim_migrations']} "
            f"preemptions {f['service_preemptions']}/{f['sim_preemptions']} (service/sim)  "
            f"sim on the trace clock avg {f['sim_trace_clock_avg_jct']:.0f} s, with arrivals "
            f"moved by up to {JITTER_SECONDS:g} s min/median/max "
            f"{'/'.join(f'{v:.0f}' for v in f['sim_jitter_avg_jct']) or '-'} s  "
            f"wall {f['wall_seconds']:.0f} s, steps at most {f['longest_step_period']:g} s apart")


if __name__ == "__main__":
    raise SystemExit(main())
