"""How long a goodput report takes: the fit alone, and over HTTP beside other requests.

    .venv/bin/python bench/goodput_report.py [--repeats 20] [--seed 1] [--http 40]

1. The fit (voda.core.goodput_report.model_of: checks, SciPy fit, the fit's check) on
   reports drawn from the measured step times of the six Pollux profiles (4, 16 and 64
   configurations a job could run), the fit's cache cleared before each: median, p90
   and max per size, and how many real reports the fit's check refused.
2. With `--http N` (0: skip), a `voda serve` (emulated backend, SQLite) on loopback: the
   median and p90 of N goodput reports of 16 configurations, of N epoch reports, and of
   `GET /v1/jobs/{name}` alone and while two clients post goodput reports without pause
   (the fit runs outside the scheduler lock: reads should barely wait).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from voda.blas import serial_blas
from voda.core.goodput import fit_perf_params
from voda.core.goodput_report import (
    BatchLimits,
    GoodputReport,
    ReportRefused,
    StepObservation,
    model_of,
)
from voda.sim.profiles import Profile, load_profile, profile_names

ROOT = Path(__file__).resolve().parent.parent
SIZES = (4, 16, 64)


def limits_of(profile: Profile) -> BatchLimits:
    return BatchLimits(profile.init_batch_size, profile.max_batch_size, profile.min_local_bsz,
                       profile.max_local_bsz)


def runnable(profile: Profile) -> list[StepObservation]:
    """The profile's measured configurations a job with its batch limits could run."""
    limits = limits_of(profile)
    out = []
    for row in profile.placements:
        atomic = round(row.local_bsz)
        replicas = row.num_replicas
        if limits.min_local <= atomic <= limits.max_local and (
                replicas * atomic <= limits.max_batch):
            out.append(StepObservation(row.num_nodes, replicas, atomic,
                                       row.step_time - row.sync_time, row.step_time))
    return out


def report(profile: Profile, rng: random.Random, size: int) -> GoodputReport:
    pool = runnable(profile)
    chosen = tuple(rng.sample(pool, min(size, len(pool))))
    grad = profile.validation[0]
    return GoodputReport(chosen, grad.grad_sqr[0], grad.grad_var[0], limits_of(profile),
                         profile.samples_per_epoch)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_fit(repeats: int, seed: int) -> None:
    rng = random.Random(seed)
    profiles = [load_profile(name) for name in profile_names()]
    print(f"fit of a report (model_of), {repeats} reports per profile and size, "
          f"{len(profiles)} profiles:")
    print(f"{'configurations':>15} {'median ms':>10} {'p90 ms':>8} {'max ms':>8} "
          f"{'refused':>8}")
    for size in SIZES:
        times, refused = [], 0
        for profile in profiles:
            for _ in range(repeats):
                r = report(profile, rng, size)
                fit_perf_params.cache_clear()
                started = time.perf_counter()
                try:
                    with serial_blas():  # as the service fits
                        model_of(r, 10_000)
                except ReportRefused:
                    refused += 1
                times.append((time.perf_counter() - started) * 1000)
        print(f"{size:>15} {statistics.median(times):>10.1f} {quantile(times, 0.9):>8.1f} "
              f"{max(times):>8.1f} {refused:>4}/{len(times)}")


def bench_http(n: int, seed: int) -> None:
    import httpx

    rng = random.Random(seed)
    profile = load_profile("cifar10")
    port = 18000 + rng.randrange(1000)
    folder = Path(tempfile.mkdtemp(prefix="voda-bench-goodput-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
    env.update(VODA_TOKENS="alice:bench-token-alice:admin",
               VODA_CONFIG=str(folder / "none.toml"))
    server = subprocess.Popen(
        [sys.executable, "-m", "voda.cli.main", "serve", "--backend", "emulated", "--cluster",
         "4x4", "--time-scale", "0.001", "--db", f"sqlite:///{folder / 'v.db'}", "--port",
         str(port), "--step-interval", "0.2", "--rate-limit", "0.2"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": "Bearer bench-token-alice"}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            _wait(lambda: client.get("/healthz").status_code == 200)
            name = client.post("/v1/jobs", json={"name": "bench", "command": "x", "min": 16,
                                                 "max": 16, "epochs": 10}).json()["name"]
            _wait(lambda: client.get(f"/v1/jobs/{name}").json()["status"] == "Running")
            bodies = [_body(report(profile, rng, 16)) for _ in range(n)]

            def timed(call: Any) -> float:
                started = time.perf_counter()
                response = call()
                assert response.status_code in (200, 422), response.text
                return (time.perf_counter() - started) * 1000

            goodput = [timed(lambda b=b: client.post(f"/v1/jobs/{name}/goodput", json=b))
                       for b in bodies]
            epochs = [timed(lambda: client.post(f"/v1/jobs/{name}/metrics", json={
                "epoch": 1, "epoch_seconds": 60.0, "workers": 16})) for _ in range(n)]
            reads = [timed(lambda: client.get(f"/v1/jobs/{name}")) for _ in range(n)]
            stop = threading.Event()

            def post_without_pause() -> None:
                with httpx.Client(base_url=url, headers=headers, timeout=30) as other:
                    while not stop.is_set():
                        other.post(f"/v1/jobs/{name}/goodput",
                                   json=_body(report(profile, random.Random(), 16)))

            posters = [threading.Thread(target=post_without_pause) for _ in range(2)]
            for t in posters:
                t.start()
            time.sleep(0.5)
            busy = [timed(lambda: client.get(f"/v1/jobs/{name}")) for _ in range(n)]
            stop.set()
            for t in posters:
                t.join()
    finally:
        server.kill()
        server.wait()
    print(f"\nover HTTP on loopback (emulated backend, SQLite), {n} requests each:")
    for label, values in (("POST goodput (16 configurations)", goodput),
                          ("POST metrics (an epoch)", epochs), ("GET job", reads),
                          ("GET job, 2 clients posting goodput", busy)):
        print(f"  {label:<36} median {statistics.median(values):7.1f} ms   "
              f"p90 {quantile(values, 0.9):7.1f} ms")
    print(f"  GET job busy / idle median: "
          f"{statistics.median(busy) / statistics.median(reads):.2f}")


def _body(r: GoodputReport) -> dict[str, Any]:
    limits = r.limits
    return {"observations": [{"nodes": o.nodes, "replicas": o.replicas,
                              "atomic_bsz": o.atomic_bsz, "compute_seconds": o.compute_seconds,
                              "step_seconds": o.step_seconds} for o in r.observations],
            "grad_sqr": r.grad_sqr, "grad_var": r.grad_var,
            "limits": {"init_batch": limits.init_batch, "max_batch": limits.max_batch,
                       "min_local": limits.min_local, "max_local": limits.max_local},
            "epoch_samples": r.epoch_samples}


def _wait(check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # the server is not up yet
            pass
        time.sleep(0.1)
    raise RuntimeError("the service did not come up")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--http", type=int, default=40)
    args = parser.parse_args(argv)
    bench_fit(args.repeats, args.seed)
    if args.http > 0:
        bench_http(args.http, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
