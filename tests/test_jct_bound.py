"""The lower bound on the average JCT (voda.sim.jct_bound): exact where the optimum is
known, below what simulated policies reach, and refusing what it cannot bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from voda.core.model import DEFAULT_GPU_TYPE, Node
from voda.sim.cluster_file import SimCluster, parse_cluster
from voda.sim.compare import RunRequest, run_one, settings_for, workload_for
from voda.sim.jct_bound import BoundError, Config, alone_rates, mean_jct_bound, upper_hull
from voda.sim.workloads import JobSpec, Workload

SIA = Path(__file__).resolve().parent.parent / "voda" / "data" / "sia"


def fixed(name: str, submit: float, work: float, top: int) -> JobSpec:
    """Fixed work in GPU-seconds at linear speedup, on up to `top` GPUs."""
    return JobSpec(name=name, submit=submit, order=0, min_workers=1, max_workers=top,
                   preferred_workers=None, epochs=1, work=work)


def one_type(gpus: int) -> SimCluster:
    return SimCluster(nodes=(Node("n0", gpus),))


def test_the_hull_keeps_only_counts_no_time_sharing_beats() -> None:
    assert upper_hull([(1, 1.0), (2, 1.2), (3, 2.5)]) == [(1, 1.0), (3, 2.5)]
    assert upper_hull([(1, 1.0), (2, 2.5)]) == [(2, 2.5)]  # half a slot on 2 beats 1 GPU
    assert upper_hull([(1, 1.0), (2, 1.8), (4, 3.0)]) == [(1, 1.0), (2, 1.8), (4, 3.0)]


def test_a_fixed_job_alone_runs_at_its_gpus_and_its_bound_is_its_fastest_time() -> None:
    job = fixed("a", 100.0, 3600.0, 4)
    rates = alone_rates(job, one_type(4).nodes, 4, calibration={})
    assert rates.mean == pytest.approx(4 / 3600) and rates.peak == pytest.approx(4 / 3600)
    bound = mean_jct_bound(Workload("w", (job,)), one_type(4), slot_seconds=30.0,
                           horizon=2000.0)
    assert bound.mean_jct == pytest.approx(900.0, rel=1e-6)
    assert bound.gpu_seconds == pytest.approx(3600.0, rel=1e-6)


def test_two_jobs_on_too_few_gpus_are_bounded_as_run_one_after_the_other() -> None:
    """Two jobs of W GPU-seconds at once on 4 GPUs: the best mean JCT is 3W/8 (either
    order, or shared); without the GPUs' limit it would be W/4."""
    work, dt = 4000.0, 25.0
    jobs = (fixed("a", 0.0, work, 4), fixed("b", 0.0, work, 4))
    bound = mean_jct_bound(Workload("w", jobs), one_type(4), slot_seconds=dt, horizon=4000.0)
    assert 3 * work / 8 - dt <= bound.mean_jct <= 3 * work / 8 + 1e-6
    wide = mean_jct_bound(Workload("w", jobs), one_type(8), slot_seconds=dt, horizon=4000.0)
    assert wide.mean_jct == pytest.approx(work / 4, rel=1e-6)


def test_a_gpu_seconds_cap_keeps_a_job_off_its_wasteful_counts() -> None:
    """1 GPU does the job in an hour, 4 GPUs in half an hour (half the efficiency). Free,
    the bound is 1800 s, on 4 GPUs for a part at least; capped at 3600 GPU-s the job runs
    on 1 GPU, its progress spread over the hour: C >= mean time 1800 s + fastest 1800 / 2."""
    job = fixed("a", 0.0, 3600.0, 4)
    configs = {"a": [Config(DEFAULT_GPU_TYPE, 1, 1 / 3600), Config(DEFAULT_GPU_TYPE, 4, 2 / 3600)]}
    args = {"slot_seconds": 30.0, "horizon": 8000.0, "configs": configs}
    free = mean_jct_bound(Workload("w", (job,)), one_type(4), **args)  # type: ignore[arg-type]
    assert free.mean_jct == pytest.approx(1800.0) and free.gpu_seconds > 3600.0
    capped = mean_jct_bound(Workload("w", (job,)), one_type(4), gpu_seconds=3600.0,
                            **args)  # type: ignore[arg-type]
    assert 2700.0 - 30.0 <= capped.mean_jct <= 2700.0 + 1e-6
    assert capped.gpu_seconds <= 3600.0 + 1e-6
    with pytest.raises(BoundError, match="no schedule"):
        mean_jct_bound(Workload("w", (job,)), one_type(4), gpu_seconds=1000.0,
                       **args)  # type: ignore[arg-type]


@pytest.mark.parametrize("change,match", [
    ({"slot_seconds": 0.0}, "slot_seconds: must be positive"),
    ({"slot_seconds": 0.01}, "slot_seconds: .* slots"),
    ({"rates": "best"}, "rates: must be one of peak, mean"),
    ({"horizon": 50.0}, "horizon: ends before"),
])
def test_what_it_cannot_bound_is_refused_naming_the_argument(change: dict[str, object],
                                                             match: str) -> None:
    args: dict[str, object] = {"slot_seconds": 30.0, "horizon": 4000.0, **change}
    with pytest.raises(BoundError, match=match):
        mean_jct_bound(Workload("w", (fixed("a", 100.0, 3600.0, 4),)), one_type(4),
                       **args)  # type: ignore[arg-type]


def test_no_simulated_policy_beats_the_bound_on_a_heterogeneous_workload(
        tmp_path: Path) -> None:
    head, *rows = (SIA / "workloads" / "saturn" / "workload-2.csv").read_text().splitlines()
    path = tmp_path / "w.csv"
    path.write_text("\n".join([head, *rows[:14]]) + "\n")
    cluster_path = str(SIA / "clusters" / "heterogeneous-64.yaml")
    results, request = [], None
    for algorithm, policy in (("Voda", "voda"), ("Pollux", "sia")):
        request = RunRequest(str(path), cluster_path, algorithm, preset="sia",
                             job_model="adaptive", hetero_policy=policy)
        results.append(run_one(request))
    assert request is not None
    horizon = 1.2 * max(max(j.finish for j in r.jobs) for r in results)
    bound = mean_jct_bound(workload_for(request), parse_cluster(cluster_path),
                           slot_seconds=60.0, horizon=horizon,
                           calibration=settings_for(request).calibration)
    for result in results:
        assert bound.mean_fastest <= bound.mean_jct < result.avg_jct
