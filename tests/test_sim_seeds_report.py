"""`voda simulate --seeds N --csv PATH`: means and intervals across arrival jitterings, the
per-job rows, slowdown and finish-time fairness, and the algorithms' colours."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from voda.cli.main import app
from voda.core.allocation.registry import BUILTIN_NAMES
from voda.sim.isolated import fair_alone_seconds, isolated_seconds, mean_present
from voda.sim.palette import BUILTIN_STYLES, PALETTE, styles
from voda.sim.per_job import COLUMNS
from voda.sim.seeds import DEFAULT_JITTER, t_interval
from voda.sim.workloads import JobSpec

runner = CliRunner()

# Ten jobs on 2x4 GPUs: profiled and fixed-work jobs, elastic and rigid, that queue.
JOBS = """
- {name: a, arrival: 0, model: cifar10, epochs: 3, min: 1, max: 4}
- {name: b, arrival: 10, duration: 300, min: 1, max: 2}
- {name: c, arrival: 20, model: ncf, epochs: 1, min: 1, max: 1}
- {name: d, arrival: 30, duration: 900, min: 2, max: 4}
- {name: e, arrival: 60, duration: 600, min: 1, max: 8}
- {name: f, arrival: 90, model: cifar10, epochs: 2, min: 1, max: 8}
- {name: g, arrival: 120, duration: 1200, min: 4, max: 4}
- {name: h, arrival: 150, duration: 200, min: 1, max: 1}
- {name: i, arrival: 400, duration: 500, min: 1, max: 4}
- {name: j, arrival: 420, duration: 100, min: 2, max: 2}
"""
ALGORITHMS = ("FIFO", "ElasticFIFO", "Voda")


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(JOBS)
    return path


# ----- the interval ------------------------------------------------------------------------
def test_the_interval_is_students_t_with_n_minus_1_degrees_of_freedom() -> None:
    # 10, 12, 14: mean 12, s = sqrt((4 + 0 + 4) / 2) = 2, s / sqrt(3) = 1.1547005;
    # t(0.975, 2) = 4.3026527 (tables): half-width 4.9682754.
    interval = t_interval([10.0, 12.0, 14.0])
    assert interval.mean == 12.0 and interval.n == 3
    assert interval.half_width == pytest.approx(4.3026527 * 2 / math.sqrt(3), rel=1e-7)
    assert interval.low == pytest.approx(12 - 4.9682754, abs=1e-6)
    assert interval.high == pytest.approx(12 + 4.9682754, abs=1e-6)
    # 1, 3: mean 2, s = sqrt(2), s / sqrt(2) = 1; t(0.975, 1) = 12.706205.
    two = t_interval([1.0, 3.0])
    assert two.mean == 2.0 and two.half_width == pytest.approx(12.706205, rel=1e-7)


def test_one_run_has_no_interval_and_undefined_runs_are_left_out() -> None:
    one = t_interval([5.0])
    assert (one.mean, one.low, one.high, one.half_width, one.n) == (5.0, None, None, None, 1)
    assert t_interval([5.0, float("nan"), None]).n == 1
    empty = t_interval([])
    assert math.isnan(empty.mean) and empty.n == 0


@pytest.mark.parametrize("count", ["0", "1000", "-3"])
def test_a_number_of_seeds_out_of_range_is_refused_naming_seeds(jobs: Path, count: str) -> None:
    result = runner.invoke(app, ["simulate", "--workload", str(jobs), "--cluster", "2x4",
                                 "--algorithm", "FIFO", "--seeds", count])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert f"seeds: must be between 1 and 100, got {count}" in text
    assert "Traceback" not in text


# ----- seeds, JSON and CSV ---------------------------------------------------------------------
def test_seeds_give_per_seed_results_a_summary_and_the_csv_rows(jobs: Path,
                                                                 tmp_path: Path) -> None:
    table = tmp_path / "out" / "jobs.csv"
    result = runner.invoke(app, ["simulate", "--workload", str(jobs), "--cluster", "2x4",
                                 "--algorithm", "FIFO", "--seeds", "3", "--seed", "7",
                                 "--csv", str(table), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    # No --jitter: the default one, said in the output.
    assert out["seeds"] == {"count": 3, "first": 7, "jitter": DEFAULT_JITTER,
                            "default_jitter": True}
    assert "300 s" in out["note"] and "300 s" in result.stderr
    runs = out["results"]
    assert [(r["algorithm"], r["seed"], r["jitter"]) for r in runs] == [
        ("FIFO", 7, DEFAULT_JITTER), ("FIFO", 8, DEFAULT_JITTER), ("FIFO", 9, DEFAULT_JITTER)]
    assert len({tuple(j["submit"] for j in r["jobs"]) for r in runs}) == 3  # moved arrivals
    (summary,) = out["summary"]
    assert summary["algorithm"] == "FIFO" and summary["seeds"] == [7, 8, 9]
    avg = summary["metrics"]["avg_jct"]
    values = [r["avg_jct"] for r in runs]
    expected = t_interval(values)
    assert avg["mean"] == pytest.approx(sum(values) / 3)
    assert avg["half_width"] == pytest.approx(expected.half_width)
    assert avg["n"] == 3
    for key in ("mean_slowdown", "rho_mean", "rho_max"):
        assert summary["metrics"][key]["mean"] > 0

    with table.open(newline="") as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == COLUMNS
    assert len(rows) - 1 == 10 * 3


def test_the_csv_has_one_row_per_job_algorithm_and_seed_with_the_jsons_jcts(
    jobs: Path, tmp_path: Path
) -> None:
    table = tmp_path / "jobs.csv"
    result = runner.invoke(app, ["simulate", "--workload", str(jobs), "--cluster", "2x4",
                                 "--algorithm", ",".join(ALGORITHMS), "--seeds", "2",
                                 "--jitter", "120",
                                 "--csv", str(table), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert "note" not in out and out["seeds"]["jitter"] == 120
    with table.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10 * len(ALGORITHMS) * 2
    assert {(r["job"], r["algorithm"], r["seed"]) for r in rows} == {
        (j, a, str(s)) for j in "abcdefghij" for a in ALGORITHMS for s in (0, 1)}
    jct = {(j["name"], r["algorithm"], r["seed"]): j["jct"]
           for r in out["results"] for j in r["jobs"]}
    for row in rows:
        assert float(row["jct"]) == jct[(row["job"], row["algorithm"], int(row["seed"]))]
        assert float(row["jct"]) == pytest.approx(float(row["finish"]) - float(row["submit"]))
        assert float(row["wait"]) == pytest.approx(float(row["start"]) - float(row["submit"]))
        assert float(row["slowdown"]) == pytest.approx(float(row["jct"]) / float(row["alone"]))
        assert float(row["rho"]) == pytest.approx(float(row["jct"]) / float(row["fair_alone"]))
    # Each run's GPU-hours are its jobs' GPU-hours.
    for r in out["results"]:
        assert sum(j["gpu_hours"] for j in r["jobs"]) == pytest.approx(r["gpu_hours"])
    # The table shows a mean and an interval for every algorithm.
    plain = runner.invoke(app, ["simulate", "--workload", str(jobs), "--cluster", "2x4",
                                "--algorithm", "FIFO", "--seeds", "2"])
    assert plain.exit_code == 0, plain.output
    assert "mean ±95% interval over 2 seeds" in " ".join(plain.stdout.split())
    assert "±" in plain.stdout and "note: --seeds without --jitter" in plain.stdout


def test_without_seeds_the_output_is_one_run_with_slowdown_and_fairness(jobs: Path) -> None:
    result = runner.invoke(app, ["simulate", "--workload", str(jobs), "--cluster", "2x4",
                                 "--algorithm", "Voda", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    (run,) = out["results"]
    assert run["seed"] == 0 and run["jitter"] == 0.0 and out["seeds"]["count"] == 1
    assert out["summary"][0]["metrics"]["avg_jct"]["half_width"] is None
    for j in run["jobs"]:
        assert j["slowdown"] > 0 and j["rho"] > 0 and j["fair_share"] > 0
    text = runner.invoke(app, ["simulate", "--workload", str(jobs), "--cluster", "2x4",
                               "--algorithm", "Voda"]).stdout
    assert "mean slowdown" in text and "max rho" in text and "±" not in text


# ----- a job alone, and its fair share -----------------------------------------------------
def test_a_job_alone_takes_its_run_time_alone_and_its_fair_share_is_the_cluster(
    tmp_path: Path
) -> None:
    path = tmp_path / "one.yaml"
    path.write_text("- {name: solo, arrival: 5, model: cifar10, epochs: 2, min: 1, max: 4}\n"
                    "- {name: work, arrival: 10000, duration: 400, min: 1, max: 4}\n")
    result = runner.invoke(app, ["simulate", "--workload", str(path), "--cluster", "2x4",
                                 "--algorithm", "ElasticFIFO", "--json"])
    assert result.exit_code == 0, result.output
    for j in json.loads(result.stdout)["results"][0]["jobs"]:
        assert j["slowdown"] == pytest.approx(1.0)
        assert j["fair_share"] == pytest.approx(8.0) and j["rho"] == pytest.approx(1.0)
    # Fixed work at linear speedup: the restart penalty, then work / GPUs.
    spec = JobSpec("w", 0.0, 0, 1, 4, None, 10, work=1200.0)
    from voda.sim.cluster_file import parse_cluster

    assert isolated_seconds(spec, parse_cluster("2x4").nodes, 3, 30.0) == 30.0 + 400.0


def test_the_mean_number_of_jobs_present_over_each_jobs_life() -> None:
    # a: [0, 10), b: [5, 15), c: [20, inf).  a sees 1 then 2 (5 s each): 1.5; b likewise.
    assert mean_present([(0.0, 10.0), (5.0, 15.0), (20.0, math.inf)])[:2] == [1.5, 1.5]
    assert mean_present([(0.0, 4.0), (0.0, 4.0), (1.0, 3.0)]) == [2.5, 2.5, 3.0]


def test_the_run_time_on_a_fractional_share_interpolates_speeds() -> None:
    spec = JobSpec("x", 0.0, 0, 2, 6, None, 1, work=100.0)

    def alone(g: int) -> float:  # linear speedup: the interpolation is exact
        return 100.0 / g

    assert fair_alone_seconds(alone, spec, 8.0, 16) == alone(6)  # at or above max
    assert fair_alone_seconds(alone, spec, 2.5, 16) == pytest.approx(100.0 / 2.5)
    assert fair_alone_seconds(alone, spec, 3.0, 16) == alone(3)
    assert fair_alone_seconds(alone, spec, 0.5, 16) == pytest.approx(100.0 / 0.5)  # sliced


# ----- colours -------------------------------------------------------------------------------
def test_the_eleven_built_in_algorithms_have_eleven_distinct_colours() -> None:
    look = styles(list(BUILTIN_NAMES))
    assert len(BUILTIN_NAMES) == 11
    assert len({look[name].color.lower() for name in BUILTIN_NAMES}) == 11
    assert len({(look[n].dash, look[n].marker) for n in BUILTIN_NAMES}) == 11
    assert look["FIFO"].color != look["Voda"].color
    assert set(BUILTIN_STYLES) == set(BUILTIN_NAMES)
    assert PALETTE[:11] == tuple(BUILTIN_STYLES[n].color for n in BUILTIN_NAMES)
    # The same colour whatever else is shown, and a custom algorithm gets one of its own.
    assert styles(["Voda"])["Voda"] == look["Voda"]
    custom = styles(["Voda", "pkg.mod:Mine"])["pkg.mod:Mine"]
    assert custom.color not in {look[n].color for n in BUILTIN_NAMES}


def test_remembered_run_times_alone_are_isolated_seconds() -> None:
    # with_job_details reads each job's run times alone through a memo keyed by the spec
    # and a token of its nodes: the same numbers as isolated_seconds, for equal node
    # tuples built apart, and none of another cluster's.
    from voda.sim import isolated
    from voda.sim.cluster_file import parse_cluster

    spec = JobSpec("x", 0.0, 0, 1, 8, None, 3, profile="cifar10", per_gpu_batch=128)
    small, spread = parse_cluster("2x4").nodes, parse_cluster("4x2").nodes
    assert isolated_seconds(spec, small, 4, 30.0) != isolated_seconds(spec, spread, 4, 30.0)
    for nodes in (small, tuple(parse_cluster("2x4").nodes), spread):
        token = isolated.nodes_token_of(nodes)
        for gpus in (1, 3, 4):
            expected = isolated_seconds(spec, nodes, gpus, 30.0)
            for _ in range(2):
                assert isolated.memo_isolated_seconds(spec, token, nodes, gpus, 30.0,
                                                      "actual", 1.0) == expected
    assert isolated.nodes_token_of(small) != isolated.nodes_token_of(spread)
