"""Logs through the service (issue #43, item 7): GET /v1/jobs/{name}/logs of a real local
job over HTTP, for its owner and administrators only; `follow` sends lines written after
it started; `voda logs` reads it from a served service; other backends answer 409."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tests.conftest import ServeFactory, ServeProcess
from tests.polling import wait_for
from voda.api.logs import tail_offset
from voda.api.slots import Slots
from voda.cli.main import app

# Prints a line, then waits for a go file the test writes, then prints more and ends.
SCRIPT = ("import os, sys, time\n"
          "go = sys.argv[1]\n"
          "for i in range(3):\n"
          "    print(f'line {i}', flush=True)\n"
          "while not os.path.exists(go):\n"
          "    time.sleep(0.05)\n"
          "print('after the go', flush=True)\n"
          "time.sleep(0.3)\n"
          "print('last words', flush=True)\n")


@pytest.fixture
def local_server(serve: ServeFactory, tmp_path: Path) -> ServeProcess:
    return serve(f"sqlite:///{tmp_path / 'voda.db'}", "--backend", "local", "--slots", "2",
                 "--run-dir", str(tmp_path / "runs"), "--rate-limit", "0.2",
                 "--step-interval", "0.2", tokens=True,
                 config="[server]\nlocal_user_jobs = true\n")


def submit(server: ServeProcess, tmp_path: Path, user: str = "alice") -> tuple[str, Path]:
    script, go = tmp_path / "job.py", tmp_path / f"go-{time.monotonic_ns()}"
    script.write_text(SCRIPT)
    with server.client(user) as client:
        job = client.post("/v1/jobs", json={"name": "talk", "epochs": 1,
                                            "command": [sys.executable, str(script), str(go)]})
        assert job.status_code == 201, job.text
        return job.json()["name"], go


def log_of(client: httpx.Client, name: str, **params: object) -> httpx.Response:
    return client.get(f"/v1/jobs/{name}/logs", params=params)


def test_the_owner_reads_a_local_job_log_others_do_not(local_server: ServeProcess,
                                                       tmp_path: Path) -> None:
    name, go = submit(local_server, tmp_path)
    with local_server.client("alice") as alice, local_server.client("bob") as bob, \
            local_server.client("root") as root:
        wait_for(lambda: "line 2" in log_of(alice, name).text)
        answer = log_of(alice, name)
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/plain")
        assert "line 0\nline 1\nline 2\n" in answer.text and "[voda " in answer.text
        assert log_of(alice, name, tail=1).text == "line 2\n"
        assert log_of(alice, name, tail=2).text == "line 1\nline 2\n"
        assert log_of(root, name, tail=1).text == "line 2\n"  # an administrator
        hidden = log_of(bob, name)  # as for every read of another's job
        assert hidden.status_code == 404 and "line" not in hidden.text
        assert log_of(bob, name, follow="true").status_code == 404
        assert log_of(alice, "no-such-job").status_code == 404
        assert log_of(alice, name, tail=-1).status_code == 422
        with local_server.client(anonymous=True) as nobody:
            assert log_of(nobody, name).status_code == 401
        go.touch()
        wait_for(lambda: alice.get(f"/v1/jobs/{name}").json()["status"] == "Completed")
        assert "last words" in log_of(alice, name).text


def test_follow_receives_lines_written_after_it_started_and_ends_with_the_job(
        local_server: ServeProcess, tmp_path: Path) -> None:
    name, go = submit(local_server, tmp_path)
    with local_server.client("alice") as alice:
        wait_for(lambda: "line 2" in log_of(alice, name).text)
        received: list[bytes] = []
        started = time.monotonic()
        with alice.stream("GET", f"/v1/jobs/{name}/logs",
                          params={"follow": "true", "tail": 1}) as answer:
            assert answer.status_code == 200
            for chunk in answer.iter_raw():
                received.append(chunk)
                if b"line 2" in b"".join(received) and not go.exists():
                    go.touch()  # the job writes on only now
        text = b"".join(received).decode()
        assert text.startswith("line 2\n") and "line 0" not in text
        assert "after the go\n" in text and "last words\n" in text
        assert "] completed" in text  # the backend's final line: then the answer ends
        assert time.monotonic() - started < 60
        assert alice.get(f"/v1/jobs/{name}").json()["status"] == "Completed"


def test_voda_logs_reads_the_log_from_a_served_service(local_server: ServeProcess,
                                                       tmp_path: Path) -> None:
    name, go = submit(local_server, tmp_path)
    runner = CliRunner()

    def voda(*args: str, user: str = "alice") -> tuple[int, str, str]:
        env = {"VODA_CONFIG": "/nonexistent/config.toml", "VODA_URL": local_server.url,
               "VODA_TOKEN": local_server.tokens[user], "VODA_RUN_DIR": "/nonexistent"}
        result = runner.invoke(app, list(args), env=env)
        return result.exit_code, result.stdout, result.stderr

    with local_server.client("alice") as alice:
        wait_for(lambda: "line 2" in log_of(alice, name).text)
    code, out, _ = voda("logs", name, "--tail", "2")
    assert code == 0 and out == "line 1\nline 2\n"
    code, out, err = voda("logs", name, user="bob")
    assert code == 4 and "not found" in err and out == ""
    threading.Timer(1.0, go.touch).start()  # written while the command follows
    code, out, _ = voda("logs", name, "-f", "-n", "1")
    assert code == 0 and out.startswith("line 2\n")
    assert "after the go\nlast words\n" in out and "] completed" in out
    code, out, _ = voda("logs", name)  # the whole log, the job ended
    assert code == 0 and out.startswith("[voda ") and "line 0\n" in out


def test_a_backend_without_logs_answers_409_naming_why(api_server: ServeProcess) -> None:
    with api_server.client("alice") as alice:
        job = alice.post("/v1/jobs", json={"name": "quiet", "command": "x"})
        assert job.status_code == 201, job.text
        name = job.json()["name"]
        for params in ({}, {"follow": "true"}, {"tail": 5}):
            answer = log_of(alice, name, **params)
            assert answer.status_code == 409, answer.text
            assert "keeps no job logs" in answer.json()["error"]
        with api_server.client("bob") as bob:  # another's job is not found, not 409
            assert log_of(bob, name).status_code == 404


def test_tail_offset_finds_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_bytes(b"a\nbb\nccc\n")
    assert [log.read_bytes()[tail_offset(log, n):] for n in (0, 1, 2, 3, 4)] == [
        b"a\nbb\nccc\n", b"ccc\n", b"bb\nccc\n", b"a\nbb\nccc\n", b"a\nbb\nccc\n"]
    log.write_bytes(b"a\nno newline")
    assert log.read_bytes()[tail_offset(log, 1):] == b"no newline"
    assert tail_offset(tmp_path / "missing", 3) == 0


def test_follows_are_bounded_in_all_and_per_user() -> None:
    follows = Slots(2, 3, "followed logs", "follow", "follow")
    assert follows.take("alice") is None and follows.take("alice") is None
    field, reason = follows.take("alice") or ("", "")
    assert field == "follow" and "2 followed logs of this user" in reason
    assert follows.take("bob") is None
    field, reason = follows.take("carol") or ("", "")
    assert field == "follow" and "3 followed logs are open" in reason
    follows.give_back("alice")
    assert follows.take("carol") is None
    assert follows.count() == 3 and follows.count("alice") == 1


def test_a_reused_name_reads_the_newest_jobs_log_and_a_uid_its_own(
        local_server: ServeProcess, tmp_path: Path) -> None:
    """Once a job has finished its name is free; `voda logs NAME` and `voda describe NAME`
    then read the new job of that name, and the old one is reached by its uid."""
    script = tmp_path / "say.py"
    script.write_text("import sys\nprint(f'said {sys.argv[1]}', flush=True)\n")

    def say(client: httpx.Client, word: str) -> dict:
        job = client.post("/v1/jobs", json={"name": "say", "epochs": 1,
                                            "command": [sys.executable, str(script), word]})
        assert job.status_code == 201, job.text
        return job.json()

    with local_server.client("alice") as alice:
        first = say(alice, "first")
        refused = alice.post("/v1/jobs", json={"name": "say", "command": "true"})
        assert refused.status_code == 409 and first["uid"] in refused.text
        wait_for(lambda: alice.get(f"/v1/jobs/{first['uid']}").json()["status"]
                 == "Completed")
        second = say(alice, "second")
        assert second["name"] == "say" and second["uid"] != first["uid"]
        wait_for(lambda: alice.get("/v1/jobs/say").json()["status"] == "Completed")
    env = {"VODA_CONFIG": "/nonexistent/config.toml", "VODA_URL": local_server.url,
           "VODA_TOKEN": local_server.tokens["alice"], "VODA_RUN_DIR": "/nonexistent"}
    runner = CliRunner()
    newest = runner.invoke(app, ["logs", "say"], env=env)
    assert newest.exit_code == 0 and "said second" in newest.stdout
    assert "said first" not in newest.stdout
    oldest = runner.invoke(app, ["logs", first["uid"]], env=env)
    assert oldest.exit_code == 0 and "said first" in oldest.stdout
    described = runner.invoke(app, ["describe", "say", "--json"], env=env)
    assert described.exit_code == 0 and f'"uid": "{second["uid"]}"' in described.stdout
