"""Per-job simulation results as one digest per case, to prove a change of the simulator's
speed changed no result.

A case is one simulation: a workload (a Pollux workload at a load, or the first N rows of
the Philly trace), a cluster, an algorithm and the settings. Its digest is the SHA-256 of
every job's name, JCT, first start and GPU-seconds held (each rounded to 1e-6 s) and its
rescale, migration and preemption counts, in the result's order. `results_digests.json`
holds the digests recorded at commit 9ddda88 (before the engine kept its snapshots and
placement was vectorised); bench/results_digest.py writes and checks them all, and
tests/test_results_unchanged.py checks a quick share of them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from voda.core.allocation.registry import BUILTIN_NAMES
from voda.sim.cluster_file import parse_cluster
from voda.sim.compare import RunRequest, settings_for
from voda.sim.report import SimResult
from voda.sim.runner import simulate
from voda.sim.workloads import LOADS, Workload, builtin_workload, load_workload

DIGESTS = Path(__file__).with_name("results_digests.json")
POLLUX_WORKLOADS = ("workload-1", "workload-2", "workload-3", "workload-4")
PHILLY_CLUSTER = "160x4"
PHILLY_ROWS = (2_000, 10_000)
NAIVE_LONG = ("ElasticFIFO", "Tiresias")


@dataclass(frozen=True)
class Case:
    """One simulation. `workload` is a built-in name (`workload-N@L`) or `philly:N`, the
    first N jobs of the Philly trace."""

    workload: str
    cluster: str
    algorithm: str
    preset: str | None = None
    placement: str | None = None

    @property
    def key(self) -> str:
        return "|".join((self.workload, self.cluster, self.algorithm, self.preset or "-",
                         self.placement or "-"))


def all_cases() -> Iterator[Case]:
    """Every recorded case: workloads 1-4 at every load under the Pollux artifact's
    settings, workloads 1-4 at load 1.0 event-driven under the defaults, and the Philly
    prefixes under the defaults, each with every built-in algorithm; and the Philly
    prefixes on the first-fit placer (the 10,000 jobs under ElasticFIFO and Tiresias)."""
    for name in POLLUX_WORKLOADS:
        for load in LOADS:
            for algorithm in BUILTIN_NAMES:
                yield Case(f"{name}@{load}", "16x4", algorithm, preset="pollux")
    for name in POLLUX_WORKLOADS:
        for algorithm in BUILTIN_NAMES:
            yield Case(f"{name}@1.0", "16x4", algorithm)
    for rows in PHILLY_ROWS:
        for algorithm in BUILTIN_NAMES:
            yield Case(f"philly:{rows}", PHILLY_CLUSTER, algorithm)
    # The first-fit placer of the Philly bench (bench/philly.py).
    for algorithm in BUILTIN_NAMES:
        yield Case(f"philly:{PHILLY_ROWS[0]}", PHILLY_CLUSTER, algorithm, placement="naive")
    for algorithm in NAIVE_LONG:
        yield Case(f"philly:{PHILLY_ROWS[1]}", PHILLY_CLUSTER, algorithm, placement="naive")


def philly_file() -> Path:
    found = builtin_workload("philly")
    if found is None:
        raise FileNotFoundError("philly.csv: the built-in Philly trace is missing")
    return found


_philly: dict[int, Workload] = {}


def philly_prefix(rows: int) -> Workload:
    """The first `rows` jobs of the Philly trace (read once per process)."""
    if rows not in _philly:
        whole = load_workload(philly_file())
        _philly[rows] = Workload(f"philly:{rows}", whole.jobs[:rows])
    return _philly[rows]


def run_case(case: Case) -> SimResult:
    request = RunRequest(case.workload, case.cluster, case.algorithm, preset=case.preset,
                         placement=case.placement)
    if case.workload.startswith("philly:"):
        workload = philly_prefix(int(case.workload.partition(":")[2]))
    else:
        workload = load_workload(case.workload)
    return simulate(workload, parse_cluster(case.cluster), settings_for(request))


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{round(value, 6):.6f}"


def digest(result: SimResult) -> str:
    lines = [
        f"{j.name},{_seconds(j.jct)},{_seconds(j.start)},{_seconds(j.gpu_seconds)},"
        f"{j.rescales},{j.migrations},{j.preemptions}"
        for j in result.jobs
    ]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def recorded() -> dict[str, str]:
    data = json.loads(DIGESTS.read_text())
    return dict(data["digests"])
