"""Workloads resampled from the Pollux ones: inputs no policy knob was chosen on.

The four Pollux workloads are samples of one trace's arrival pattern and job mix, and a
policy tuned on them can fit their bursts. A resampled workload draws its jobs with
replacement from them (application, GPUs asked for, batch) and spreads the arrivals
uniformly over the same eight hours: it keeps the job mix and the load (jobs per hour),
not the bursts.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from voda.sim.workloads import POLLUX_COLUMNS, builtin_workload

POLLUX_WINDOW_SECONDS = 8 * 3600.0  # the Pollux workloads' jobs arrive within 8 hours
POLLUX_JOBS_AT_LOAD_1 = 160  # jobs per Pollux workload at load 1.0
MAX_JOBS = 100_000


def pollux_sources() -> list[Path]:
    """The four built-in Pollux workloads at load 1.0: the pool jobs are drawn from."""
    paths = [builtin_workload(f"workload-{i}") for i in range(1, 5)]
    return [p for p in paths if p is not None]


def resampled_rows(count: int, seed: int, sources: Sequence[Path] | None = None,
                   window: float = POLLUX_WINDOW_SECONDS) -> list[dict[str, str]]:
    """`count` Pollux CSV rows, each job drawn with replacement from the `sources`'
    jobs, arriving uniformly over `window` seconds, in arrival order. The same
    `count`, `seed` and sources give the same rows."""
    if isinstance(count, bool) or not (isinstance(count, int) and 1 <= count <= MAX_JOBS):
        raise ValueError(f"count: must be a whole number in [1, {MAX_JOBS:,}], got {count!r}")
    if not window > 0:
        raise ValueError(f"window: must be a positive number of seconds, got {window!r}")
    pool: list[dict[str, str]] = []
    for path in sources if sources is not None else pollux_sources():
        with open(path, newline="") as f:
            pool.extend(csv.DictReader(f))
    if not pool:
        raise ValueError("sources: no jobs to draw from")
    rng = np.random.default_rng([seed, count])
    arrivals = np.sort(rng.uniform(0.0, window, count)).astype(int)
    drawn = rng.integers(0, len(pool), count)
    return [{"name": f"{pool[k]['application']}-{i}", "time": str(t),
             "application": pool[k]["application"], "num_replicas": pool[k]["num_replicas"],
             "batch_size": pool[k]["batch_size"]}
            for i, (t, k) in enumerate(zip(arrivals.tolist(), drawn.tolist(), strict=True))]


def write_resampled(path: Path, count: int, seed: int,
                    sources: Sequence[Path] | None = None) -> Path:
    """A resampled workload (`resampled_rows`) written as a Pollux CSV file at `path`."""
    rows = resampled_rows(count, seed, sources)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(POLLUX_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    return path
