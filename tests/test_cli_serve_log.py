"""What `voda serve` logs: a real service's text and JSON lines, and the observer behind
them (voda.api.activity_log) and the formatters (voda.cli.serve_log) in-process."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TOKENS, ServeFactory, ServeProcess
from tests.polling import wait_for
from voda.api.activity_log import ActivityLog
from voda.cli.serve_log import serve_logging
from voda.core.model import Action, ActionKind, JobStatus, Plan
from voda.engine.scheduler import JobRecord

FAST = ("--time-scale", "10000", "--cluster", "2x2", "--rate-limit", "0")
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) \S+ ")
RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def run_two_jobs(server: ServeProcess) -> tuple[str, str]:
    """Submit a job that completes and one that is deleted while it runs; their uids (the
    log names jobs by name, says each one's uid when it is submitted, and keeps the uid
    in the JSON log's `job` field) once the log holds the completion and the deletion."""
    with server.client("alice") as alice:
        done = alice.post("/v1/jobs", json={"name": "done", "command": "train", "min": 1,
                                            "max": 2, "epochs": 2}).json()["uid"]
        gone = alice.post("/v1/jobs", json={"name": "gone", "command": "train", "min": 1,
                                            "max": 2, "epochs": 1_000_000}).json()["uid"]

        def status(name: str) -> str:
            return str(alice.get(f"/v1/jobs/{name}").json()["status"])

        wait_for(lambda: status(done) == "Completed" and status(gone) == "Running")
        assert alice.delete(f"/v1/jobs/{gone}").status_code == 200
    wait_for(lambda: "deleted job gone" in server.log_path.read_text())
    return done, gone


def test_the_text_log_says_submissions_decisions_completions_and_deletions(
        serve: ServeFactory, tmp_path: Path) -> None:
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", *FAST, tokens=True)
    done, gone = run_two_jobs(server)
    server.stop()
    text = server.log_path.read_text()
    activity = [line for line in text.splitlines() if " voda.activity " in line]
    assert activity and all(TEXT_LINE.match(line) for line in activity), activity
    said = "\n".join(activity)
    assert f"INFO voda.activity submitted job done (uid {done}) by alice: min 1, max 2, " \
           f"GPU type default" in said
    assert re.search(r"INFO voda\.activity decision \([^)]*job-submitted[^)]*\): .*"
                     r"started done \(0 -> 2 GPUs\)", said), said
    assert "INFO voda.activity job done of alice completed after 2 epochs" in said
    assert "INFO voda.activity deleted job gone of alice (it was Running)" in said
    for uid in (done, gone):  # the uid: only where the job is submitted
        assert uid not in said.replace(f"(uid {uid})", ""), said
    assert "nothing changed" not in said  # a decision that changed nothing: debug only
    assert "train" not in said  # the command: debug only
    assert not [token for token in TOKENS.values() if token in text]


def test_the_json_log_is_one_object_per_line_with_the_facts_as_fields(
        serve: ServeFactory, tmp_path: Path) -> None:
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", *FAST, tokens=True,
                   config='[server]\nlog_format = "json"\n')
    done, gone = run_two_jobs(server)
    server.stop()  # every line written whole
    records = [json.loads(line) for line in server.log_path.read_text().splitlines()]
    for record in records:
        assert isinstance(record, dict)
        assert {"time", "level", "logger", "message"} <= set(record), record
        assert RFC3339_UTC.match(record["time"]), record
    by_event = _by_event(records)
    assert {"job": done, "job_name": "done", "user": "alice", "min_workers": 1, "max_workers": 2,
            "gpu_type": "default"}.items() <= by_event["submitted", done].items()
    started = {"job": done, "job_name": "done", "action": "start", "before": 0, "after": 2}
    decisions = [r for r in records if r.get("event") == "decision"]
    assert any(started in r["changes"] and "job-submitted" in r["reasons"] for r in decisions)
    assert by_event["completed", done]["user"] == "alice"
    assert by_event["completed", done]["job_name"] == "done"
    assert by_event["deleted", gone]["was"] == "Running"
    assert by_event["started", None]["backend"] == "emulated"


def _by_event(records: list[dict[str, Any]]) -> dict[tuple[str, str | None], dict[str, Any]]:
    return {(r["event"], r.get("job")): r for r in records if "event" in r}


# ----- in-process: the observer and the formatters --------------------------------------
def record(status: JobStatus = JobStatus.RUNNING, **values: Any) -> JobRecord:
    job = JobRecord(name="j", min_workers=1, max_workers=4, epochs=3, status=status, **values)
    job.extra["user"] = "bob"
    return job


def test_a_failure_says_its_reason_and_a_recovered_type_is_said(
        caplog: pytest.LogCaptureFixture) -> None:
    observer = ActivityLog(reasons=lambda: ())
    caplog.set_level(logging.INFO, logger="voda.activity")
    observer.on_status(record(failure_reason="exit code 3"), JobStatus.RUNNING,
                       JobStatus.FAILED, 0.0)
    observer.on_status(record(), JobStatus.RUNNING, JobStatus.FAILED, 0.0)
    observer.on_recovered("a100", 0.0)
    observer.on_plan(Plan({}, {}), 0.0, 0.0, 0.0)  # nothing changed: not at INFO
    assert [r.getMessage() for r in caplog.records] == [
        "job j of bob failed: exit code 3", "job j of bob failed: no reason given",
        "decisions for GPU type a100 are made again"]
    assert [getattr(r, "event", None) for r in caplog.records] == [
        "failed", "failed", "recovered"]


def test_a_decision_names_its_changes_and_why(caplog: pytest.LogCaptureFixture) -> None:
    a, b = "a-20261128120000-0a0a0a", "b-20261128120000-0b0b0b"
    observer = ActivityLog(reasons=lambda: ("job-completed", "node-added"),
                           name_of={a: "a", b: "b"})
    caplog.set_level(logging.INFO, logger="voda.activity")
    plan = Plan({a: 0, b: 4}, {b: (("n0", 4),)}, actions=(
        Action(ActionKind.HALT, a, (("n0", 2),), ()),
        Action(ActionKind.SCALE_OUT, b, (("n0", 2),), (("n0", 4),))))
    observer.on_plan(plan, 0.0, 0.001, 0.0)
    [said] = caplog.records
    assert said.getMessage() == ("decision (job-completed, node-added): preempted a "
                                 "(2 -> 0 GPUs), scaled out b (2 -> 4 GPUs)")
    assert said.changes == [  # type: ignore[attr-defined]
        {"job": a, "job_name": "a", "action": "halt", "before": 2, "after": 0},
        {"job": b, "job_name": "b", "action": "scale-out", "before": 2, "after": 4}]


def test_two_jobs_of_one_name_in_a_decision_are_told_apart_by_uid(
        caplog: pytest.LogCaptureFixture) -> None:
    old, new = "x-20261128120000-0a0a0a", "x-20261128130000-0b0b0b"
    observer = ActivityLog(reasons=lambda: (), name_of={old: "x", new: "x"})
    caplog.set_level(logging.INFO, logger="voda.activity")
    plan = Plan({old: 0, new: 2}, {new: (("n0", 2),)}, actions=(
        Action(ActionKind.HALT, old, (("n0", 2),), ()),
        Action(ActionKind.START, new, (), (("n0", 2),))))
    observer.on_plan(plan, 0.0, 0.001, 0.0)
    [said] = caplog.records
    assert said.getMessage() == (f"decision (no new event): preempted x ({old}) "
                                 f"(2 -> 0 GPUs), started x ({new}) (0 -> 2 GPUs)")


def test_nothing_is_worked_out_when_info_is_off(caplog: pytest.LogCaptureFixture) -> None:
    def reasons() -> tuple[str, ...]:
        raise AssertionError("read on the decision path with the log off")

    caplog.set_level(logging.WARNING, logger="voda.activity")
    plan = Plan({"a": 1}, {"a": (("n0", 1),)},
                actions=(Action(ActionKind.START, "a", (), (("n0", 1),)),))
    ActivityLog(reasons).on_plan(plan, 0.0, 0.0, 0.0)
    ActivityLog(reasons).on_status(record(), JobStatus.RUNNING, JobStatus.COMPLETED, 0.0)
    assert not caplog.records


def test_json_lines_carry_fields_and_errors_and_the_set_up_is_undone(
        capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    before = (root.handlers[:], root.level)
    with serve_logging("json", "warning") as out:
        assert out.json
        logging.getLogger("voda.test").info("not at warning")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logging.getLogger("voda.test").exception("it broke", extra={"job": "j"})
        out.announce("voda serve: listening", logging.WARNING, event="started")
        logging.getLogger("voda.test").warning("odd", extra={"ratio": float("nan")})
    assert (root.handlers, root.level) == before
    lines = capsys.readouterr().err.splitlines()
    broke, announced, odd = (json.loads(line) for line in lines)
    assert (odd["message"], odd["ratio"]) == ("odd", "nan")  # still one JSON object
    assert broke["message"] == "it broke" and broke["level"] == "ERROR"
    assert broke["event"] == "error" and broke["job"] == "j"
    assert "RuntimeError: boom" in broke["exception"]
    assert (announced["logger"], announced["event"]) == ("voda.serve", "started")


def test_text_lines_have_a_utc_time_the_level_and_the_logger(
        capsys: pytest.CaptureFixture[str]) -> None:
    with serve_logging("text", "info") as out:
        logging.getLogger("voda.activity").info("submitted job x by alice")
        out.announce("voda serve: a plain line")
    first, second = capsys.readouterr().err.splitlines()
    assert TEXT_LINE.match(first) and first.endswith(" INFO voda.activity submitted job x "
                                                     "by alice")
    assert second == "voda serve: a plain line"
