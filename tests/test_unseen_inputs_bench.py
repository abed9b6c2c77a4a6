"""bench/unseen_inputs.py's input sets and its count against the published p99 (the
simulations themselves are the bench's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_modules import load_bench

from voda.sim.compare import RunRequest, run_one
from voda.sim.published import published
from voda.sim.tail import p99

bench = load_bench("unseen_inputs")


def test_a_jitter_set_carries_the_published_p99_of_each_unmoved_run(tmp_path: Path) -> None:
    runs = bench.runs_of("jitter:7", 5.0, tmp_path)
    assert len(runs) == 16
    for run in runs:
        workload, _, load = run.request.workload.partition("@")
        assert run.load == load and run.request.jitter == 5.0 and run.request.seed == 7
        assert run.published_p99 == pytest.approx(
            p99(list(published("pollux", load).jct[workload].values())))
    # The published figures differ from run to run: each run got its own.
    assert len({run.published_p99 for run in runs}) == 16


@pytest.mark.parametrize("spec", ["cluster:8x8", "resampled:11"])
def test_sets_without_published_figures_count_nothing_against_them(
        spec: str, tmp_path: Path) -> None:
    runs = bench.runs_of(spec, 300.0, tmp_path)
    assert all(run.published_p99 is None for run in runs)
    assert bench.above_published(["unused"] * len(runs), runs) is None


def test_runs_are_counted_above_the_published_p99_only_when_their_p99_exceeds_it(
        tmp_path: Path) -> None:
    run = bench.runs_of("jitter:1", 5.0, tmp_path)[0]  # workload-1 at 0.5
    result = run_one(RunRequest("workload-1@0.5", "16x4", "FIFO", preset="pollux",
                                job_model="adaptive", jitter=5.0, seed=1))
    assert result.p99_jct > 0
    above = bench.Run(run.load, run.request, result.p99_jct - 1.0)
    equal = bench.Run(run.load, run.request, result.p99_jct)
    assert bench.above_published([result, result], [above, equal]) == 1
