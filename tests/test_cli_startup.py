"""The client commands stay light: run against a real `voda serve`, none of them imports
SciPy, NumPy, torch, SQLAlchemy or FastAPI (nor httpx or pydantic). Their start-up
time is measured by bench/cli_startup.py, not here. Also: --watch, top, --all, completion."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from polling import wait_for

from tests.conftest import ROOT, ServeFactory, ServeProcess

FORBIDDEN = {"scipy", "numpy", "torch", "sqlalchemy", "fastapi", "httpx", "pydantic",
             "uvicorn", "matplotlib"}
# Runs the CLI as `voda` does, then reports the top-level packages it had imported.
RUN_AND_LIST = (
    "import sys, atexit\n"
    "atexit.register(lambda: sys.stderr.write('\\nMODULES ' + ' '.join(sorted("
    "{m.split('.')[0] for m in sys.modules})) + '\\n'))\n"
    "sys.argv[0] = 'voda'\n"
    "from voda.cli.main import main\n"
    "main()\n"
)


def env_for(server: ServeProcess, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
    env.update(VODA_CONFIG=str(tmp_path / "none.toml"), VODA_URL=server.url, **extra)
    return env


def voda(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN_AND_LIST, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def imported(done: subprocess.CompletedProcess) -> set[str]:
    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
    return set(line.split()[1:])


@pytest.fixture
def server(serve: ServeFactory, tmp_path: Path) -> ServeProcess:
    return serve(f"sqlite:///{tmp_path / 'cli.db'}", "--cluster", "2x4", "--time-scale", "1",
                 "--rate-limit", "0.2", "--step-interval", "0.2")


def test_client_commands_import_nothing_heavy(server: ServeProcess, tmp_path: Path) -> None:
    env = env_for(server, tmp_path)
    job = tmp_path / "job.yaml"
    job.write_text("generate_name: light-\ncommand: [python, train.py]\nmin: 1\nmax: 2\n"
                   "epochs: 1000\n")
    submitted = voda(env, "submit", "-f", str(job), "--json")
    assert submitted.returncode == 0, submitted.stderr
    name = json.loads(submitted.stdout.split("\n\nMODULES")[0])["name"]
    commands = [
        ("submit", "-f", str(job)), ("jobs",), ("jobs", "--json"), ("jobs", "--all"),
        ("describe", name), ("priority", name, "2"), ("cluster",), ("algorithm", "get"),
        ("history",), ("history", "--range", "week", "-o", "json"),
        ("logs", name, "-n", "5"), ("top", "--once"),
        ("delete", name), ("node", "drain", "node-1"), ("node", "uncordon", "node-1"),
        ("node", "drain", "node-1"), ("node", "add", "node-1"), ("--version",),
        ("node", "add", "node-9", "--gpus", "2"), ("node", "remove", "node-9"), ("token",),
    ]
    seen: dict[str, set[str]] = {}
    for args in commands:
        done = voda(env, *args)
        if args[0] == "logs":  # over HTTP; the emulated backend keeps no logs: 409
            assert done.returncode == 1 and "keeps no job logs" in done.stderr, done.stderr
        else:
            assert done.returncode == 0, (args, done.stderr)
        # rich only for top's coloured map: importing it and laying out a table cost
        # about 150 ms; the rest print plain columns
        heavy = FORBIDDEN | ({"rich"} if args[0] != "top" else set())
        seen[" ".join(args[:3])] = imported(done) & heavy
    assert seen == {key: set() for key in seen}
    # The commands that run locally still import what they need (the test can fail).
    done = voda(env, "plan", "--gpus", "4", str(ROOT / "examples" / "jobs" / "compact.yaml"))
    assert "yaml" in imported(done)


def test_jobs_all_pages_through_everything(server: ServeProcess, tmp_path: Path) -> None:
    env = env_for(server, tmp_path)
    with server.client() as client:
        for i in range(7):
            body = {"name": f"page-{i}", "command": "x", "epochs": 1000}
            assert client.post("/v1/jobs", json=body).status_code == 201
    one_page = voda(env, "jobs", "--limit", "3", "--json")
    assert len(json.loads(one_page.stdout.split("\n\nMODULES")[0])["items"]) == 3
    assert "next page" in voda(env, "jobs", "--limit", "3").stdout
    every = voda(env, "jobs", "--all", "--json")
    page = json.loads(every.stdout.split("\n\nMODULES")[0])
    assert len(page["items"]) == 7 and page["next_offset"] is None
    assert len({j["name"] for j in page["items"]}) == 7


@pytest.mark.parametrize("args", [("jobs", "--watch", "--interval", "0.3"),
                                  ("top", "--interval", "0.3")], ids=["jobs --watch", "top"])
def test_live_views_redraw_until_interrupted(server: ServeProcess, tmp_path: Path,
                                             args: tuple[str, ...]) -> None:
    with server.client() as client:
        client.post("/v1/jobs", json={"name": "watched", "command": "x", "min": 2, "max": 2,
                                      "epochs": 1000})
    proc = subprocess.Popen([sys.executable, "-m", "voda.cli.main", *args], cwd=ROOT,
                            env=env_for(server, tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(3.0)
    proc.send_signal(signal.SIGINT)
    output, errors = proc.communicate(timeout=15)
    assert proc.returncode == 0, errors
    assert output.count("watched") >= 3, output[-2000:]  # redrawn several times
    if args[0] == "top":
        assert "node-0" in output and "GPU types" in output
        assert "legend: A watched  " in output and "AA" in output  # by name; two GPUs


def test_top_tells_jobs_apart_without_colour(server: ServeProcess, tmp_path: Path) -> None:
    """Piped, or with NO_COLOR, `voda top` still tells jobs apart: each job's cells are its
    own symbol, and a legend line names them."""
    workers = {}
    with server.client() as client:
        for name, count in (("first", 3), ("second", 2)):
            answer = client.post("/v1/jobs", json={"name": name, "command": "x", "min": count,
                                                   "max": count, "epochs": 1000})
            assert answer.status_code == 201, answer.text
            workers[answer.json()["name"]] = count

    def running() -> bool:
        with server.client() as client:
            jobs = client.get("/v1/jobs").json()["items"]
        return all(j["status"] == "Running" for j in jobs if j["name"] in workers)

    wait_for(running)
    for extra in ({}, {"NO_COLOR": "1"}):  # piped (stdout is a pipe here), and asked for
        done = voda(env_for(server, tmp_path, **extra), "top", "--once")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert "\x1b[" not in done.stdout  # no colour, no style at all
        # The jobs table: a symbol per job, each its own, and the GPU type it runs on.
        rows = [line.split("│") for line in lines if line.count("│") == 6]
        symbols = {row[2].strip(): row[1].strip() for row in rows}
        assert set(workers) <= set(symbols)
        assert {row[5].strip() for row in rows if row[2].strip() in workers} == {"default"}
        first, second = (symbols[name] for name in workers)
        assert len(first) == len(second) == 1 and first != second
        # The map: each job's symbol in as many cells as it has workers.
        cells = "".join(line.split("│")[5] for line in lines if "node-" in line)
        for name, count in workers.items():
            assert cells.count(symbols[name]) == count, done.stdout
        legend = next(line for line in lines if line.startswith("legend:"))
        for name in workers:
            assert f"{symbols[name]} {name}" in legend
        assert "· free" in legend


def test_cluster_and_top_mark_drained_and_removed_nodes(server: ServeProcess,
                                                       tmp_path: Path) -> None:
    env = env_for(server, tmp_path)
    assert voda(env, "node", "drain", "node-1").returncode == 0
    assert voda(env, "node", "remove", "node-0").returncode == 0
    for args in (("cluster",), ("top", "--once")):
        done = voda(env, *args)
        assert done.returncode == 0, done.stderr
        rows = {(line.split("   ")[0] if args[0] == "cluster" else line.split("│")[3]).strip():
                line for line in done.stdout.splitlines() if "node-" in line}
        assert "cordoned" in rows["node-1 (drained)" if args[0] == "cluster" else "node-1"]
        assert "lost" in rows["node-0"], done.stdout
    uncordoned = voda(env, "node", "uncordon", "node-1")
    assert uncordoned.returncode == 0 and "node node-1 in service" in uncordoned.stdout
    done = voda(env, "cluster")
    assert "node-1 (drained)" not in done.stdout and "cordoned" not in done.stdout


def test_job_names_complete_from_the_service(server: ServeProcess, tmp_path: Path) -> None:
    with server.client() as client:
        name = client.post("/v1/jobs", json={"name": "complete-me", "command": "x",
                                             "epochs": 1000}).json()["name"]
    env = env_for(server, tmp_path, _VODA_COMPLETE="complete_bash",
                  COMP_WORDS="voda describe comp", COMP_CWORD="2")
    done = subprocess.run([sys.executable, "-m", "voda.cli.main"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=30)
    assert name in done.stdout.split()
    env.update(COMP_WORDS="voda des", COMP_CWORD="1")
    done = subprocess.run([sys.executable, "-m", "voda.cli.main"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=30)
    assert "describe" in done.stdout.split()
    # The script `voda --show-completion` prints in bash (asked for by name: the option
    # itself detects the shell from the process tree, which a detached test run lacks).
    shown = subprocess.run([sys.executable, "-m", "voda.cli.main"], cwd=ROOT,
                           env=env_for(server, tmp_path, _VODA_COMPLETE="source_bash"),
                           capture_output=True, text=True, timeout=30)
    assert "_voda_completion" in shown.stdout and "complete " in shown.stdout


@pytest.mark.parametrize(("words", "expected"), [
    ("voda node drain node-", {"node-0", "node-1"}),
    ("voda algorithm set Elastic", {"ElasticFIFO", "ElasticSRJF", "ElasticTiresias"}),
    ("voda algorithm get --gpu-type def", {"default"}),
    ("voda jobs --status Run", {"Running"}),
], ids=["node names", "algorithm names", "GPU types", "statuses"])
def test_every_kind_of_argument_completes(server: ServeProcess, tmp_path: Path, words: str,
                                          expected: set[str]) -> None:
    env = env_for(server, tmp_path, _VODA_COMPLETE="complete_bash", COMP_WORDS=words,
                  COMP_CWORD=str(len(words.split()) - 1))
    done = subprocess.run([sys.executable, "-m", "voda.cli.main"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=30)
    assert set(done.stdout.split()) == expected, done.stdout + done.stderr


@pytest.mark.parametrize("args", [("describe", "../../healthz"),
                                  ("node", "drain", "../../healthz"),
                                  ("algorithm", "get", "--gpu-type", "a/b")],
                         ids=["a job name", "a node name", "a GPU type"])
def test_a_name_cannot_leave_its_route(server: ServeProcess, tmp_path: Path,
                                       args: tuple[str, ...]) -> None:
    done = voda(env_for(server, tmp_path), *args)
    assert done.returncode == 2 and "is not a" in done.stderr
    assert '"status"' not in done.stdout  # not the health answer


def test_version_is_the_installed_packages() -> None:
    from importlib.metadata import version

    from typer.testing import CliRunner

    from voda.cli.main import app

    done = CliRunner().invoke(app, ["--version"])
    assert done.exit_code == 0 and done.stdout.strip() == f"voda {version('voda')}"


def test_the_statuses_that_complete_are_the_engines() -> None:
    from voda.cli.completion import complete_statuses
    from voda.core.model import JobStatus

    assert complete_statuses(None, "") == [s.value for s in JobStatus]  # type: ignore[arg-type]


def test_each_command_comes_from_the_module_the_map_names() -> None:
    import typer

    from voda.cli.main import COMMANDS, MODULES, build

    for module in MODULES:
        names = set(typer.main.get_command(build((module,))).commands)  # type: ignore[attr-defined]
        assert names == {c for c, m in COMMANDS.items() if m == module}, module
    assert set(typer.main.get_command(build()).commands) == set(COMMANDS)  # type: ignore[attr-defined]


def test_a_command_line_loads_only_its_own_command_module(tmp_path: Path) -> None:
    listing = ("import sys, atexit\n"
               "atexit.register(lambda: sys.stderr.write('\\nMODULES ' + ' '.join(sorted("
               "m for m in sys.modules if m.startswith('voda.cli.'))) + '\\n'))\n"
               "sys.argv[0] = 'voda'\n"
               "from voda.cli.main import main\n"
               "main()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
    env.update(VODA_CONFIG=str(tmp_path / "voda.toml"))
    done = subprocess.run([sys.executable, "-c", listing, "token"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    from voda.cli.main import MODULES

    commands = {f"voda.cli.{m}" for m in MODULES}
    assert imported(done) & commands == {"voda.cli.token"}, done.stderr
