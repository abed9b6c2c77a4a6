"""Wall time of each client command against a local `voda serve`, start-up included.

    python bench/cli_startup.py [--runs 20]

Starts `voda serve` (emulated 4x4 cluster, fresh SQLite store), then runs every
client command `--runs` times as a user would (the `voda` script, a new process
each time) and prints the median and the 90th percentile of the wall time, and
the Python interpreter's own start-up for comparison. The target is < 300 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from api import TOKEN, Server  # noqa: E402  (the API benchmark's server and its token)

VODA = str(Path(sys.executable).with_name("voda"))
TARGET_MS = 300


def wall(argv: list[str], env: dict[str, str], runs: int,
         before: list[list[str]] | None = None) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) seconds of each run; `before[i]` (if given) is the i-th
    run's own argument list. CPU time says what a run costs when other work shares the
    machine's cores; wall time is what a user waits."""
    times, cpu = [], []
    for i in range(runs):
        args = before[i] if before else argv
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(args, env=env, capture_output=True)
        times.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - used.ru_utime + after.ru_stime - used.ru_stime)
        if done.returncode != 0 and b"keeps no job logs" not in done.stderr:  # logs: 409
            raise SystemExit(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr.decode()}")
    return times, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="voda-bench-cli-"))
    server = Server(f"sqlite:///{folder / 'bench.db'}", folder / "serve.log")
    server.start()
    # Python as a user runs it: writing bytecode caches. With PYTHONDONTWRITEBYTECODE set
    # (some sandboxes and containers), a module edited since its cache was written is
    # compiled again on every run: 10-15 ms for a module of a few hundred lines.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("VODA_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(VODA_CONFIG=str(folder / "none.toml"), VODA_URL=server.url, VODA_TOKEN=TOKEN)
    subprocess.run([VODA, "--help"], env=env, capture_output=True, check=True)  # caches
    job = folder / "job.yaml"
    job.write_text("generate_name: bench-\ncommand: [python, train.py]\nmin: 1\nmax: 2\n"
                   "epochs: 1000\n")
    try:
        names = []
        for _ in range(args.runs + 1):
            done = subprocess.run([VODA, "submit", "-f", str(job), "--json"], env=env,
                                  capture_output=True, check=True)
            names.append(json.loads(done.stdout)["name"])
        n = names[0]
        commands: dict[str, list[str] | list[list[str]]] = {
            "submit -f job.yaml": [VODA, "submit", "-f", str(job)],
            "jobs": [VODA, "jobs"],
            "jobs --json": [VODA, "jobs", "--json"],
            "describe NAME": [VODA, "describe", n],
            "priority NAME 1": [VODA, "priority", n, "1"],
            "cluster": [VODA, "cluster"],
            "algorithm get": [VODA, "algorithm", "get"],
            "history": [VODA, "history"],
            "algorithm set ElasticFIFO": [VODA, "algorithm", "set", "ElasticFIFO"],
            # The emulated backend keeps no logs: the service answers 409 (a full round trip).
            "logs NAME -n 20": [VODA, "logs", n, "-n", "20"],
            "top --once": [VODA, "top", "--once"],
            "delete NAME": [[VODA, "delete", name] for name in names[1:]],
            # Drained and added back in turn (adding a drained node makes it ready again).
            "node drain|add node-1": [[VODA, "node", "drain" if i % 2 == 0 else "add", "node-1"]
                                      for i in range(args.runs)],
            "token": [VODA, "token"],
        }
        python, python_cpu = wall([sys.executable, "-c", "pass"], env, args.runs)
        load = os.getloadavg()[0]
        print(f"{args.runs} runs each against {server.url} (emulated 4x4, {len(names)} jobs); "
              f"load average {load:.1f} on {os.cpu_count()} cores")
        print(f"{'command':30} {'median ms':>10} {'p90 ms':>8} {'CPU median ms':>14}")
        print(f"{'(python -c pass)':30} {statistics.median(python) * 1000:10.0f} {'':8} "
              f"{statistics.median(python_cpu) * 1000:14.0f}")
        slowest = 0.0
        for label, argv in commands.items():
            if argv and isinstance(argv[0], list):
                times, cpu = wall([], env, args.runs, before=argv)  # type: ignore[arg-type]
            else:
                times, cpu = wall(argv, env, args.runs)  # type: ignore[arg-type]
            times.sort()
            median = statistics.median(times) * 1000
            slowest = max(slowest, median)
            p90 = times[int(0.9 * (len(times) - 1))] * 1000
            print(f"{'voda ' + label:30} {median:10.0f} {p90:8.0f} "
                  f"{statistics.median(cpu) * 1000:14.0f}")
        verdict = "under" if slowest < TARGET_MS else "OVER"
        print(f"slowest median {slowest:.0f} ms wall: {verdict} the {TARGET_MS} ms target "
              f"(load average {os.getloadavg()[0]:.1f})")
    finally:
        server.kill()


if __name__ == "__main__":
    main()
