"""Whether one user's open pages and idle connections slow `voda serve` down.

    python bench/limits.py [--streams 500] [--idle 500] [--runs 50] [--unbounded]

1. Starts `voda serve` (emulated 4x4 cluster, fresh SQLite store, the default limits:
   max_streams_per_user 8, max_streams 256, header_timeout_seconds 10,
   max_connections 1000) and times `--runs` requests each of /healthz, a job submission
   and a list of jobs, one after another, with nothing else open.
2. Opens `--streams` dashboard event streams (/ui/stream/cluster) as one non-admin user
   (most are refused by max_streams_per_user: 429) and `--idle` connections that send
   nothing, all from 127.0.0.2 (another host than the measured client; beyond
   max_connections_per_address, 256, they are answered 503), then times the same
   requests again while they are open.
3. Prints the median and the 95th percentile of each, without and with the load, and
   what became of the streams and idle connections (the head deadline closes the idle
   ones after header_timeout_seconds).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from voda_testing.serve import ServeProcess, free_port  # noqa: E402

TOKENS = {"alice": "bench-token-alice", "root": "bench-token-root"}
LOAD_FROM = "127.0.0.2"  # the load's address (all of 127/8 is loopback)
# generate_name: each timed submission is a new job (a live name is unique)
JOB = {"generate_name": "bench-", "command": "x", "epochs": 1_000_000}


def timed(call: object, runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        began = time.perf_counter()
        response = call()  # type: ignore[operator]
        seconds.append(time.perf_counter() - began)
        assert response.status_code < 300, response.text
    return seconds


def measure(server: ServeProcess, runs: int) -> dict[str, list[float]]:
    with server.client("alice") as alice:
        alice.get("/healthz")  # the connection is open before the clock starts
        return {
            "healthz": timed(lambda: alice.get("/healthz"), runs),
            "submit": timed(lambda: alice.post("/v1/jobs", json=JOB), runs),
            "list": timed(lambda: alice.get("/v1/jobs", params={"limit": 50}), runs),
        }


def open_streams(server: ServeProcess, count: int) -> tuple[list[socket.socket], dict[int, int]]:
    """Send every stream's request first, then read the heads: the service sees them all
    at once, as from a user with many tabs reopening."""
    socks = []
    cookie = "; ".join(f"{k}={v}" for k, v in server.dashboard_cookies("alice").items())
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=60,
                                        source_address=(LOAD_FROM, 0))
        sock.sendall((f"GET /ui/stream/cluster HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                      f"Cookie: {cookie}\r\n\r\n").encode())
        socks.append(sock)
    statuses: dict[int, int] = {}
    for sock in socks:
        data = b""
        try:
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            status = int(data.split()[1]) if data else 0
        except OSError:
            status = 0
        statuses[status] = statuses.get(status, 0) + 1
    return socks, statuses


def still_open(socks: list[socket.socket]) -> int:
    """How many of `socks` the server has not closed (what it sent is read and dropped)."""
    count = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            while sock.recv(1 << 16):
                pass
        except (BlockingIOError, InterruptedError):
            count += 1  # nothing more to read, and not closed
        except OSError:
            pass
    return count


def figures(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"median {statistics.median(ordered) * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--unbounded", action="store_true",
                        help="limits far beyond the load, to compare (as before they were)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="voda-bench-limits-"))
    if args.unbounded:
        (folder / "config.toml").write_text(
            "[server]\nmax_streams_per_user = 100000\nmax_streams = 100000\n"
            "header_timeout_seconds = 100000\nmax_connections = 100000\n"
            "max_connections_per_address = 100000\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
    env["VODA_CONFIG"] = str(folder / "config.toml")
    env["VODA_TOKENS"] = f"alice:{TOKENS['alice']},root:{TOKENS['root']}:admin"
    port = free_port()
    server = ServeProcess(url=f"http://127.0.0.1:{port}", port=port,
                          args=["--db", f"sqlite:///{folder / 'voda.db'}"], env=env,
                          log_path=folder / "serve.log", tokens=TOKENS)
    server.start()
    try:
        quiet = measure(server, args.runs)
        began = time.monotonic()
        streams, statuses = open_streams(server, args.streams)
        idle = [socket.create_connection(("127.0.0.1", port), timeout=60,
                                         source_address=(LOAD_FROM, 0))
                for _ in range(args.idle)]
        opened_in = time.monotonic() - began
        loaded = measure(server, args.runs)
        measured_in = time.monotonic() - began - opened_in
        print(f"{args.streams} event streams of one user: "
              + ", ".join(f"{n} answered {s or 'nothing'}" for s, n in sorted(statuses.items()))
              + f"; {args.idle} idle connections; opened in {opened_in:.1f} s, "
                f"measured in {measured_in:.1f} s")
        print(f"{'request':10} {'no load':>32} {'streams + idle open':>36}")
        for name in quiet:
            print(f"{name:10} {figures(quiet[name]):>32} {figures(loaded[name]):>36}")
        print(f"after the measurement: {still_open(idle)} of {args.idle} idle connections "
              f"still open, {still_open(streams)} of {args.streams} stream "
              "connections")
        deadline = time.monotonic() + (5 if args.unbounded else 60)
        while still_open(idle) and time.monotonic() < deadline:
            time.sleep(0.5)
        print(f"{time.monotonic() - began:.1f} s after they opened: {still_open(idle)} idle "
              "connections still open")
        with httpx.Client(base_url=server.url) as client:
            assert client.get("/healthz").status_code == 200
        for sock in streams + idle:
            sock.close()
    finally:
        server.kill()


if __name__ == "__main__":
    main()
