"""`voda simulate --report DIR`: one self-contained HTML file of a simulation.

The file opens from disk with no server and no network: uPlot, the styles and the
chart code are inlined, the data is embedded as JSON. It holds the comparison table
(a mean and a 95 % interval across seeds with `--seeds`), CDFs of JCT, wait and slowdown,
finish-time fairness per algorithm, GPUs in use and queue length over time, per-job
timelines (a job chosen from a list), a per-job table, and the settings that produced it.
Checkboxes pick the algorithms the charts and tables show.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from voda.sim import per_job
from voda.sim.palette import Style, styles
from voda.sim.report import JobResult, SimResult
from voda.sim.seeds import CONFIDENCE, by_algorithm, summarize
from voda.web import environment, static_text

REPORT_FILE = "index.html"
CDF_POINTS = 200
TIME_POINTS = 400
MAX_TIMELINE_JOBS = 1000  # jobs whose timelines are embedded (the chosen one always is)
MAX_JOB_ROWS = 3000
RHO = "\u03c1"  # finish-time fairness  # rows of the per-job table (all of them go to --csv)


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
    """`results`: one per algorithm, or one per algorithm per seed (`--seeds`)."""
    runs = by_algorithm(results)
    first = [seeded[0] for seeded in runs.values()]  # the over-time charts show one seed
    names = [j.name for j in first[0].jobs]
    if chosen_job is not None and chosen_job not in names:
        raise ValueError(f"report_job: no job {chosen_job!r} in the workload")
    look = styles(list(runs))
    seeds = sorted({r.seed for r in results})
    jobs = timeline_jobs(first[0], chosen_job)
    data = {
        "algorithms": [r.algorithm for r in first],
        "styles": [{"color": look[r.algorithm].color, "dash": list(look[r.algorithm].dash)}
                   for r in first],
        "jobs": timelines(first, jobs),
        "chosen": chosen_job or (jobs[0] if jobs else None),
        "more_jobs": max(0, len(names) - len(jobs)),
    }
    table = per_job.rows(results)
    seed_note = f" (seed {first[0].seed})" if len(seeds) > 1 else ""
    return environment().get_template("report.html").render(
        title=f"Voda simulation: {_short(first[0].workload)}",
        rows=comparison_rows(results),
        seeds=seeds, jitter=first[0].jitter, confidence=CONFIDENCE,
        algorithms=[{"name": a, "color": look[a].color} for a in runs],
        cdf_chart=cdf_chart(results, lambda j: j.jct, "JCT CDF", "job completion time (s)"),
        wait_chart=cdf_chart(results, lambda j: j.wait, "Wait CDF",
                             "wait: submission to first GPU (s)"),
        slowdown_chart=cdf_chart(results, lambda j: j.slowdown, "Slowdown CDF",
                                 "slowdown: JCT / run time alone at max GPUs"),
        rho_mean_chart=fairness_chart(results, "rho_mean", "Mean finish-time fairness " + RHO),
        rho_max_chart=fairness_chart(results, "rho_max", "Max finish-time fairness " + RHO),
        gpus_chart=over_time_chart(first, gpus_in_use, "GPUs in use" + seed_note, "GPUs"),
        queue_chart=over_time_chart(first, waiting_jobs,
                                    "Queue length (jobs waiting)" + seed_note, "jobs"),
        job_rows=table[:MAX_JOB_ROWS], job_rows_total=len(table),
        settings=settings, data=data, generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        inline_css=static_text("vendor/uplot/uPlot.min.css") + static_text("voda.css")
        + static_text("report.css"),
        inline_js=[static_text("vendor/uplot/uPlot.iife.min.js"), static_text("charts.js"),
                   static_text("report.js")],
    )


def _short(source: str) -> str:
    return Path(source).name or source


def _number(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


# ----- the table ---------------------------------------------------------------------------
def comparison_rows(results: Sequence[SimResult]) -> list[dict[str, Any]]:
    """One row per algorithm: each metric's mean across seeds (`<metric>`) and, with
    two seeds or more, the half-width of its 95 % interval (`<metric>_pm`)."""
    summaries = summarize(results)
    means = [s.metrics["avg_jct"].mean for s in summaries]
    best = min((m for m in means if not math.isnan(m)), default=None)
    rows = []
    for s in summaries:
        row: dict[str, Any] = {"algorithm": s.algorithm, "jobs": s.jobs,
                               "seeds": len(s.runs)}
        for key, interval in s.metrics.items():
            row[key] = _number(interval.mean)
            row[key + "_pm"] = interval.half_width
        # Rescales and preemptions per finished job, averaged over the seeds.
        changes = [(r.rescales + r.preemptions) / (len(r.jobs) - r.unfinished)
                   for r in s.runs if len(r.jobs) > r.unfinished]
        row["per_job"] = sum(changes) / len(changes) if changes else None
        row["unfinished"] = row["unfinished"] or 0  # mean over the seeds
        row["best"] = best is not None and s.metrics["avg_jct"].mean == best
        rows.append(row)
    return rows


# ----- charts (specs for voda/web/static/charts.js) ---------------------------------------------
def _series(label: str, values: list[Any], style: Style, **extra: Any) -> dict[str, Any]:
    return {"label": label, "values": values, "color": style.color, "dash": list(style.dash),
            **extra}


def cdf_chart(results: Sequence[SimResult], value_of: Callable[[JobResult], float | None],
              title: str, x_label: str) -> dict[str, Any]:
    """Fraction of jobs (all seeds pooled) whose value is at most x, on a log grid shared
    by the algorithms; jobs without a value (unfinished, never started) count in the
    fraction's denominator only."""
    runs = by_algorithm(results)
    look = styles(list(runs))
    values = {a: sorted(v for r in seeded for j in r.jobs
                        if (v := value_of(j)) is not None and not math.isnan(v))
              for a, seeded in runs.items()}
    totals = {a: sum(len(r.jobs) for r in seeded) for a, seeded in runs.items()}
    positive = [v for vs in values.values() for v in vs if v > 0]
    log = bool(positive)
    if positive:
        lo, hi = min(positive), max(positive)
        steps = CDF_POINTS - 1
        xs = [lo * (hi / lo) ** (i / steps) for i in range(CDF_POINTS)] if hi > lo else [lo]
    else:  # every value is 0 (or there is none)
        xs = [0.0, 1.0] if any(values.values()) else []
    series = [_series(a, [bisect.bisect_right(values[a], x) / totals[a] if totals[a] else None
                          for x in xs], look[a], step=True) for a in runs]
    return {"kind": "lines", "title": title, "x": {"label": x_label, "log": log},
            "y": {"label": "fraction of jobs", "min": 0}, "xs": xs, "series": series,
            "height": 320}


def jct_cdf_chart(results: Sequence[SimResult]) -> dict[str, Any]:
    return cdf_chart(results, lambda j: j.jct, "JCT CDF", "job completion time (s)")


def fairness_chart(results: Sequence[SimResult], key: str, title: str) -> dict[str, Any]:
    """One bar per algorithm (its mean across seeds of a run's `key`), each algorithm its
    own series so that it keeps its colour and can be hidden."""
    summaries = summarize(results)
    look = styles([s.algorithm for s in summaries])
    n = len(summaries)
    series = []
    for i, s in enumerate(summaries):
        values: list[float | None] = [None] * n
        values[i] = _number(s.metrics[key].mean)
        series.append(_series(s.algorithm, values, look[s.algorithm]))
    return {"kind": "bars", "title": title,
            "x": {"label": "", "labels": [s.algorithm for s in summaries], "rotate": -40},
            "y": {"label": RHO + " = JCT / JCT on a 1/N share", "min": 0},
            "xs": list(range(n)), "series": series, "height": 300}


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
    look = styles([r.algorithm for r in results])
    series = [_series(r.algorithm, step_at(changes[r.algorithm], times), look[r.algorithm],
                      step=True) for r in results]
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
