"""`voda sweep`'s results: one row per cell (the runs that differ in their seed only), each
metric's mean and 95 % interval across the seeds (voda.sim.seeds), written as CSV and
JSON; and an HTML report: one `voda simulate --report` page per comparison (the cells
that differ in algorithm and knobs only, voda.sim.html_report) under an index of all rows.
"""

from __future__ import annotations

import csv
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from voda.sim.compare import RunRequest
from voda.sim.report import SimResult
from voda.sim.seeds import CONFIDENCE, METRICS, Interval, json_ready, metric_intervals
from voda.sim.sweep_store import run_key

TABLE_CSV = "table.csv"
TABLE_JSON = "table.json"
REPORT_DIR = "report"
INDEX_METRICS = ("avg_jct", "p99_jct", "makespan", "utilization", "preemptions",
                 "rescales", "mean_slowdown", "rho_max", "unfinished")


@dataclass(frozen=True)
class Row:
    cell: RunRequest  # its first seed's request
    runs: tuple[SimResult, ...]
    metrics: dict[str, Interval]

    @property
    def label(self) -> str:
        """The algorithm and its knobs, as the report's series are named."""
        knobs = " ".join(f"{k}={knob_text(v)}" for k, v in self.cell.params)
        return f"{self.cell.algorithm} {knobs}" if knobs else self.cell.algorithm

    def fields(self) -> dict[str, Any]:
        c = self.cell
        return {"workload": c.workload, "cluster": c.cluster, "algorithm": c.algorithm,
                "knobs": {k: v for k, v in c.params}, "seeds": [r.seed for r in self.runs],
                "jitter": c.jitter, "jobs": len(self.runs[0].jobs)}

    def to_dict(self) -> dict[str, Any]:
        return {**self.fields(), "metrics": {k: v.to_dict() for k, v in self.metrics.items()}}


def knob_text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return "none" if value is None else str(value)


def cell_of(request: RunRequest) -> str:
    """The key of a run's cell: its parameters but the seed."""
    return run_key(replace(request, seed=0))


def build_rows(runs: Sequence[RunRequest], results: Sequence[SimResult]) -> list[Row]:
    """One row per cell, in the grid's order; `results[i]` is `runs[i]`'s."""
    cells: dict[str, tuple[RunRequest, list[SimResult]]] = {}
    for request, result in zip(runs, results, strict=True):
        cells.setdefault(cell_of(request), (request, []))[1].append(result)
    return [Row(cell, tuple(sorted(rs, key=lambda r: r.seed)), metric_intervals(rs))
            for cell, rs in cells.values()]


def table_json(rows: Sequence[Row]) -> dict[str, Any]:
    return {"confidence": CONFIDENCE, "rows": [json_ready(r.to_dict()) for r in rows]}


def write_tables(rows: Sequence[Row], directory: Path) -> tuple[Path, Path]:
    """DIR/table.csv (a row per cell; each metric's mean, low, high and n) and
    DIR/table.json (the same rows)."""
    csv_path, json_path = directory / TABLE_CSV, directory / TABLE_JSON
    head = ["workload", "cluster", "algorithm", "knobs", "seeds", "jitter", "jobs"]
    metric_columns = [f"{key}_{part}" for key, _, _ in METRICS
                      for part in ("mean", "low", "high", "n")]
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(head + metric_columns)
        for row in rows:
            fields = row.fields()
            fields["knobs"] = " ".join(f"{k}={knob_text(v)}" for k, v in row.cell.params)
            fields["seeds"] = len(row.runs)
            values = [fields[h] for h in head]
            for key, _, _ in METRICS:
                m = row.metrics[key]
                values += [_csv_number(m.mean), _csv_number(m.low), _csv_number(m.high), m.n]
            writer.writerow(values)
    json_path.write_text(json.dumps(table_json(rows), allow_nan=False, indent=1) + "\n",
                         encoding="utf-8")
    return csv_path, json_path


def _csv_number(x: float | None) -> str:
    return "" if x is None or math.isnan(x) else repr(x)


def comparisons(rows: Sequence[Row]) -> dict[str, list[Row]]:
    """The rows compared on one report page (all but algorithm and knobs alike), each
    under a folder name made of its workload and cluster."""
    groups: dict[str, list[Row]] = {}
    names: dict[str, str] = {}
    for row in rows:
        key = run_key(replace(row.cell, algorithm="", params=()))
        if key not in names:
            base = _slug(f"{Path(row.cell.workload).name}-{Path(row.cell.cluster).name}")
            names[key] = f"{len(names) + 1:03d}-{base}"
        groups.setdefault(names[key], []).append(row)
    return groups


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9@.]+", "-", text).strip("-")[:60] or "cell"


def write_report(rows: Sequence[Row], directory: Path,
                 settings_of: Callable[[list[RunRequest]], Mapping[str, Any]]) -> Path:
    """DIR/report/index.html (every row, linked to its comparison) and one
    `voda simulate --report` page per comparison under it. `settings_of(requests)`:
    what the page shows as the settings that produced it."""
    from voda.sim import html_report
    from voda.web import environment, static_text

    folder = directory / REPORT_DIR
    index_rows = []
    for name, group in comparisons(rows).items():
        results = [replace(r, algorithm=row.label) for row in group for r in row.runs]
        requests = [replace(row.cell, algorithm=row.label) for row in group]
        html_report.write_report(results, folder / name, settings_of(requests))
        for row in group:
            index_rows.append({**row.fields(), "label": row.label, "page": f"{name}/index.html",
                               "metrics": {k: row.metrics[k] for k in INDEX_METRICS}})
    labels = {key: label for key, label, _ in METRICS}
    html = environment().get_template("sweep.html").render(
        title=f"Voda sweep: {len(rows)} cells, {sum(len(r.runs) for r in rows)} runs",
        rows=index_rows, metrics=[(k, labels[k]) for k in INDEX_METRICS],
        confidence=CONFIDENCE, generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        inline_css=static_text("voda.css") + static_text("report.css"))
    path = folder / "index.html"
    path.write_text(html, encoding="utf-8")
    return path
