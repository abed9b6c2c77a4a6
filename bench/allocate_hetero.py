"""Time one heterogeneous decision: 1,000 jobs that accept any of 3 GPU types on 4,096 GPUs.

    nice -n 5 .venv/bin/python bench/allocate_hetero.py [--jobs N] [--repeats N] [--seed S]

The cluster: 512 nodes of 4 T4, 128 of 8 RTX, 128 of 8 A100. The jobs (seeded) belong to 30
categories, each with its own throughput model per type (A100 1.5-6x a T4, RTX 1-3x);
each category has measured 1 to 3 of the types (the rest are projected), a tenth of the
jobs have measured nothing; a third run now. Printed: the median CPU seconds of

- the type and count choice (voda.core.allocation.hetero_voda, policy `voda`: one program
  over every job's (type, count), solved by HiGHS),
- the allocation: the choice, then the per-type counts it fixed (FixedCounts over Voda),
- the whole decide_hetero (allocation, placement on 768 nodes, diff),

against the target: the allocation within 1 s (Voda's own target at this size,
bench/allocate.py), and, for reference, the choice of Sia's program (policy `sia`).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from voda.core.allocation.base import checked_allocate
from voda.core.allocation.hetero import choose_types
from voda.core.allocation.hetero_models import projected
from voda.core.allocation.registry import create
from voda.core.goodput import GoodputModel, PerfParams
from voda.core.hetero_plan import FixedCounts, decide_hetero, retyped
from voda.core.model import ANY_GPU_TYPE, Cluster, Job, JobStatus, Node
from voda.core.placement.registry import get_placer

TARGET_SECONDS = 1.0
TYPES = {"t4": (4, 512, 1.0), "rtx": (8, 128, 2.0), "a100": (8, 128, 3.5)}


def cluster() -> Cluster:
    nodes = [Node(f"{t}-{i}", per_node, t, leaf=f"leaf-{t}-{i // 16}")
             for t, (per_node, count, _) in TYPES.items() for i in range(count)]
    return Cluster(tuple(nodes))


def _model(rng: random.Random, speed: float) -> GoodputModel:
    a = rng.uniform(0.05, 0.3) / speed
    perf = PerfParams(a, a * rng.uniform(0.005, 0.05), rng.uniform(0.05, 0.3) / speed,
                      rng.uniform(0.001, 0.02), rng.uniform(0.01, 0.05) / speed, 0.001, 1.5)
    init = rng.choice((32, 64, 128))
    return GoodputModel(perf, rng.uniform(0.5, 2), rng.uniform(0.5, 20), init, init * 64, 16,
                        256, max_profiled_replicas=rng.choice((1, 2, 4, 8, 16)),
                        epoch_samples=init * rng.uniform(200, 5000))


def make_jobs(count: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    categories = []
    for c in range(30):
        gains = {"t4": 1.0, "rtx": rng.uniform(1.0, 3.0), "a100": rng.uniform(1.5, 6.0)}
        measured = rng.sample(sorted(TYPES), rng.randint(1, 3))
        base = _model(rng, 1.0)
        models = {t: projected(base, gains[t]) for t in measured}
        categories.append((f"cat-{c}", models))
    jobs = []
    for i in range(count):
        name, models = rng.choice(categories)
        fresh = rng.random() < 0.1
        running = not fresh and rng.random() < 0.33
        gpu_type = rng.choice(sorted(models)) if running else "t4"
        lo = rng.choice((1, 1, 2))
        jobs.append(Job(
            f"job-{i}", lo, lo * rng.choice((4, 8, 16)), submit_time=float(i),
            epochs=rng.randint(5, 100), completed_epochs=rng.uniform(0, 4), category=name,
            gpu_type=gpu_type, gpu_types=(ANY_GPU_TYPE,),
            status=JobStatus.RUNNING if running else JobStatus.WAITING,
            current_workers=lo if running else 0, running_seconds=rng.uniform(0, 5000),
            goodput=next(iter(models.values())) if not fresh else None,
            goodput_by_type={} if fresh else models))
    return jobs


def median_cpu(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.process_time()
        call()
        times.append(time.process_time() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if not 1 <= args.jobs <= 100_000 or not 1 <= args.repeats <= 100:
        raise SystemExit("--jobs: 1..100000, --repeats: 1..100")
    c, jobs = cluster(), make_jobs(args.jobs, args.seed)
    voda = create("Voda")
    placer = get_placer("topology")

    def allocate() -> None:
        choice = choose_types("voda", jobs, c)
        typed = retyped(jobs, choice, "voda")
        fixed = FixedCounts(choice.counts or {}, voda)
        for t in c.gpu_types():
            of_type = [j for j in typed if j.gpu_type == t]
            checked_allocate(fixed, of_type, c.capacity(t))

    choose_types("voda", jobs, c)  # warm the caches a running service has warm
    choice = median_cpu(lambda: choose_types("voda", jobs, c), args.repeats)
    allocation = median_cpu(allocate, args.repeats)
    whole = median_cpu(lambda: decide_hetero(jobs, c, {}, voda, placer, explain_reasons=False),
                       max(1, args.repeats // 2))
    sia = median_cpu(lambda: choose_types("sia", jobs, c), 1)
    print(f"{args.jobs} jobs accepting any of 3 types on {c.capacity()} GPUs "
          f"(median CPU seconds, {args.repeats} repeats)")
    print(f"  type and count choice (voda)  {choice:8.3f} s")
    print(f"  allocation (choice + counts)  {allocation:8.3f} s   target <= {TARGET_SECONDS} s:"
          f" {'met' if allocation <= TARGET_SECONDS else 'NOT met'}")
    print(f"  decide_hetero (+ placement)   {whole:8.3f} s")
    print(f"  Sia's program (for reference) {sia:8.3f} s")


if __name__ == "__main__":
    main()
