"""Published results of the Pollux OSDI'21 artifact on workloads 1-4 (voda/data/pollux).

`published/<policy>-<load>.json` holds, for Tiresias, Optimus and Pollux at loads
0.5, 1.0, 1.5 and 2.0, the average JCT of each workload and the JCT of every job
as the artifact stored them (REFERENCE.md).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from voda.sim.workloads import LOADS

POLICIES = ("tiresias", "optimus", "pollux")
WORKLOADS = ("workload-1", "workload-2", "workload-3", "workload-4")
# The job model and algorithm each published policy is reproduced with (`voda simulate
# --preset pollux --job-model MODEL --algorithm ALGORITHM`).
REPRODUCTIONS = {"tiresias": ("rigid", "Tiresias"), "optimus": ("fixed-batch", "Optimus"),
                 "pollux": ("adaptive", "Pollux")}


@dataclass(frozen=True)
class Published:
    policy: str
    load: str
    avg_jct: dict[str, float]  # workload -> average JCT (s)
    jct: dict[str, dict[str, int]]  # workload -> job -> JCT (s)


def _directory() -> Path:
    return Path(str(resources.files("voda") / "data" / "pollux" / "published"))


@functools.cache
def published(policy: str, load: str) -> Published:
    """The artifact's results for `policy` at `load`; ValueError naming a bad argument."""
    if policy not in POLICIES:
        raise ValueError(f"policy: must be one of {', '.join(POLICIES)}, got {policy!r}")
    if load not in LOADS:
        raise ValueError(f"load: must be one of {', '.join(LOADS)}, got {load!r}")
    data = json.loads((_directory() / f"{policy}-{load}.json").read_text())
    return Published(policy, load, {k: float(v) for k, v in data["avg_jct"].items()},
                     {w: {j: int(t) for j, t in jobs.items()} for w, jobs in data["jct"].items()})
