"""What the Sia paper (SOSP'23, Table 3: the heterogeneous 64-GPU cluster) reports, and the
Sia artifact's own simulator run here on the Sia workloads (voda/data/sia/README.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path


@dataclass(frozen=True)
class PaperRow:
    """Mean over the paper's workloads of one trace (hours; GPU-hours per job)."""

    avg_jct: float
    p99_jct: float
    makespan: float
    gpu_hours: float


# Table 3: trace -> policy -> figures (the paper's Helios rows are the saturn workloads).
PAPER: dict[str, dict[str, PaperRow]] = {
    "philly": {"Sia": PaperRow(0.6, 9.5, 14.2, 4.0), "Pollux": PaperRow(1.0, 14.9, 24.5, 5.6)},
    "saturn": {"Sia": PaperRow(0.7, 10.9, 14.9, 4.8), "Pollux": PaperRow(1.0, 15.0, 25.5, 5.9)},
    "newtrace": {"Sia": PaperRow(0.7, 4.6, 52.2, 3.0), "Pollux": PaperRow(1.5, 10.3, 62.3, 3.4)},
}


def published_dir() -> Path:
    return Path(str(resources.files("voda") / "data" / "sia" / "published"))


def artifact_jcts(workload_set: str, number: int, jobs: int | None = None) -> list[float] | None:
    """The per-job JCTs (seconds) of the artifact's Sia on one workload where it was run here,
    else None. `jobs`: the simulation ran only the workload's first `jobs` jobs, so only a run
    of that many (the whole workload's, if it has no more; else a run of its first `jobs`,
    `...-first-N.json`) compares with it."""
    whole = _stored_jcts(f"sia-{workload_set}-workload-{number}.json")
    if whole is not None and (jobs is None or jobs >= len(whole)):
        return whole
    if jobs is None:
        return None
    return _stored_jcts(f"sia-{workload_set}-workload-{number}-first-{jobs}.json")


def _stored_jcts(name: str) -> list[float] | None:
    path = published_dir() / name
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    jcts = next(iter(data["jcts"].values()))
    return [float(v) for v in (jcts.values() if isinstance(jcts, dict) else jcts)]
