"""What each dashboard page shows, built from the service's views (plain dicts in, plain
dicts out: no I/O, no clock beyond the `now` given)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from voda.api.job_labels import labels, named
from voda.core.estimate import fit_speed
from voda.core.model import ActionKind

# History fields that change the allocation, and how the chart marks them.
ALLOCATION_FIELDS = frozenset(str(k) for k in ActionKind)
EVENT_LABELS = {
    str(ActionKind.START): "start",
    str(ActionKind.SCALE_IN): "rescale",
    str(ActionKind.SCALE_OUT): "rescale",
    str(ActionKind.MIGRATE): "migration",
    str(ActionKind.HALT): "preemption",
}
END_STATUSES = frozenset({"Completed", "Failed", "Canceled"})
PAGE_SIZES = (25, 50, 100, 200)


# ----- cluster ---------------------------------------------------------------------------
CELL_JOB, CELL_OTHERS, CELL_FREE, CELL_GONE = "job", "others", "free", "gone"
NODE_STATES = ("ready", "cordoned", "lost")
# Job colours: the classes job-c0 .. job-c7 of voda.css, the Okabe-Ito palette (told apart
# with the common colour-vision deficiencies). Jobs take them in the order the map shows
# them, so jobs side by side differ; past eight they repeat, and the number in every cell
# (the job's place in the legend) still tells them apart.
JOB_COLOURS = 8


@dataclass(frozen=True, slots=True)
class Cell:
    kind: str  # a job of the viewer's (or any, for an admin), others' usage, free, gone
    job: str | None = None
    owner: str = ""
    workers: int = 0


def gpu_cells(node: Mapping[str, Any], jobs: Mapping[str, Mapping[str, Any]]) -> list[Cell]:
    """One cell per GPU of a node: the jobs holding them in name order, then other users'
    (anonymous), then the free ones; a lost node's GPUs are gone."""
    if node["state"] == "lost":
        return [Cell(CELL_GONE)] * node["gpus"]
    cells: list[Cell] = []
    for name, count in sorted(node["jobs"].items()):
        info = jobs.get(name, {})
        cells.extend([Cell(CELL_JOB, name, info.get("user", ""),
                           info.get("workers", count))] * count)
    cells.extend([Cell(CELL_OTHERS)] * node.get("others", 0))
    free = max(0, node["gpus"] - len(cells))
    return cells[:node["gpus"]] + [Cell(CELL_FREE)] * free


@dataclass(frozen=True, slots=True)
class JobMark:
    """How a job is shown on the cluster map: its number in the legend (in every cell of
    it) and its colour class."""

    number: int
    colour: str


def job_marks(names: Sequence[str]) -> dict[str, JobMark]:
    """Numbers 1, 2, ... and colours in the order given (the order of the map)."""
    return {name: JobMark(i + 1, f"job-c{i % JOB_COLOURS}") for i, name in enumerate(names)}


def cluster_page(view: Mapping[str, Any], gpu_type: str | None) -> dict[str, Any]:
    """Nodes (the lost ones too) grouped spine > leaf, in the cluster's order, for one GPU
    type or all; the jobs on them numbered and coloured in the order they first appear."""
    types = [t["gpu_type"] for t in view["gpu_types"]]
    selected = gpu_type if gpu_type in types else None
    nodes = [n for n in (*view["nodes"], *view.get("lost_nodes", []))
             if selected is None or n["gpu_type"] == selected]
    spines: dict[str, dict[str, list[dict[str, Any]]]] = {}
    others = 0
    for node in nodes:
        cells = gpu_cells(node, view["jobs"])
        others += sum(1 for cell in cells if cell.kind == CELL_OTHERS)
        leaves = spines.setdefault(node["spine"], {})
        leaves.setdefault(node["leaf"], []).append({**node, "cells": cells})
    shown_jobs: dict[str, Mapping[str, Any]] = {}  # in the order the map shows them
    for leaves in spines.values():
        for members in leaves.values():
            for node in members:
                for cell in node["cells"]:
                    if cell.job is not None and cell.job not in shown_jobs:
                        shown_jobs[cell.job] = view["jobs"].get(cell.job, {})
    summaries = [t for t in view["gpu_types"] if selected is None or t["gpu_type"] == selected]
    return {
        "gpu_types": types,
        "selected": selected,
        "spines": spines,
        "summaries": summaries,
        "legend": list(shown_jobs.items()),
        "marks": job_marks(list(shown_jobs)),
        "others": others,
        "last_reschedule": view.get("last_reschedule"),
        "last_error": view.get("last_error"),
        "counts": {state: sum(1 for n in nodes if n["state"] == state) for state in NODE_STATES},
    }


def node_page(view: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """One node of the cluster view (a lost one too): its facts, its GPU cells and the
    jobs on it (the viewer's; other users' as a count of GPUs), or None when the cluster
    never had it."""
    found = next((n for n in (*view["nodes"], *view.get("lost_nodes", []))
                  if n["name"] == name), None)
    if found is None:
        return None
    cells = gpu_cells(found, view["jobs"])
    names = list(dict.fromkeys(c.job for c in cells if c.job is not None))
    jobs = [{"name": job, **view["jobs"].get(job, {}), "uid": job,
             "here": found["jobs"].get(job, 0)} for job in names]  # keyed by uid
    return {"node": {**found, "cells": cells}, "jobs": jobs, "marks": job_marks(names),
            "others": found.get("others", 0)}


# ----- jobs ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class JobFilters:
    status: str | None = None
    gpu_type: str | None = None
    search: str | None = None
    page: int = 1
    per_page: int = 50

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.per_page

    def query(self, **changes: Any) -> dict[str, Any]:
        """Query parameters of these filters with some changed (for links and streams)."""
        values = {"status": self.status, "gpu_type": self.gpu_type, "q": self.search,
                  "page": self.page, "per_page": self.per_page}
        values.update(changes)
        return {k: v for k, v in values.items() if v not in (None, "")}


def pages(total: int, per_page: int) -> int:
    return max(1, math.ceil(total / per_page))


# ----- a job -----------------------------------------------------------------------------
def allocation_series(job: Mapping[str, Any], history: Sequence[Mapping[str, Any]],
                      now: float) -> dict[str, Any]:
    """GPUs held over time (a step line from submission to the end or now) and the times of
    starts, rescales, migrations and preemptions, for the allocation chart."""
    start = job["submit_time"]
    times, gpus = [start], [0]
    events: dict[str, list[tuple[float, int]]] = {label: [] for label in
                                                  dict.fromkeys(EVENT_LABELS.values())}
    for entry in history:
        t = entry["time"]
        if entry["field"] in ALLOCATION_FIELDS:
            workers = int(entry["new"])
            label = EVENT_LABELS[entry["field"]]
        elif entry["field"] == "status" and entry["new"] in END_STATUSES:
            workers, label = 0, None
        else:
            continue
        times.append(t)
        gpus.append(workers)
        if label is not None:
            events[label].append((t, workers if label != "preemption" else int(entry["old"])))
    end = job.get("finish_time") or now
    times.append(max(end, times[-1]))
    gpus.append(gpus[-1])
    return {"times": times, "gpus": gpus,
            "events": {k: v for k, v in events.items() if v}}


def speed_series(epoch_time_by_workers: Mapping[Any, float], max_workers: int,
                 ) -> dict[str, Any]:
    """Measured epoch times by workers against the fitted model (Amdahl's law, the one the
    estimates extrapolate with), and the speed-up the scheduler estimates by worker count
    (voda.core.estimate: the measurements where there are some, interpolated between them,
    Amdahl beyond), with the measured points on the same scale."""
    measured = {int(k): float(v) for k, v in epoch_time_by_workers.items()}
    upto = max([max_workers, *measured]) if measured else max_workers
    workers = list(range(1, upto + 1))
    model = fit_speed(measured)
    reference = model.epoch_time(1)
    return {
        "workers": workers,
        "measured": [measured.get(k) for k in workers],
        "model": [model.serial + model.parallel / k for k in workers] if model.known else [],
        "speedup_model": [model.speedup(k) for k in workers],
        "speedup_measured": [reference / measured[k] if k in measured else None
                             for k in workers],
    }


def history_rows(history: Sequence[Mapping[str, Any]], limit: int = 200) -> list[dict]:
    """Newest first, with the change said in words."""
    rows = []
    for entry in reversed(history[-limit:]):
        what = entry["field"]
        if what in ALLOCATION_FIELDS:
            text = f"{EVENT_LABELS[what]} ({what}): {entry['old']} → {entry['new']} GPUs"
        elif entry["old"] is None:
            text = f"{what}: {entry['new']}"
        else:
            text = f"{what}: {entry['old']} → {entry['new']}"
        rows.append({"time": entry["time"], "kind": EVENT_LABELS.get(what, what), "text": text})
    return rows


# ----- scheduler -------------------------------------------------------------------------
def error_row(entry: Any, admin: bool, redacted: str,
              name_of: Mapping[str, str]) -> dict[str, Any]:
    """A refused decision of the scheduler's recent errors; its reason may name jobs, so
    only administrators read it (the jobs said by name: `name_of`, uid -> name)."""
    return {"time": entry.time, "gpu_type": entry.gpu_type,
            "message": named(entry.message, name_of) if admin else redacted}


def decision_row(decision: Any, can_see: Any, name_of: Mapping[str, str]) -> dict[str, Any]:
    """A recent decision, naming only the jobs it moved that the viewer may see
    (`can_see(uid)`); the others are counted. Every job it moved beyond the ones kept
    (activity.MOVED_KEPT) is counted too. Each job moved: its uid (`job`, for the link)
    and `label`, as people read it (job_labels: its name, or "name (uid)")."""
    shown = [m for m in decision.moved if can_see(m.job)]
    said = labels((m.job for m in shown), name_of)
    moved = [{"job": m.job, "label": said[m.job], "kind": m.kind, "before": m.before,
              "after": m.after} for m in shown]
    total = sum(decision.actions.values())
    reasons = [named(r, name_of) for r in decision.reasons]
    return {"time": decision.time, "reasons": reasons, "actions": decision.actions,
            "seconds": decision.seconds, "migrated_workers": decision.migrated_workers,
            "moved": moved, "hidden": total - len(moved)}


def latency_chart(histogram: Sequence[tuple[str, int]]) -> dict[str, Any]:
    return {"labels": [label for label, _ in histogram],
            "counts": [count for _, count in histogram]}
