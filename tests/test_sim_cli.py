"""`voda simulate`: JSON output, all algorithms, plots, and refusals with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from voda.cli.main import app
from voda.core.allocation.registry import BUILTIN_NAMES

runner = CliRunner()

SMALL = """
- {name: a, arrival: 0, model: cifar10, epochs: 3, min: 1, max: 4}
- {name: b, arrival: 10, duration: 300, min: 1, max: 2}
- {name: c, arrival: 20, model: ncf, epochs: 1, min: 1, max: 1}
"""


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    return path


def test_json_output_has_every_metric(small: Path) -> None:
    result = runner.invoke(app, ["simulate", "--workload", str(small), "--cluster", "2x4",
                                 "--algorithm", "ElasticFIFO", "--json"])
    assert result.exit_code == 0, result.output
    (r,) = json.loads(result.output)["results"]
    assert r["algorithm"] == "ElasticFIFO"
    for key in ("avg_jct", "p50_jct", "p99_jct", "makespan", "utilization", "gpu_hours",
                "rescales", "migrations", "preemptions"):
        assert key in r
    assert [j["name"] for j in r["jobs"]] == ["a", "b", "c"]
    for j in r["jobs"]:
        assert j["jct"] == pytest.approx(j["finish"] - j["submit"])
    assert 0 < r["utilization"] <= 1
    assert r["gpu_hours"] > 0


def test_all_algorithms_compare_in_one_table_and_plot(small: Path, tmp_path: Path) -> None:
    plots = tmp_path / "plots"
    result = runner.invoke(app, ["simulate", "--workload", str(small), "--cluster", "2x4",
                                 "--algorithm", "all", "--plot", str(plots)])
    assert result.exit_code == 0, result.output
    for name in BUILTIN_NAMES:
        assert name[:6] in result.output
    pngs = sorted(p.name for p in plots.glob("*.png"))
    together = ["fairness.png", "jct_cdf.png", "queue_length.png", "slowdown_cdf.png",
                "wait_cdf.png"]
    assert set(together) <= set(pngs)
    assert len(pngs) == len(together) + len(BUILTIN_NAMES)
    assert all((plots / p).stat().st_size > 1000 for p in pngs)


def test_the_same_run_twice_prints_the_same_json(small: Path) -> None:
    args = ["simulate", "--workload", str(small), "--cluster", "1x4", "--algorithm",
            "Tiresias", "--penalty", "10", "--interval", "30", "--json"]
    first, second = runner.invoke(app, args), runner.invoke(app, args)
    assert first.exit_code == 0 and first.output == second.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "/nonexistent/w.csv"], "no such file"),
        (["--algorithm", "Nope"], "unknown algorithm 'Nope'"),
        (["--cluster", "banana"], "cluster 'banana'"),
        (["--placement", "nowhere"], "unknown placer 'nowhere'"),
        (["--penalty", "-1"], "penalty: must not be negative"),
        (["--interval", "0"], "interval: must be positive"),
        (["--preset", "nope"], "preset: unknown 'nope'"),
        (["--restart-scale", "-0.5"], "restart_scale: must be 0 to 10"),
        (["--restart-scale", "11"], "restart_scale: must be 0 to 10"),
        (["--restart-scale", "nan"], "restart_scale: must be 0 to 10"),
    ],
    ids=["missing workload", "unknown algorithm", "bad cluster", "unknown placer",
         "negative penalty", "zero interval", "unknown preset", "negative restart scale",
         "restart scale over 10", "restart scale not a number"],
)
def test_bad_options_exit_2_without_traceback(small: Path, args, message) -> None:
    base = {"--workload": str(small), "--cluster": "2x4", "--algorithm": "FIFO"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    flat = [x for kv in base.items() for x in kv]
    result = runner.invoke(app, ["simulate", *flat])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_bad_workload_row_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("name,time,application,num_replicas,batch_size\na,5,bert,0,384\n")
    result = runner.invoke(app, ["simulate", "--workload", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:2: num_replicas: must be at least 1" in " ".join(result.output.split())


TYPED_CLUSTER = """
nodes:
  - {count: 1, gpus: 4, gpu_type: t4}
  - {name: big, gpus: 4, gpu_type: a100}
"""


@pytest.fixture
def typed_cluster(tmp_path: Path) -> Path:
    path = tmp_path / "typed.yaml"
    path.write_text(TYPED_CLUSTER)
    return path


def test_jobs_of_a_type_the_cluster_lacks_are_refused_naming_the_types(
    small: Path, typed_cluster: Path
) -> None:
    result = runner.invoke(app, ["simulate", "--workload", str(small), "--cluster",
                                 str(typed_cluster), "--algorithm", "FIFO", "--gpu-type", "h100"])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "3 jobs ask for GPU type 'h100' but the cluster has only 'a100', 't4'" in text
    assert "--gpu-type NAME" in text


def test_untyped_jobs_on_a_cluster_of_several_types_accept_any(
    small: Path, typed_cluster: Path
) -> None:
    """A job that names no GPU type may run on any (docs/design/014-heterogeneous.md)."""
    for policy in ("voda", "isolated"):
        result = runner.invoke(app, ["simulate", "--workload", str(small), "--cluster",
                                     str(typed_cluster), "--algorithm", "FIFO",
                                     "--hetero-policy", policy, "--json"])
        assert result.exit_code == 0, result.output
        (r,) = json.loads(result.output)["results"]
        assert r["unfinished"] == 0
    bad = runner.invoke(app, ["simulate", "--workload", str(small), "--cluster",
                              str(typed_cluster), "--hetero-policy", "best"])
    assert bad.exit_code == 2 and "hetero_policy: must be one of" in bad.output


def test_gpu_type_puts_untyped_jobs_on_one_of_the_clusters_types(
    small: Path, typed_cluster: Path
) -> None:
    result = runner.invoke(app, ["simulate", "--workload", str(small), "--cluster",
                                 str(typed_cluster), "--algorithm", "ElasticFIFO", "--gpu-type",
                                 "a100",
                                 "--json"])
    assert result.exit_code == 0, result.output
    (r,) = json.loads(result.output)["results"]
    assert r["unfinished"] == 0 and r["complete"] is True and r["warning"] is None


def test_unfinished_jobs_are_said_loudly_and_the_exit_code_is_not_zero(small: Path) -> None:
    args = ["simulate", "--workload", str(small), "--cluster", "2x4", "--algorithm", "FIFO",
            "--json"]
    cut = runner.invoke(app, [*args, "--until", "60"])
    assert cut.exit_code == 0, "a time limit the user asked for leaves jobs unfinished"
    (r,) = json.loads(cut.stdout)["results"]
    assert r["unfinished"] > 0 and r["complete"] is False
    assert "did not finish: JCTs and makespan cover the finished jobs only" in r["warning"]
    assert "did not finish" in cut.stderr


def simulate_jobs(tmp_path: Path, jobs: str, cluster: str, algorithm: str):  # type: ignore[no-untyped-def]
    """`voda simulate` of the workload `jobs` (YAML text)."""
    path = tmp_path / "jobs.yaml"
    path.write_text(jobs)
    return runner.invoke(app, ["simulate", "--workload", str(path), "--cluster", cluster,
                               "--algorithm", algorithm])


def test_jobs_that_can_never_finish_make_the_exit_code_non_zero(tmp_path: Path) -> None:
    result = simulate_jobs(tmp_path, "- {name: a, arrival: 0, duration: 60, min: 1, max: 1}\n"
                           "- {name: huge, arrival: 0, duration: 60, min: 16, max: 16}\n",
                           "2x4", "FIFO")
    assert result.exit_code == 1
    assert "1 of 2 jobs did not finish" in " ".join(result.stderr.split())
    assert "(1 left)" in result.stdout


def test_an_algorithm_that_is_always_refused_ends_with_its_reason(tmp_path: Path) -> None:
    result = simulate_jobs(tmp_path, "- {name: a, arrival: 0, duration: 60, min: 1, max: 4}\n"
                           "- {name: b, arrival: 0, duration: 60, min: 1, max: 4}\n",
                           "1x4", "tests.custom_algorithm:over_capacity")
    assert result.exit_code == 2
    text = " ".join(result.stderr.split())
    assert "every decision is refused" in text and "8 GPUs allocated but the capacity is 4" in text


def test_an_unknown_workload_lists_the_built_in_names() -> None:
    result = runner.invoke(app, ["simulate", "--workload", "workload-5"])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "no such file, nor a built-in workload" in text
    assert "workload-1, workload-2, workload-3, workload-4" in text and "philly" in text


def test_param_sets_an_algorithm_knob(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text("- {name: long, arrival: 0, duration: 8000, min: 4, max: 4}\n"
                    "- {name: short, arrival: 100, duration: 400, min: 4, max: 4}\n")
    base = ["simulate", "--workload", str(path), "--cluster", "1x4", "--algorithm",
            "Tiresias", "--interval", "1", "--json"]
    default = json.loads(runner.invoke(app, base).stdout)["results"][0]
    tuned = runner.invoke(app, [*base, "--param", "queue_thresholds=2000",
                                "--param", "starvation_knob=none"])
    assert tuned.exit_code == 0, tuned.output
    result = json.loads(tuned.stdout)["results"][0]
    assert result["params"] == {"queue_thresholds": 2000, "starvation_knob": None}
    finish = {j["name"]: j["finish"] for j in result["jobs"]}
    before = {j["name"]: j["finish"] for j in default["jobs"]}
    # By default (16 GPU-hours) `long` (32,000 GPU-s) stays in the top queue and, started
    # first, runs to its end before `short` (1,600 GPU-s); past a 2,000 GPU-s threshold
    # (500 s on 4 GPUs) it is demoted and `short` runs first.
    assert before["long"] < before["short"]
    assert finish["short"] < 1500 < finish["long"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--algorithm", "Tiresias", "--param", "service=total"],
         "algorithm 'Tiresias' has no parameter 'service'"),
        (["--algorithm", "Tiresias", "--param", "queue_thresholds=0"],
         "queue_thresholds: must be positive"),
        (["--algorithm", "Tiresias", "--param", "starvation_knob"], "expected NAME=VALUE"),
        (["--algorithm", "all", "--param", "flux=2"],
         "--param flux: none of the algorithms run has that parameter"),
        (["--algorithm", "FIFO", "--until", "-5"], "until: must be a positive number"),
    ],
    ids=["a knob the algorithm lacks", "a bad knob value", "a knob without a value",
         "a knob no algorithm has", "a negative time limit"],
)
def test_bad_knobs_exit_2_naming_the_knob(small: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["simulate", "--workload", str(small), "--cluster", "2x4",
                                 *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_with_all_algorithms_a_knob_goes_to_those_that_take_it(small: Path) -> None:
    result = runner.invoke(app, ["simulate", "--workload", str(small), "--cluster", "2x4",
                                 "--algorithm", "all", "--param", "compaction_threshold=0",
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["results"]) == len(BUILTIN_NAMES)
