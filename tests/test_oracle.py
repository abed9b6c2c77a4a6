"""The simulator's truth about fixed-batch jobs, read only by the Optimus+Oracle baseline."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from voda.core.oracle import StepOracle
from voda.sim.oracle import step_oracle
from voda.sim.profiles import load_profile
from voda.sim.throughput import step_sync_time
from voda.sim.workloads import load_workload

ROWS = "name,time,application,num_replicas,batch_size\ncifar10-0,0,cifar10,6,2048\n"


def test_remaining_steps_count_from_the_end_of_the_epochs_done() -> None:
    oracle = StepOracle((2.0, 1.2), (10.0, 25.0, 45.0))
    assert oracle.remaining_steps(0) == 35.0
    assert oracle.remaining_steps(1) == 20.0
    assert oracle.remaining_steps(2) == oracle.remaining_steps(7) == 1.0  # done: one step
    assert oracle.step_time(1) == 2.0 and oracle.step_time(5) == 1.2
    assert math.isinf(oracle.step_time(0))


def test_a_fixed_batch_job_carries_its_true_step_times_and_step_counts(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text(ROWS)
    (spec,) = load_workload(path, job_model="fixed-batch").jobs
    oracle = step_oracle(spec)
    assert oracle is not None
    assert len(oracle.step_seconds) == 64 and len(oracle.iterations) == 100
    profile = load_profile("cifar10")
    # 2048 on one GPU: local 2048 > max local 1024, so 2 micro-batches of 1024.
    step, sync = step_sync_time("cifar10", (1,), 1024)
    assert oracle.step_seconds[0] == pytest.approx(step + (step - sync))
    # 2048 on 8 GPUs packed as (4, 4): micro-batch 256, no accumulation.
    assert oracle.step_seconds[7] == pytest.approx(step_sync_time("cifar10", (4, 4), 256)[0])
    validation = next(v for v in profile.validation if v.batch_size == 2048)
    assert oracle.iterations == pytest.approx(validation.iteration[:100])


def test_elastic_and_adaptive_jobs_carry_no_oracle(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text(ROWS)
    for model in ("elastic", "adaptive"):
        (spec,) = load_workload(path, job_model=model).jobs
        assert step_oracle(spec) is None
