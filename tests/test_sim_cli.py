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
    for key in ("avg_jct", "p50_jct", "p99_jct", "makespan", "utilization", "rescales",
                "migrations", "preemptions"):
        assert key in r
    assert [j["name"] for j in r["jobs"]] == ["a", "b", "c"]
    for j in r["jobs"]:
        assert j["jct"] == pytest.approx(j["finish"] - j["submit"])
    assert 0 < r["utilization"] <= 1


def test_all_algorithms_compare_in_one_table_and_plot(small: Path, tmp_path: Path) -> None:
    plots = tmp_path / "plots"
    result = runner.invoke(app, ["simulate", "--workload", str(small), "--cluster", "2x4",
                                 "--algorithm", "all", "--plot", str(plots)])
    assert result.exit_code == 0, result.output
    for name in BUILTIN_NAMES:
        assert name[:6] in result.output
    pngs = sorted(p.name for p in plots.glob("*.png"))
    assert "jct_cdf.png" in pngs and "queue_length.png" in pngs
    assert len(pngs) == 2 + len(BUILTIN_NAMES)
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
    ],
    ids=["missing workload", "unknown algorithm", "bad cluster", "unknown placer",
         "negative penalty", "zero interval", "unknown preset"],
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
