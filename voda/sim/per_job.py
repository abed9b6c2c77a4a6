"""One row per job per algorithm per seed: the report's per-job table and `--csv PATH`.

Columns (seconds unless said): submit (arrival, jittered), start (first GPU), finish,
jct = finish - submit, wait = start - submit, gpu_hours held (restart penalties
included), the engine's rescales, migrations and preemptions of the job, alone (its run
time alone at its max GPUs, voda.sim.isolated), slowdown = jct / alone, fair_share (GPUs:
Themis' 1/N of the cluster), fair_alone (its run time alone on that share) and rho =
jct / fair_alone (finish-time fairness). Empty (CSV) or null when unknown: a job that did
not start or finish.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from voda.sim.report import SimResult
from voda.sim.seeds import by_algorithm

COLUMNS = ("job", "algorithm", "seed", "submit", "start", "finish", "jct", "wait",
           "gpu_hours", "rescales", "migrations", "preemptions", "alone", "slowdown",
           "fair_share", "fair_alone", "rho")


def rows(results: Sequence[SimResult]) -> list[dict[str, Any]]:
    """Job by job (in the order of the first run's workload), then algorithm, then seed."""
    runs = by_algorithm(results)
    if not runs:
        return []
    first = next(iter(runs.values()))[0]
    order = {j.name: i for i, j in enumerate(sorted(first.jobs, key=lambda j: (j.submit,
                                                                                j.name)))}
    out: list[dict[str, Any]] = []
    for algorithm_index, (algorithm, seeded) in enumerate(runs.items()):
        for seed_index, r in enumerate(seeded):
            for j in r.jobs:
                d = j.to_dict()
                out.append({
                    "job": j.name, "algorithm": algorithm, "seed": r.seed,
                    **{k: d[k] for k in COLUMNS[3:]},
                    "_key": (order.get(j.name, len(order)), j.name, algorithm_index,
                             seed_index),
                })
    out.sort(key=lambda row: row["_key"])
    for row in out:
        del row["_key"]
    return out


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def write_csv(results: Sequence[SimResult], path: Path | str) -> Path:
    """Write the rows to `path` (a header row first); floats at full precision."""
    target = Path(path)
    if target.parent != Path():
        target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for row in rows(results):
            writer.writerow([_cell(row[c]) for c in COLUMNS])
    return target
