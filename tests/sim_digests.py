"""Digests of the simulator's per-job results on the Pollux workloads, for the built-in
algorithms that decide by the count dynamic program (voda.core.allocation.counts:
Pollux and Voda), at the loads the fidelity tests run Pollux at (tests/test_sim_baselines.py:
0.5 and 1.0): what a change to that program must leave unchanged.

    .venv/bin/python tests/sim_digests.py OUT.json [WORKLOAD ...]

writes the digests of the code it imports (run it with PYTHONPATH at an older checkout to
record that checkout's); tests/test_decisions_unchanged.py compares against the record.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator

from voda.sim.cluster_file import parse_cluster
from voda.sim.presets import apply_preset
from voda.sim.runner import simulate
from voda.sim.workloads import load_workload

WORKLOADS = ("workload-1", "workload-2", "workload-3", "workload-4")
CLUSTER = "16x4"


ALGORITHMS = ("Pollux", "Voda")  # those that call counts.best_counts
OWN_MODELS = (("adaptive", "Pollux"), ("adaptive", "Voda"))  # as the published reproduction
FIDELITY_LOADS = ("0.5", "1.0")  # Pollux's published results the fidelity tests compare


def cases(workloads: tuple[str, ...] = WORKLOADS) -> Iterator[tuple[str, str, str, str]]:
    """(workload, load, algorithm, job model): each of ALGORITHMS on elastic jobs, and
    Pollux and Voda on adaptive ones (the job model of Pollux's published results)."""
    for workload in workloads:
        for load in FIDELITY_LOADS:
            for name in ALGORITHMS:
                yield workload, load, name, "elastic"
            for model, name in OWN_MODELS:
                yield workload, load, name, model


def key(workload: str, load: str, algorithm: str, job_model: str) -> str:
    return f"{workload}@{load} {algorithm} {job_model}"


def digest(workload: str, load: str, algorithm: str, job_model: str) -> dict[str, object]:
    """The sha256 of every job's results (times, GPU-seconds, rescales, migrations,
    preemptions) and the average JCT, of one simulation."""
    result = simulate(load_workload(f"{workload}@{load}", job_model=job_model),
                      parse_cluster(CLUSTER), apply_preset("pollux", algorithm))
    rows = [[j.name, j.submit, j.finish, j.jct, j.start, j.gpu_seconds, j.rescales,
             j.migrations, j.preemptions] for j in result.jobs]
    text = json.dumps(rows, sort_keys=True).encode()
    return {"sha256": hashlib.sha256(text).hexdigest(), "avg_jct": result.avg_jct,
            "unfinished": result.unfinished}


def main(argv: list[str]) -> int:
    out, workloads = argv[0], tuple(argv[1:]) or WORKLOADS
    record: dict[str, object] = {}
    for case in cases(workloads):
        record[key(*case)] = digest(*case)
        print(key(*case), record[key(*case)], flush=True)
    with open(out, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
