"""PNG plots of simulation results (matplotlib, Agg backend: no display needed).

Each algorithm keeps its colour, dash and marker (voda.sim.palette). With several seeds
the CDFs pool the jobs of every seed; the plots over time show the first seed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from voda.sim.palette import Style, styles
from voda.sim.report import JobResult, SimResult
from voda.sim.seeds import by_algorithm, summarize

RHO = "\u03c1"  # finish-time fairness
MAX_STACKED_JOBS = 400  # above this the per-job stack is drawn as one total


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def _save(
    fig: Any, ax: Any, path: Path, xlabel: str, ylabel: str, title: str, legend: bool = True
) -> Path:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _line(style: Style) -> dict[str, Any]:
    """matplotlib keyword arguments of a style (dash lengths in points)."""
    dashes = (0, style.dash) if style.dash else "-"
    return {"color": style.color, "linestyle": dashes, "marker": style.marker,
            "markersize": 5}


def cdf(results: Sequence[SimResult], path: Path, value_of: Callable[[JobResult], Any],
        xlabel: str, title: str) -> Path:
    """Fraction of jobs (all seeds pooled) with a value at most x; log x when the values
    are positive."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    runs = by_algorithm(results)
    look = styles(list(runs))
    positive = True
    for algorithm, seeded in runs.items():
        total = sum(len(r.jobs) for r in seeded)
        values = np.sort([v for r in seeded for j in r.jobs if (v := value_of(j)) is not None])
        if len(values):
            positive = positive and bool(values[0] > 0)
            ax.step(values, np.arange(1, len(values) + 1) / total, where="post",
                    label=algorithm, markevery=max(1, len(values) // 8), **_line(look[algorithm]))
    if positive:
        ax.set_xscale("log")
    return _save(fig, ax, path, xlabel, "fraction of jobs", title)


def jct_cdf(results: Sequence[SimResult], path: Path) -> Path:
    return cdf(results, path, lambda j: j.jct, "job completion time (s)", "JCT CDF")


def fairness(results: Sequence[SimResult], path: Path) -> Path:
    """Mean and max finish-time fairness per algorithm (means across seeds)."""
    summaries = summarize(results)
    look = styles([s.algorithm for s in summaries])
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(summaries) + 2), 4.5))
    x = np.arange(len(summaries))
    colors = [look[s.algorithm].color for s in summaries]
    means = [s.metrics["rho_mean"].mean for s in summaries]
    tops = [s.metrics["rho_max"].mean for s in summaries]
    ax.bar(x - 0.2, means, 0.4, color=colors, label="mean " + RHO)
    ax.bar(x + 0.2, tops, 0.4, color=colors, alpha=0.45, hatch="//", label="max " + RHO)
    ax.axhline(1.0, color="#555555", linewidth=0.8)
    ax.set_xticks(x, [s.algorithm for s in summaries], rotation=30, ha="right")
    return _save(fig, ax, path, "", RHO + " = JCT / JCT alone on 1/N of the cluster",
                 "Finish-time fairness")


def gpus_per_job(result: SimResult, path: Path) -> Path:
    """GPUs held by each job over time, stacked."""
    times = sorted({t for t, _, _ in result.timeline})
    fig, ax = plt.subplots(figsize=(9, 4.5))
    if times:
        index = {t: i for i, t in enumerate(times)}
        names = sorted({name for _, name, _ in result.timeline})
        if len(names) > MAX_STACKED_JOBS:
            names = ["all jobs"]
        row = {n: i for i, n in enumerate(names)}
        levels = np.zeros((len(names), len(times)))
        held: dict[str, int] = {}
        changes: dict[int, list[tuple[str, int]]] = {}
        for t, name, gpus in result.timeline:
            changes.setdefault(index[t], []).append((name, gpus))
        for i in range(len(times)):
            for name, gpus in changes.get(i, []):
                held[name] = gpus
            if len(names) == 1 and names[0] == "all jobs":
                levels[0, i] = sum(held.values())
            else:
                for name, gpus in held.items():
                    levels[row[name], i] = gpus
        ax.stackplot(times, levels, step="post", linewidth=0)
    return _save(fig, ax, path, "time (s)", "GPUs",
                 f"GPUs per job over time ({result.algorithm})", legend=False)


def queue_length(results: Sequence[SimResult], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    look = styles([r.algorithm for r in results])
    for r in results:
        if r.queue:
            t = [q[0] for q in r.queue]
            waiting = [q[1] for q in r.queue]
            line = {**_line(look[r.algorithm]), "marker": None}
            ax.step(t, waiting, where="post", label=r.algorithm, **line)
    return _save(fig, ax, path, "time (s)", "jobs waiting", "Queue length over time")


def write_plots(results: Sequence[SimResult], directory: str | Path) -> list[Path]:
    """jct_cdf.png, wait_cdf.png, slowdown_cdf.png, fairness.png, queue_length.png and
    gpus_<algorithm>.png for each algorithm (the over-time plots: its first seed)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    first = [seeded[0] for seeded in by_algorithm(results).values()]
    paths = [jct_cdf(results, out / "jct_cdf.png"),
             cdf(results, out / "wait_cdf.png", lambda j: j.wait,
                 "wait: submission to first GPU (s)", "Wait CDF"),
             cdf(results, out / "slowdown_cdf.png", lambda j: j.slowdown,
                 "slowdown: JCT / run time alone at max GPUs", "Slowdown CDF"),
             fairness(results, out / "fairness.png"),
             queue_length(first, out / "queue_length.png")]
    for r in first:
        paths.append(gpus_per_job(r, out / f"gpus_{_safe(r.algorithm)}.png"))
    return paths
