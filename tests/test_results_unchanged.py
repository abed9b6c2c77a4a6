"""Per-job results are those of commit 9ddda88, before the simulator was made faster.

Each case's digest (tests/results_digest.py: every job's JCT, start, GPU-seconds and
counts) is compared with the one recorded there. These are a quick share of the recorded
cases; bench/results_digest.py checks them all. Batch-adaptive runs agree only on machines
with the same floating-point kernels (docs/design/002-simulator.md), so the share holds
runs whose jobs fit no goodput model: the Philly trace's, and workload-1's under
algorithms that do not adapt the batch.
"""

from __future__ import annotations

import pytest
from results_digest import Case, digest, recorded, run_case

QUICK = [
    Case("philly:2000", "160x4", "ElasticFIFO", placement="naive"),
    Case("philly:2000", "160x4", "Tiresias", placement="naive"),
    Case("philly:2000", "160x4", "ElasticTiresias", placement="naive"),
    Case("workload-1@1.0", "16x4", "Tiresias", preset="pollux"),
    Case("workload-1@1.0", "16x4", "ElasticSRJF", preset="pollux"),
    Case("workload-1@1.0", "16x4", "Optimus", preset="pollux"),
]


@pytest.mark.parametrize("case", QUICK, ids=lambda c: c.key)
def test_per_job_results_are_the_recorded_ones(case: Case) -> None:
    expected = recorded()[case.key]
    assert digest(run_case(case)) == expected
