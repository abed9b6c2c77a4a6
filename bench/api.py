"""Submission throughput and latency of `voda serve`, and its restart time.

    python bench/api.py [--jobs 10000] [--clients 8] [--db URL] [--stored 1000]

1. Starts `voda serve` (emulated 4x4 cluster) on a fresh SQLite file (or --db).
2. `--clients` processes submit `--jobs` compact specs over HTTP; prints throughput,
   p50/p99/max latency, and checks that every job is listed (none lost).
3. Kills the server with SIGKILL and starts it again on the same store: prints the
   time from start to the first scheduling decision with all those jobs.
4. Same on a fresh store holding `--stored` jobs written directly to it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
RATE_LIMIT = os.environ.get("VODA_BENCH_RATE_LIMIT", "5")
TOKEN = "bench-token-of-the-administrator"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, db: str, log: Path) -> None:
        self.db, self.log = db, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.in_process = 0.0

    def start(self) -> tuple[float, float]:
        """Start; return (seconds until /healthz answers, seconds until the first decision).

        `self.in_process` is the service's own figure: from its creation (after the
        imports) to its first decision."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
        env["VODA_CONFIG"] = str(self.log.with_suffix(".toml"))
        env["VODA_TOKENS"] = f"bench:{TOKEN}:admin"
        began = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "voda.cli.main", "serve", "--backend", "emulated",
             "--db", self.db, "--port", str(self.port), "--cluster", "4x4", "--time-scale", "60",
             "--rate-limit", RATE_LIMIT],
            cwd=ROOT, env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        healthy = None
        while time.monotonic() - began < 120:
            if self.proc.poll() is not None:
                raise SystemExit(f"voda serve exited:\n{self.log.read_text()[-2000:]}")
            try:
                health = httpx.get(f"{self.url}/healthz", timeout=2).json()
                healthy = healthy or time.monotonic() - began
                if health["first_schedule_seconds"] is not None:
                    self.in_process = float(health["first_schedule_seconds"])
                    return healthy, time.monotonic() - began
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise SystemExit("voda serve did not schedule in 120 s")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _client(url: str, count: int, index: int) -> tuple[list[float], int]:
    """One client process: `count` submissions one after another."""
    latencies: list[float] = []
    bad = 0
    with httpx.Client(base_url=url, timeout=30, headers=AUTH) as http:
        for i in range(count):
            body = {"name": f"bench-{index}", "command": "train", "min": 1, "max": 4,
                    "epochs": 50 + i % 50, "priority": i % 3}
            started = time.perf_counter()
            response = http.post("/v1/jobs", json=body)
            latencies.append(time.perf_counter() - started)
            bad += response.status_code != 201
    return latencies, bad


def submissions(url: str, jobs: int, clients: int) -> tuple[list[float], int, float]:
    """`clients` processes (not threads: their latencies must not include waiting for
    one interpreter lock) submit `jobs` in all."""
    per_client = [jobs // clients + (1 if i < jobs % clients else 0) for i in range(clients)]
    with ProcessPoolExecutor(clients, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_client, [url] * clients, [0] * clients, range(clients)))  # warm up
        began = time.perf_counter()
        results = list(pool.map(_client, [url] * clients, per_client, range(clients)))
        seconds = time.perf_counter() - began
    latencies = [x for mine, _ in results for x in mine]
    return latencies, sum(bad for _, bad in results), seconds


def stored_jobs(db: str, count: int) -> None:
    from voda.core.model import JobStatus
    from voda.engine.scheduler import JobRecord
    from voda.store import jobs as store
    from voda.store.db import make_engine, migrate, session_factory

    engine = make_engine(db)
    migrate(engine)
    now = time.time()
    rows = [store.new_job_values(
        JobRecord(name=f"stored-{i:05d}", min_workers=1, max_workers=4, epochs=100,
                  submit_time=now - count + i, status=JobStatus.WAITING, priority=i % 3),
        {"user": "local", "kind": "VodaJob", "spec": {}, "command": "train"}, now)
        for i in range(count)]
    with session_factory(engine).begin() as session:
        store.insert_jobs(session, rows)
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--stored", type=int, default=1_000)
    parser.add_argument("--db", default=None, help="store URL (default: a fresh SQLite file)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="voda-bench-"))
    db = args.db or f"sqlite:///{folder / 'bench.db'}"

    server = Server(db, folder / "serve.log")
    server.start()
    try:
        latencies, failures, seconds = submissions(server.url, args.jobs, args.clients)
        listed = httpx.get(f"{server.url}/v1/jobs", params={"limit": 1}, timeout=30,
                           headers=AUTH).json()
    finally:
        server.kill()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    print(f"submissions: {args.jobs} from {args.clients} clients in {seconds:.2f} s "
          f"= {args.jobs / seconds:.0f} jobs/s")
    print(f"latency: p50 {statistics.median(latencies) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
          f"max {latencies[-1] * 1000:.1f} ms (target p99 <= 50 ms)")
    print(f"refused: {failures}; listed after: {listed['total']} of {args.jobs} "
          f"({'none lost' if listed['total'] == args.jobs and not failures else 'LOST'})")

    again = Server(db, folder / "serve-2.log")
    healthy, scheduled = again.start()
    again.kill()
    print(f"restart after kill -9 with {args.jobs} jobs: /healthz in {healthy:.2f} s, "
          f"first decision {scheduled:.2f} s after start ({again.in_process:.2f} s after "
          "the imports)")

    db2 = f"sqlite:///{folder / 'stored.db'}" if args.db is None else args.db
    if args.db is None:
        stored_jobs(db2, args.stored)
        third = Server(db2, folder / "serve-3.log")
        healthy, scheduled = third.start()
        third.kill()
        print(f"start with {args.stored} stored jobs: /healthz in {healthy:.2f} s, "
              f"first decision {scheduled:.2f} s after start ({third.in_process:.2f} s after "
              "the imports; target <= 5 s)")


if __name__ == "__main__":
    main()
