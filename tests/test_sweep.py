"""`voda sweep`: a grid on the local process pool and on a local Ray instance gives the same
table, a sweep killed mid-way redoes only its unfinished runs, and bad grids are refused
naming the field."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.test_sim_seeds_report import JOBS  # ten jobs that queue on 2x4 GPUs
from voda.cli.main import app
from voda.sim.sweep_grid import MAX_RUNS, MAX_VALUES, build_grid, read_grid_file
from voda.sim.sweep_store import RUNS_FILE, RunStore

runner = CliRunner()



@pytest.fixture
def grid(tmp_path: Path) -> Path:
    """2 clusters x (FIFO + Tiresias at 2 knob values) x 2 seeds: 12 runs in 6 cells."""
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(JOBS)
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({
        "workloads": [str(jobs)], "clusters": ["2x4", "1x4"],
        "algorithms": ["FIFO", "Tiresias"], "knobs": {"starvation_knob": ["none", 2]},
        "seeds": 2, "jitter": 120}))
    return path


def sweep(*args: str) -> tuple[int, list[dict], str]:
    result = runner.invoke(app, ["sweep", "--json", *args])
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return result.exit_code, lines, result.output


def test_a_grid_on_the_local_pool_streams_each_run_and_writes_the_table_and_report(
        grid: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, lines, output = sweep("--grid", str(grid), "--workers", "2", "--out", str(out))
    assert code == 0, output
    start, *runs, end = lines
    assert start == {"event": "start", "runs": 12, "cells": 6, "done": 0, "pending": 12,
                     "workers": 2, "ray": None}
    assert [r["event"] for r in runs] == ["run"] * 12
    assert [r["done"] for r in runs] == list(range(1, 13))
    assert len({r["key"] for r in runs}) == 12
    assert end["event"] == "finished" and end["rows"] == 6
    table = json.loads((out / "table.json").read_text())["rows"]
    assert [(r["cluster"], r["algorithm"], r["knobs"]) for r in table] == [
        ("2x4", "FIFO", {}), ("2x4", "Tiresias", {"starvation_knob": None}),
        ("2x4", "Tiresias", {"starvation_knob": 2}), ("1x4", "FIFO", {}),
        ("1x4", "Tiresias", {"starvation_knob": None}),
        ("1x4", "Tiresias", {"starvation_knob": 2})]
    assert all(r["seeds"] == [0, 1] and r["metrics"]["avg_jct"]["n"] == 2 for r in table)
    csv_lines = (out / "table.csv").read_text().splitlines()
    assert len(csv_lines) == 7 and csv_lines[0].startswith("workload,cluster,algorithm,knobs")
    # The cells are `voda simulate --seeds`'s: the same means and intervals.
    simulated = runner.invoke(app, ["simulate", "--json", "--workload", table[0]["workload"],
                                    "--cluster", "2x4", "--algorithm", "FIFO", "--seeds", "2",
                                    "--jitter", "120"])
    assert simulated.exit_code == 0, simulated.output
    expected = json.loads(simulated.stdout)["summary"][0]["metrics"]
    assert table[0]["metrics"]["avg_jct"] == expected["avg_jct"]
    assert table[0]["metrics"]["rho_max"] == expected["rho_max"]
    # The report: an index of every row, linked to one comparison page per cluster.
    index = (out / "report" / "index.html").read_text()
    assert index.count("<tr>") == 7 and "Tiresias starvation_knob=2" in index
    pages = sorted(p.parent.name for p in (out / "report").glob("*/index.html"))
    assert pages == ["001-jobs.yaml-2x4", "002-jobs.yaml-1x4"]
    assert "Tiresias starvation_knob=none" in (out / "report" / pages[0] / "index.html"
                                               ).read_text()


def test_the_same_grid_on_a_local_ray_instance_gives_the_identical_table(
        grid: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="voda[ray] is part of the test extra")
    local, ray = tmp_path / "local", tmp_path / "ray"
    code, _, output = sweep("--grid", str(grid), "--workers", "2", "--out", str(local))
    assert code == 0, output
    # In a process of its own: Ray in the test process would outlive the test (its
    # handlers and threads stay after ray.shutdown()).
    done = subprocess.run([sys.executable, "-m", "voda.cli.main", "sweep", "--json", "--grid",
                           str(grid), "--workers", "2", "--ray", "local", "--out", str(ray)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0]["ray"] == "local" and sum(1 for x in lines if x["event"] == "run") == 12
    assert (ray / "table.csv").read_bytes() == (local / "table.csv").read_bytes()
    assert (ray / "table.json").read_bytes() == (local / "table.json").read_bytes()


def test_a_sweep_killed_mid_way_redoes_only_its_unfinished_runs(grid: Path,
                                                                 tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = [sys.executable, "-m", "voda.cli.main", "sweep", "--json", "--grid", str(grid),
               "--workers", "1", "--out", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    assert process.stdout is not None
    seen = 0
    for line in process.stdout:
        if json.loads(line)["event"] == "run":
            seen += 1
            if seen == 3:
                break
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    process.stdout.close()
    assert process.returncode == -signal.SIGKILL
    kept = (out / RUNS_FILE).read_text().splitlines()
    assert 3 <= len(kept) < 12, "the kill should land mid-sweep"
    with (out / RUNS_FILE).open("a") as f:  # as if killed while writing a line
        f.write('{"key": "0123456789abcdef", "req')
    code, lines, output = sweep("--grid", str(grid), "--workers", "1", "--out", str(out))
    assert code == 0, output
    assert lines[0]["done"] == len(kept) and lines[0]["pending"] == 12 - len(kept)
    redone = [x["key"] for x in lines if x["event"] == "run"]
    assert len(redone) == 12 - len(kept)
    assert not set(redone) & {json.loads(line)["key"] for line in kept}
    after = [json.loads(line) for line in (out / RUNS_FILE).read_text().splitlines()]
    assert len(after) == 12 and len({r["key"] for r in after}) == 12
    # Run again: nothing left to do, and the table is an uninterrupted sweep's.
    code, lines, _ = sweep("--grid", str(grid), "--workers", "1", "--out", str(out))
    assert code == 0 and lines[0]["pending"] == 0 and len(lines) == 2
    whole = tmp_path / "whole"
    code, _, output = sweep("--grid", str(grid), "--workers", "1", "--out", str(whole))
    assert code == 0, output
    assert (out / "table.json").read_bytes() == (whole / "table.json").read_bytes()


@pytest.mark.parametrize(("fields", "message"), [
    ({"workloads": []}, "workloads: give at least one"),
    ({"workload": ["x"]}, "workload: not a grid field"),
    ({"workloads": ["no-such-file.csv"]}, "workloads: "),
    ({"workloads": [f"w{i}" for i in range(MAX_VALUES + 1)]},
     f"workloads: {MAX_VALUES + 1} values; at most {MAX_VALUES}"),
    ({"workloads": ["workload-1"], "loads": [3.0]}, "loads: each load must be one of"),
    ({"loads": [1.5]}, "loads: only the built-in workload-N take a load"),
    ({"clusters": ["banana"]}, "clusters: "),
    ({"clusters": ["2x4", "2x4"]}, "clusters: a value is given twice"),
    ({"algorithms": ["NoSuchPolicy"]}, "algorithms: "),
    ({"knobs": {"no_such_knob": [1, 2]}}, "knobs.no_such_knob: none of the algorithms"),
    ({"knobs": {"starvation_knob": []}}, "knobs.starvation_knob: give at least one value"),
    ({"algorithms": ["Tiresias"], "knobs": {"starvation_knob": ["sometimes"]}},
     "knobs.starvation_knob: must be a positive number or None, got 'sometimes'"),
    ({"seeds": 0}, "seeds: must be between 1 and 100, got 0"),
    ({"seeds": "3"}, "seeds: must be a whole number"),
    ({"jitter": -1}, "jitter: must be at least 0"),
    ({"interval": 0}, "interval: must be above 0"),
    ({"restart_scale": -1}, "restart_scale: must be at least 0"),
    ({"restart_scale": 10.5}, "restart_scale: must be 0 to 10, got 10.5"),
    ({"job_model": "nope"}, "job_model: must be one of"),
    ({"rigid": "yes"}, "rigid: must be true or false"),
    ({"algorithms": ["all"], "seeds": 100,
      "clusters": [f"{n}x4" for n in range(1, MAX_VALUES + 1)]},
     f"runs; at most {MAX_RUNS} in one sweep (split it)"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_bad_grid_is_refused_naming_the_field(grid: Path, tmp_path: Path,
                                                fields: dict, message: str) -> None:
    spec = {**json.loads(grid.read_text()), **fields}
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps(spec))
    result = runner.invoke(app, ["sweep", "--grid", str(bad), "--out", str(tmp_path / "o")])
    text = " ".join(result.output.split())
    assert result.exit_code == 2, text
    assert message in text and "Traceback" not in text
    field = message.split(":", 1)[0]
    assert f"{field}: {field}:" not in text  # the field is named once
    assert not (tmp_path / "o" / RUNS_FILE).exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--workers", "0"], "workers: must be between 1 and 1024, got 0"),
    (["--param", "starvation_knob"], "knobs: --param 'starvation_knob': expected NAME=V1;V2"),
    (["--seeds", "101"], "seeds: must be between 1 and 100, got 101"),
    (["--ray", "127.0.0.1:1"], "ray: nothing answers at 127.0.0.1:1"),
    (["--ray", "nowhere"], "ray: expected HOST:PORT, 'auto', 'local' or ray://HOST:PORT"),
], ids=["workers", "param", "seeds", "ray-unreachable", "ray-address"])
def test_bad_options_are_refused_naming_the_field(grid: Path, tmp_path: Path,
                                                  args: list[str], message: str) -> None:
    result = runner.invoke(app, ["sweep", "--grid", str(grid), *args,
                                 "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_a_directory_another_sweep_writes_to_is_refused(grid: Path, tmp_path: Path) -> None:
    busy = RunStore(tmp_path / "o")
    try:
        result = runner.invoke(app, ["sweep", "--grid", str(grid), "--out", str(tmp_path / "o")])
    finally:
        busy.close()
    assert result.exit_code == 2
    assert "out: another voda sweep is writing to" in " ".join(result.output.split())


def test_the_example_grid_is_valid_and_its_count_is_what_it_says() -> None:
    built = build_grid(read_grid_file(Path(__file__).parent.parent / "examples" / "sweep.yaml"))
    assert (len(built.runs), built.cells, built.seeds, built.jitter) == (48, 16, 3, 300.0)
    assert {r.workload for r in built.runs} == {"workload-1@1.0", "workload-1@2.0"}
    tiresias = {r.params for r in built.runs if r.algorithm == "Tiresias"}
    assert tiresias == {(("starvation_knob", None),), (("starvation_knob", 2),)}


def test_a_grid_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "grid.yaml"
    bad.write_text("- workload-1\n- workload-2\n")
    result = runner.invoke(app, ["sweep", "--grid", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "grid: " in result.output and "must hold a mapping" in result.output
