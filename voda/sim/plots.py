"""PNG plots of simulation results (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from voda.sim.report import SimResult

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


def jct_cdf(results: Sequence[SimResult], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        jcts = np.sort([j.jct for j in r.jobs if j.jct is not None])
        if len(jcts):
            ax.step(jcts, np.arange(1, len(jcts) + 1) / len(jcts), where="post", label=r.algorithm)
    ax.set_xscale("log")
    return _save(fig, ax, path, "job completion time (s)", "fraction of jobs", "JCT CDF")


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
    for r in results:
        if r.queue:
            t = [q[0] for q in r.queue]
            waiting = [q[1] for q in r.queue]
            ax.step(t, waiting, where="post", label=r.algorithm)
    return _save(fig, ax, path, "time (s)", "jobs waiting", "Queue length over time")


def write_plots(results: Sequence[SimResult], directory: str | Path) -> list[Path]:
    """jct_cdf.png, queue_length.png and gpus_<algorithm>.png for each result."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = [jct_cdf(results, out / "jct_cdf.png"), queue_length(results, out / "queue_length.png")]
    for r in results:
        paths.append(gpus_per_job(r, out / f"gpus_{_safe(r.algorithm)}.png"))
    return paths
