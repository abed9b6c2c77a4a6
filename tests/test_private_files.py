"""Files are private (issue #43, item 4): the store, its side files, the token and the
report-token key, the local backend's run dir and every job's log and checkpoints are
the service user's alone (0600 files, 0700 folders), and what the store holds does not
let anyone sign a report token (over real HTTP, against `voda serve` subprocesses)."""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ServeFactory, ServeProcess
from tests.polling import wait_for
from voda.api.report_tokens import ReportKeys, incarnation_of

PRIVATE_FILE, PRIVATE_DIR = 0o600, 0o700


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual umask (0022): without care, files come out readable by every account."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_the_store_token_and_key_are_owner_only_after_voda_serve_starts(
        serve: ServeFactory, tmp_path: Path, open_umask: None) -> None:
    state = tmp_path / "state"  # made by the service
    server = serve(f"sqlite:///{state / 'voda.db'}")  # no tokens: it generates one
    with server.client() as client:  # a write: the WAL and its index exist
        assert client.post("/v1/jobs", json={"name": "w", "command": "x"}).status_code == 201
    assert mode(state) == PRIVATE_DIR
    files = [state / "voda.db", state / "voda.db-wal", state / "voda.db-shm",
             tmp_path / "token", tmp_path / "report-key"]
    assert {f.name: mode(f) for f in files} == {f.name: PRIVATE_FILE for f in files}
    # The store holds neither the key nor the plain secret of old; only a hash of the key.
    key = (tmp_path / "report-key").read_text().strip()
    with sqlite3.connect(state / "voda.db") as db:
        values = dict(db.execute("SELECT key, value FROM service_state").fetchall())
    assert "report_secret" not in values and key not in values.values()
    assert set(values) >= {"report_key_check"}


def running_job(server: ServeProcess, owner: str = "alice") -> tuple[str, float]:
    with server.client(owner) as client:
        job = client.post("/v1/jobs", json={"name": "rep", "command": "x", "epochs": 100})
        assert job.status_code == 201, job.text
        # The uid: report tokens are minted for it (a reused name is another job)
        name = job.json()["uid"]
        wait_for(lambda: client.get(f"/v1/jobs/{name}").json()["status"] == "Running")
        return name, float(job.json()["submit_time"])


def report(server: ServeProcess, name: str, token: str, epoch: int = 1) -> int:
    with server.client(anonymous=True) as client:
        return client.post(f"/v1/jobs/{name}/metrics",
                           json={"epoch": epoch, "epoch_seconds": 10.0, "workers": 1},
                           headers={"Authorization": f"Bearer {token}"}).status_code


def store_values(db: Path) -> list[str]:
    with sqlite3.connect(db) as connection:
        return [str(v) for (v,) in connection.execute("SELECT value FROM service_state")]


def test_a_report_token_forged_with_what_the_store_holds_is_refused(
        serve: ServeFactory, tmp_path: Path) -> None:
    db = tmp_path / "voda.db"
    server = serve(f"sqlite:///{db}", "--cluster", "1x4", "--time-scale", "1", "--rate-limit",
                   "0.2", "--step-interval", "0.2", tokens=True)
    name, submitted = running_job(server)
    incarnation = incarnation_of(submitted)
    for value in store_values(db):  # whatever the store holds, used as the signing secret
        if len(value) >= 16:
            forged = ReportKeys(value).mint("alice", name, incarnation)
            assert report(server, name, forged) == 401, value
    # The service's key, from its owner-only file, signs a genuine one: it reports.
    genuine = ReportKeys((tmp_path / "report-key").read_text().strip())
    assert report(server, name, genuine.mint("alice", name, incarnation)) == 200
    with server.client("alice") as alice:
        assert alice.get(f"/v1/jobs/{name}").json()["completed_epochs"] == 1.0


def test_a_store_that_kept_the_secret_in_plain_text_starts_and_the_old_key_is_dead(
        serve: ServeFactory, tmp_path: Path) -> None:
    """A store of an earlier version: the secret in `service_state` and the file 0644. The
    service starts on it, narrows the file, deletes the secret and signs with its own
    key, so tokens signed with the (possibly leaked) secret stop working."""
    db = tmp_path / "voda.db"
    args = ("--cluster", "1x4", "--time-scale", "1", "--rate-limit", "0.2",
            "--step-interval", "0.2")
    first = serve(f"sqlite:///{db}", *args, tokens=True)
    name, submitted = running_job(first)
    first.stop()
    leaked = "an-old-secret-every-account-could-read"
    with sqlite3.connect(db) as connection:
        connection.execute("INSERT INTO service_state (key, value, updated_at) "
                           "VALUES ('report_secret', ?, 0)", (leaked,))
    os.chmod(db, 0o644)
    server = serve(f"sqlite:///{db}", *args, tokens=True)
    assert mode(db) == PRIVATE_FILE
    assert leaked not in store_values(db)
    with server.client("alice") as alice:
        wait_for(lambda: alice.get(f"/v1/jobs/{name}").json()["status"] == "Running")
    incarnation = incarnation_of(submitted)
    assert report(server, name, ReportKeys(leaked).mint("alice", name, incarnation)) == 401
    genuine = ReportKeys((tmp_path / "report-key").read_text().strip())
    assert report(server, name, genuine.mint("alice", name, incarnation)) == 200


def test_a_key_file_others_could_read_is_replaced(serve: ServeFactory, tmp_path: Path) -> None:
    key_file = tmp_path / "report-key"
    key_file.write_text("a-key-everyone-could-read-0123456789\n")
    os.chmod(key_file, 0o644)
    server = serve(f"sqlite:///{tmp_path / 'voda.db'}", "--cluster", "1x4", "--time-scale",
                   "1", "--rate-limit", "0.2", "--step-interval", "0.2", tokens=True)
    assert mode(key_file) == PRIVATE_FILE
    assert "everyone" not in key_file.read_text()
    name, submitted = running_job(server)
    known = ReportKeys("a-key-everyone-could-read-0123456789")
    assert report(server, name, known.mint("alice", name, incarnation_of(submitted))) == 401


TRAIN = ("import os, time, voda.training.report\n"
         "ckpt = os.environ['VODA_CHECKPOINT_DIR']\n"
         "open(os.path.join(ckpt, 'state.pt'), 'w').write('weights')\n"
         "print('training', flush=True)\n"
         "voda.training.report.epoch(1, 0.5, 1)\n"
         "time.sleep(1.0)\n"
         "print('done', flush=True)\n")


def test_the_run_dir_and_a_local_job_log_and_checkpoints_are_owner_only(
        serve: ServeFactory, tmp_path: Path, open_umask: None) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    runs = tmp_path / "runs"
    server = serve(f"sqlite:///{tmp_path / 'voda.db'}", "--backend", "local", "--slots", "1",
                   "--run-dir", str(runs), "--rate-limit", "0.2", "--step-interval", "0.2",
                   tokens=True)
    with server.client("root") as root:
        job = root.post("/v1/jobs", json={"name": "priv", "epochs": 1,
                                          "command": [sys.executable, str(script)]})
        assert job.status_code == 201, job.text
        name = job.json()["uid"]  # the local backend names a job's run directory by it
        wait_for(lambda: root.get(f"/v1/jobs/{name}").json()["status"] == "Completed")
    job_dir = runs / name
    dirs = [runs, job_dir, job_dir / "checkpoint"]
    files = [job_dir / "log.txt", job_dir / "reports.jsonl"]
    assert {str(d): mode(d) for d in dirs} == {str(d): PRIVATE_DIR for d in dirs}
    assert {str(f): mode(f) for f in files} == {str(f): PRIVATE_FILE for f in files}
    assert "training" in (job_dir / "log.txt").read_text()
    launcher_log = runs / "launcher.log"
    if launcher_log.exists():  # the fork launcher's own output
        assert mode(launcher_log) == PRIVATE_FILE
