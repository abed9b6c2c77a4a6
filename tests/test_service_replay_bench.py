"""bench/service_replay.py's run list and its summary over runs (the replays themselves:
tests/test_service_replay.py)."""

from __future__ import annotations

import argparse

import pytest
from bench_modules import load_bench

bench = load_bench("service_replay")


def test_every_workload_runs_at_every_load() -> None:
    assert bench._runs("workload-1, workload-3", "0.5,2.0") == [
        "workload-1@0.5", "workload-1@2.0", "workload-3@0.5", "workload-3@2.0"]
    assert bench._runs("workload-2", None) == ["workload-2"]


def test_all_jobs_is_the_workloads_length() -> None:
    parser = argparse.ArgumentParser()
    assert bench._job_count(parser, "workload-1@0.5", "all") == 80
    assert bench._job_count(parser, "workload-2@1.5", "ALL") == 240
    assert bench._job_count(parser, "workload-1", "12") == 12


@pytest.mark.parametrize(("workload", "jobs", "message"), [
    ("workload-9@0.5", "all", "--workload"),
    ("workload-1", "ten", "--jobs"),
])
def test_a_bad_run_is_refused_naming_the_option(
        workload: str, jobs: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench._job_count(argparse.ArgumentParser(), workload, jobs)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_too_many_runs_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--workload", ",".join(["workload-1"] * 5), "--load", "0.5,1.0,1.5,2.0"])
    assert "1 to 16 runs, got 20" in capsys.readouterr().err


def test_the_summary_gives_median_and_range_over_runs() -> None:
    rows = [{"algorithm": "Voda", "avg_ratio": r, "p99_ratio": p, "finished": 80, "jobs": 80,
             "longest_step_period": s}
            for r, p, s in [(1.05, 1.00, 0.2), (0.95, 1.02, 0.15), (1.01, 0.99, 0.3)]]
    line = bench._summary(rows)
    assert "3 runs" in line
    assert "median 1.010 (0.950-1.050)" in line
    assert "p99 median 1.000 (0.990-1.020)" in line
    assert "jobs finished 240/240" in line
    assert "steps at most 0.3 s apart" in line


def test_the_line_names_the_job_furthest_from_its_twin() -> None:
    assert bench._worst_job({"worst_job": "ncf-2", "worst_job_jct": [173.4, 88.0]}) == (
        " (ncf-2: 173 s against 88 s)")
    assert bench._worst_job({"worst_job": None, "worst_job_jct": []}) == ""
