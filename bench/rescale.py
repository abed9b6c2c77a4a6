"""Rescale latency of the local backend: from the decision to training again at the new size.

For each launcher, starts the example job (examples/local/train.py) on the
LocalBackend, then rescales it N times through sizes 2, 4, 1, 3, ... and
measures, per rescale, the time from `backend.scale()` to the first training
step the job completes at its new size (the job logs that step with a
wall-clock time stamp). The interval covers the graceful stop (SIGTERM,
checkpoint, exit), the launch of the new ranks, the gloo rendezvous
and the checkpoint load. Target for the example job: median <= 5 s.

    .venv/bin/python bench/rescale.py [--rescales 6] [--launcher fork --launcher direct]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from voda.backends.local import LAUNCHERS, LocalBackend  # noqa: E402
from voda.core.model import Job  # noqa: E402

TRAINING = re.compile(r"training at world size (\d+) .* t=([0-9.]+)")
SIZES = (2, 4, 1, 3)
TARGET_SECONDS = 5.0


def wait_for_training(log: Path, offset: int, world: int, timeout: float) -> tuple[float, int]:
    """Wait for 'training at world size W ... t=T' past `offset`; returns (T, new offset)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_bytes()[offset:].decode(errors="replace") if log.exists() else ""
        for match in TRAINING.finditer(text):
            if int(match.group(1)) == world:
                return float(match.group(2)), offset + len(text.encode())
        time.sleep(0.02)
    raise TimeoutError(f"no training step at world size {world} within {timeout} s; see {log}")


def measure(launcher: str, rescales: int, slots: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="voda-bench-") as run_dir:
        command = f"python {ROOT / 'examples/local/train.py'} --epochs 100000 --sample-seconds 0"
        backend = LocalBackend(slots=slots, run_dir=run_dir, launcher=launcher, cwd=ROOT,
                               commands={"bench": command})
        job = Job("bench", 1, slots, epochs=100000)
        log = backend.log_path("bench")
        try:
            backend.start(job, (("local", 1),))
            _, offset = wait_for_training(log, 0, 1, timeout=180)
            latencies = []
            for i in range(rescales):
                world = SIZES[i % len(SIZES)]
                decided = time.time()
                backend.scale(job, (("local", world),))
                trained, offset = wait_for_training(log, offset, world, timeout=120)
                latencies.append(trained - decided)
                print(f"  {launcher:8} rescale {i + 1}: -> {world} workers in "
                      f"{trained - decided:.2f} s", flush=True)
                backend.events()
                time.sleep(0.5)
            return latencies
        finally:
            backend.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rescales", type=int, default=6)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--launcher", action="append", choices=LAUNCHERS)
    args = parser.parse_args()
    if args.rescales < 1:
        parser.error("--rescales: must be at least 1")
    results = {launcher: measure(launcher, args.rescales, args.slots)
               for launcher in args.launcher or ["fork"]}
    print(f"rescale latency, decision -> training at the new size ({args.rescales} rescales, "
          f"target median <= {TARGET_SECONDS:g} s):")
    for launcher, latencies in results.items():
        median = statistics.median(latencies)
        verdict = "meets" if median <= TARGET_SECONDS else "MISSES"
        print(f"  {launcher:8} median {median:.2f} s  min {min(latencies):.2f} s  "
              f"max {max(latencies):.2f} s  ({verdict} the target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
