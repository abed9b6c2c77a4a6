"""`voda plan`: dry-run allocation of a jobs file through the real command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from voda.cli.main import app
from voda.core.allocation import registry
from voda.core.jobfile import JobFileError, jobs_from_data

runner = CliRunner()

JOBS = [
    {"name": "a", "min": 1, "max": 4, "submit_time": 0},
    {"name": "b", "min": 2, "max": 4, "submit_time": 1, "epochs": 10,
     "epoch_time_by_workers": {1: 100.0, 2: 50.0}},
    {"name": "c", "min": 2, "max": 2, "preferred": 2, "submit_time": 2, "priority": 1,
     "attained_gpu_seconds": 60000.0, "completed_epochs": 1, "epochs": 3},
]


def write(tmp_path: Path, data: object, suffix: str = ".yaml") -> Path:
    path = tmp_path / f"jobs{suffix}"
    text = json.dumps(data) if suffix == ".json" else yaml.safe_dump(data)
    path.write_text(text)
    return path


def run(*args: str):
    return runner.invoke(app, ["plan", *args])


@pytest.mark.parametrize(
    ("algorithm", "gpus", "expected"),
    [
        ("FIFO", 4, {"a": 1, "b": 2, "c": 0}),
        ("ElasticFIFO", 7, {"a": 3, "b": 4, "c": 0}),
        ("Tiresias", 5, {"a": 1, "b": 2, "c": 2}),
        ("Tiresias", 3, {"a": 1, "b": 2, "c": 0}),
        ("AFS-L", 5, {"a": 3, "b": 2, "c": 0}),
        ("FfDLOptimizer", 8, {"a": 4, "b": 4, "c": 0}),
    ],
    ids=[
        "FIFO gives preferred sizes in submit order",
        "ElasticFIFO grows the jobs of the top priority class before a lower class starts",
        "Tiresias serves the job past the threshold last",
        "Tiresias leaves the job past the threshold waiting when GPUs run out",
        "AFS-L gives the short job of linear speed more GPUs before starting the longer",
        "FfDLOptimizer maximizes total speedup",
    ],
)
def test_plan_prints_the_allocation_as_json(
    tmp_path: Path, algorithm: str, gpus: int, expected: dict[str, int]
) -> None:
    result = run("--algorithm", algorithm, "--gpus", str(gpus), str(write(tmp_path, JOBS)))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"allocation": expected}


def test_plan_reads_json_files_with_string_worker_keys(tmp_path: Path) -> None:
    path = write(tmp_path, JOBS, suffix=".json")
    assert '"1": 100.0' in path.read_text()
    result = run("--algorithm", "AFS-L", "--gpus", "6", str(path))
    assert result.exit_code == 0, result.output
    # a, the shorter, grows while b's relative gain does not beat a's; c (priority 1)
    # gets what the top class leaves: nothing
    assert json.loads(result.stdout) == {"allocation": {"a": 4, "b": 2, "c": 0}}
    b = jobs_from_data(json.loads(path.read_text()))[1]
    assert dict(b.epoch_time_by_workers) == {1: 100.0, 2: 50.0}


def test_plan_passes_algorithm_knobs(tmp_path: Path) -> None:
    path = write(tmp_path, JOBS)
    params = json.dumps({"queue_thresholds": [100000.0]})
    result = run("--algorithm", "Tiresias", "--params", params, "--gpus", "4", str(path))
    assert result.exit_code == 0, result.output
    # c (60,000 GPU-s) is now in the top queue; priority 1 still serves it after a and b
    assert json.loads(result.stdout) == {"allocation": {"a": 1, "b": 2, "c": 0}}
    result = run("--algorithm", "Tiresias", "--params", params, "--gpus", "5", str(path))
    assert json.loads(result.stdout) == {"allocation": {"a": 1, "b": 2, "c": 2}}


def test_plan_accepts_an_algorithm_by_import_path(tmp_path: Path) -> None:
    result = run("--algorithm", "voda.core.allocation.fifo:FIFO", "--gpus", "3",
                 str(write(tmp_path, JOBS)))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"allocation": {"a": 1, "b": 2, "c": 0}}


BAD_JOBS = [
    ({"name": "a", "gpus": 2}, "document 1: gpus: unknown field"),
    ([{"min": 1}], "job #1: name: required"),
    ([{"name": "a", "min": 3, "max": 2}], "job 'a': max: must be at least min (3), got 2"),
    ([{"name": "a", "min": 0}], "job 'a': min: must be at least 1, got 0"),
    ([{"name": "a", "min": 1.5}], "job 'a': min: must be an integer, got 1.5"),
    ([{"name": "a", "max": "four"}], "job 'a': max: must be an integer, got 'four'"),
    ([{"name": "a", "gpus": 2}], "job 'a': gpus: unknown field"),
    ([{"name": "a"}, {"name": "a"}], "job 'a': name: duplicate of job #1"),
    ([{"name": "a", "min": 1, "max": 2, "preferred": 3}],
     "job 'a': preferred: must lie in [min, max] = [1, 2], got 3"),
    ([{"name": "a", "epoch_time_by_workers": {0: 10}}],
     "job 'a': epoch_time_by_workers: worker count 0 is not a positive integer"),
    ([{"name": "a", "epoch_time_by_workers": {2: -1}}],
     "job 'a': epoch_time_by_workers: seconds for 2 workers must be a positive number"),
    ([{"name": "a", "attained_gpu_seconds": -5}],
     "job 'a': attained_gpu_seconds: must be at least 0, got -5"),
    ([{"name": "a", "priority": True}], "job 'a': priority: must be an integer, got a boolean"),
    (["a"], "job #1: must be a mapping of fields, got 'a'"),
]


@pytest.mark.parametrize(
    ("data", "message"),
    BAD_JOBS,
    ids=[
        "a mapping that is neither a planning entry nor a job spec",
        "a job without a name",
        "min above max",
        "min below 1",
        "a fractional min",
        "a max that is not a number",
        "an unknown field",
        "two jobs with the same name",
        "preferred outside min and max",
        "epoch times for zero workers",
        "a negative epoch time",
        "negative attained service",
        "a boolean priority",
        "a job that is not a mapping",
    ],
)
def test_malformed_jobs_exit_2_naming_the_job_field_and_reason(
    tmp_path: Path, data: object, message: str
) -> None:
    result = run("--gpus", "4", str(write(tmp_path, data)))
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_every_problem_in_a_file_is_reported_at_once(tmp_path: Path) -> None:
    data = [{"name": "a", "min": 3, "max": 2}, {"name": "b", "epochs": 0, "colour": "red"}]
    result = run("--gpus", "4", str(write(tmp_path, data)))
    assert result.exit_code == 2
    for message in ("job 'a': max:", "job 'b': epochs: must be at least 1",
                    "job 'b': colour: unknown field"):
        assert message in result.stderr


def test_an_unknown_algorithm_exits_2_listing_the_valid_names(tmp_path: Path) -> None:
    result = run("--algorithm", "Lottery", "--gpus", "4", str(write(tmp_path, JOBS)))
    assert result.exit_code == 2
    assert "unknown algorithm 'Lottery'" in result.stderr
    for name in registry.BUILTIN_NAMES:
        assert name in result.stderr


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ('{"queue_order": "forever"}', "--params: queue_order: must be one of"),
        ("[1, 2]", "--params: must be a JSON object"),
        ("{not json", "--params: not valid JSON"),
    ],
    ids=["a bad knob value", "knobs that are not an object", "knobs that are not JSON"],
)
def test_bad_algorithm_knobs_exit_2(tmp_path: Path, params: str, message: str) -> None:
    result = run("--algorithm", "Tiresias", "--params", params, "--gpus", "4",
                 str(write(tmp_path, JOBS)))
    assert result.exit_code == 2
    assert message in result.stderr


def test_an_unreadable_file_exits_2(tmp_path: Path) -> None:
    result = run("--gpus", "4", str(tmp_path / "missing.yaml"))
    assert result.exit_code == 2
    assert "cannot read the jobs file" in result.stderr
    assert "missing.yaml" in result.stderr


def test_a_file_that_does_not_parse_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text("- name: a\n  min: [1\n")
    result = run("--gpus", "4", str(path))
    assert result.exit_code == 2
    assert "cannot parse the jobs file" in result.stderr


def test_a_negative_gpu_count_is_a_usage_error(tmp_path: Path) -> None:
    result = run("--gpus", "-1", str(write(tmp_path, JOBS)))
    assert result.exit_code == 2


def test_the_installed_command_line_exits_2_without_a_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, [{"name": "a", "min": 5, "max": 1}])
    done = subprocess.run(
        [sys.executable, "-m", "voda.cli.main", "plan", "--gpus", "4", str(path)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert "job 'a': max: must be at least min (5), got 1" in done.stderr
    assert "Traceback" not in done.stderr
    ok = subprocess.run(
        [sys.executable, "-m", "voda.cli.main", "plan", "--algorithm", "SRJF", "--gpus", "4",
         str(write(tmp_path, JOBS))],
        capture_output=True, text=True, timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    # priority classes are strict: c (priority 1) waits for a and b whatever its length
    assert json.loads(ok.stdout) == {"allocation": {"a": 1, "b": 2, "c": 0}}


def test_jobs_from_data_builds_jobs_in_file_order_with_defaults() -> None:
    jobs = jobs_from_data([{"name": "z", "min": 2}, JOBS[2]])
    assert [j.name for j in jobs] == ["z", "c"]
    z, c = jobs
    assert (z.min_workers, z.max_workers, z.preferred_workers, z.epochs) == (2, 2, None, 1)
    assert c.attained_gpu_seconds == c.attained_gpu_seconds_since_start == 60000.0
    assert c.attained_gpu_seconds_since_promotion == 60000.0
    assert (c.priority, c.completed_epochs, c.epochs) == (1, 1.0, 3)


def test_jobs_from_data_raises_with_one_message_per_problem() -> None:
    with pytest.raises(JobFileError) as caught:
        jobs_from_data([{"name": "a", "min": 0, "max": "x"}, {"min": 1}])
    assert caught.value.messages == [
        "job 'a': max: must be an integer, got 'x'",
        "job #2: name: required",
    ]


EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "jobs"


def test_plan_takes_the_job_specs_submit_takes_several_in_one_file(tmp_path: Path) -> None:
    one = run("--gpus", "8", str(EXAMPLES / "compact.yaml"))
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout) == {"allocation": {"resnet-cifar": 4}}
    several = tmp_path / "several.yaml"
    several.write_text("---\n".join((EXAMPLES / n).read_text() for n in
                                    ("compact.yaml", "mpijob.yaml", "pytorchjob.yaml")))
    done = run("--gpus", "6", "--algorithm", "FIFO", str(several))
    assert done.exit_code == 0, done.output
    allocation = json.loads(done.stdout)["allocation"]
    assert set(allocation) == {"resnet-cifar", "tf-mnist", "bert-finetune"}
    assert allocation["resnet-cifar"] == 2  # FIFO: its preferred size, first in the file
    assert sum(allocation.values()) <= 6


def test_plan_names_the_problems_of_each_document(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: ok\ncommand: x\nmin: 1\nmax: 2\n---\nname: bad\ncommand: x\n"
                    "min: 3\nmax: 2\n---\n- {name: ok, min: 1}\n---\n7\n")
    done = run("--gpus", "4", str(path))
    assert done.exit_code == 2
    text = " ".join(done.output.split())
    assert "document 2: min:" in text or "document 2: max:" in text
    assert "job 'ok': name: used by another job in the file" in text
    assert "document 4: a job spec (mapping) or a list of jobs, got int" in text
