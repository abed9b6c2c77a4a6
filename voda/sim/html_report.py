"""`voda simulate --report DIR`: one self-contained HTML file of a simulation.

The file opens from disk with no server and no network: uPlot, the styles and the
chart code are inlined, the data is embedded as JSON. It holds the comparison table,
JCT CDFs, GPUs in use and queue length over time, per-job timelines (a job chosen
from a list), and the settings that produced it.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from voda.sim.report import SimResult
from voda.web import environment, static_text

REPORT_FILE = "index.html"
CDF_POINTS = 200
TIME_POINTS = 400
MAX_TIMELINE_JOBS = 1000  # jobs whose timelines are embedded (the chosen one always is)


def write_report(results: Sequence[SimResult], directory: Path | str,
                 settings: Mapping[str, Any], chosen_job: str | None = None) -> Path:
    """Write DIR/index.html and return its path."""
    if not results:
        raise ValueError("results: nothing to report")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / REPORT_FILE
    path.write_text(render_report(results, settings, chosen_job), encoding="utf-8")
    return path


def render_report(results: Sequence[SimResult], settings: Mapping[str, Any],
                  chosen_job: str | None = None) -> str:
    names = [j.name for j in results[0].jobs]
    if chosen_job is not None and chosen_job not in names:
        raise ValueError(f"report_job: no job {chosen_job!r} in the workload")
    jobs = timeline_jobs(results[0], chosen_job)
    data = {
        "algorithms": [r.algorithm for r in results],
        "jobs": timelines(results, jobs),
        "chosen": chosen_job or (jobs[0] if jobs else None),
        "more_jobs": max(0, len(names) - len(jobs)),
    }
    return environment().get_template("report.html").render(
        title=f"Voda simulation: {_short(results[0].workload)}",
        rows=comparison_rows(results),
        cdf_chart=jct_cdf_chart(results),
        gpus_chart=over_time_chart(results, gpus_in_use, "GPUs in use", "GPUs"),
        queue_chart=over_time_chart(results, waiting_jobs, "Queue length (jobs waiting)",
                                    "jobs"),
        settings=settings, data=data, generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        inline_css=static_text("vendor/uplot/uPlot.min.css") + static_text("voda.css"),
        inline_js=[static_text("vendor/uplot/uPlot.iife.min.js"), static_text("charts.js"),
                   static_text("report.js")],
    )


def _short(source: str) -> str:
    return Path(source).name or source


def _number(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


# ----- the table ---------------------------------------------------------------------------
def comparison_rows(results: Sequence[SimResult]) -> list[dict[str, Any]]:
    best = min((r.avg_jct for r in results if not math.isnan(r.avg_jct)), default=None)
    rows = []
    for r in results:
        done = len(r.jobs) - r.unfinished
        rows.append({
            "algorithm": r.algorithm, "jobs": len(r.jobs), "unfinished": r.unfinished,
            "avg_jct": _number(r.avg_jct), "p50_jct": _number(r.p50_jct),
            "p99_jct": _number(r.p99_jct), "makespan": _number(r.makespan),
            "utilization": r.utilization, "gpu_hours": r.gpu_hours, "rescales": r.rescales,
            "migrations": r.migrations, "preemptions": r.preemptions,
            "per_job": (r.rescales + r.preemptions) / done if done else None,
            "best": best is not None and r.avg_jct == best,
        })
    return rows


# ----- charts (specs for voda/web/static/charts.js) ---------------------------------------------
def jct_cdf_chart(results: Sequence[SimResult]) -> dict[str, Any]:
    """Fraction of jobs finished within x seconds, on a log grid shared by the algorithms."""
    jcts = {r.algorithm: sorted(j.jct for j in r.jobs if j.jct is not None) for r in results}
    every = [v for values in jcts.values() for v in values if v > 0]
    if not every:
        xs: list[float] = []
    else:
        lo, hi = min(every), max(every)
        steps = CDF_POINTS - 1
        xs = [lo * (hi / lo) ** (i / steps) for i in range(CDF_POINTS)] if hi > lo else [lo]
    series = []
    for r in results:
        values = jcts[r.algorithm]
        total = len(r.jobs)
        series.append({"label": r.algorithm, "step": True,
                       "values": [bisect.bisect_right(values, x) / total for x in xs]})
    return {"kind": "lines", "title": "JCT CDF", "x": {"label": "job completion time (s)",
                                                       "log": True},
            "y": {"label": "fraction of jobs", "min": 0}, "xs": xs, "series": series,
            "height": 320}


def gpus_in_use(result: SimResult) -> list[tuple[float, float]]:
    """(time, GPUs held by all jobs from then), from the per-job timeline."""
    held: dict[str, int] = {}
    total = 0
    out: list[tuple[float, float]] = []
    for t, name, gpus in sorted(result.timeline, key=lambda e: e[0]):
        total += gpus - held.get(name, 0)
        held[name] = gpus
        if out and out[-1][0] == t:
            out[-1] = (t, total)
        else:
            out.append((t, total))
    return out


def waiting_jobs(result: SimResult) -> list[tuple[float, float]]:
    return [(t, waiting) for t, waiting, _ in result.queue]


def step_at(changes: Sequence[tuple[float, float]], times: Sequence[float]) -> list[float]:
    """The value of a step function (value from each change on) at each time; 0 before."""
    keys = [t for t, _ in changes]
    out = []
    for t in times:
        i = bisect.bisect_right(keys, t) - 1
        out.append(changes[i][1] if i >= 0 else 0.0)
    return out


def over_time_chart(results: Sequence[SimResult], changes_of: Any, title: str,
                    unit: str) -> dict[str, Any]:
    """One step line per algorithm, sampled on a shared grid of hours."""
    changes = {r.algorithm: changes_of(r) for r in results}
    ends = [c[-1][0] for c in changes.values() if c]
    starts = [c[0][0] for c in changes.values() if c]
    if not ends:
        return {"kind": "lines", "title": title, "x": {"label": "hours"}, "y": {"label": unit},
                "xs": [], "series": []}
    lo, hi = min(starts), max(ends)
    span = max(hi - lo, 1e-9)
    times = [lo + span * i / (TIME_POINTS - 1) for i in range(TIME_POINTS)]
    series = [{"label": r.algorithm, "step": True,
               "values": step_at(changes[r.algorithm], times)} for r in results]
    return {"kind": "lines", "title": title, "x": {"label": "hours since the first arrival"},
            "y": {"label": unit, "min": 0}, "xs": [(t - lo) / 3600 for t in times],
            "series": series, "height": 300}


# ----- per-job timelines --------------------------------------------------------------------------
def timeline_jobs(result: SimResult, chosen: str | None) -> list[str]:
    """The jobs whose timelines the report embeds: all, or the first MAX_TIMELINE_JOBS by
    submission, and the chosen one."""
    ordered = [j.name for j in sorted(result.jobs, key=lambda j: (j.submit, j.name))]
    picked = ordered[:MAX_TIMELINE_JOBS]
    if chosen is not None and chosen not in picked:
        picked.append(chosen)
    return picked


def timelines(results: Sequence[SimResult], jobs: Sequence[str]) -> dict[str, Any]:
    """{job: {"submit": s, "runs": [[times], [GPUs], finish] per algorithm}}."""
    wanted = set(jobs)
    out: dict[str, Any] = {}
    for index, r in enumerate(results):
        changes: dict[str, tuple[list[float], list[int]]] = {}
        for t, name, gpus in r.timeline:
            if name in wanted:
                ts, gs = changes.setdefault(name, ([], []))
                ts.append(round(t, 3))
                gs.append(gpus)
        for j in r.jobs:
            if j.name not in wanted:
                continue
            entry = out.setdefault(j.name, {"submit": j.submit, "runs": [None] * len(results)})
            ts, gs = changes.get(j.name, ([], []))
            entry["runs"][index] = [ts, gs, j.finish]
    return {name: out[name] for name in jobs if name in out}
