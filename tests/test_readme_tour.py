"""The README's quick tour, line by line as written, on a fresh home directory.

`voda` runs as this interpreter's `python -m voda.cli.main` (what `. .venv/bin/activate`
puts on the PATH); NAME is the name `voda submit` printed. The service's port comes from
VODA_PORT/VODA_URL, so the tour's commands need no flag the README does not show.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.polling import wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def tour_lines(readme: str) -> list[str]:
    """The tour's shell lines, continuations joined."""
    section = readme[readme.index("## A quick tour"):]
    start = section.index("```sh\n") + len("```sh\n")
    block = section[start:section.index("```", start)]
    lines: list[str] = []
    pending = ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    return [line for line in lines if line.strip()]


def commands(line: str) -> Iterator[tuple[list[str], bool]]:
    """Each command of a line, and whether it runs in the background (`&`)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words: list[str] = []
    for token in lexer:
        if token in (";", "&"):
            if words:
                yield words, token == "&"
            words = []
        else:
            words.append(token)
    if words:
        yield words, False


def test_commands_are_split_as_the_shell_does() -> None:
    line = "voda jobs -o wide; voda describe NAME  # a comment; not a command"
    assert list(commands(line)) == [(["voda", "jobs", "-o", "wide"], False),
                                    (["voda", "describe", "NAME"], False)]
    assert list(commands("voda serve --x 1 &   # bg")) == [(["voda", "serve", "--x", "1"],
                                                           True)]


def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    lines = tour_lines((ROOT / "README.md").read_text())
    assert lines[0] == ". .venv/bin/activate"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
    home = tmp_path / "home"
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"),
               XDG_CONFIG_HOME=str(home / "config"), XDG_STATE_HOME=str(home / "state"),
               XDG_CACHE_HOME=str(home / "cache"), VODA_PORT=str(port),
               VODA_URL=f"http://127.0.0.1:{port}")
    name: str | None = None
    background: list[subprocess.Popen[bytes]] = []
    ran: list[str] = []
    try:
        for line in lines[1:]:
            for words, in_background in commands(line):
                assert words[0] == "voda", f"the tour runs only voda commands: {line}"
                if "NAME" in words:
                    assert name is not None, f"NAME used before a job was submitted: {line}"
                    words = [name if w == "NAME" else w for w in words]
                argv = [sys.executable, "-m", "voda.cli.main", *words[1:]]
                if in_background:
                    log = (tmp_path / f"background-{len(background)}.log").open("wb")
                    background.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log,
                                                       stderr=subprocess.STDOUT))
                    wait_for(lambda: _up(port, background[-1]), timeout=120)
                    continue
                done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True,
                                      text=True, timeout=300)
                assert done.returncode == 0, (words, done.stdout[-2000:], done.stderr[-2000:])
                ran.append(" ".join(words[:2]))
                if words[1] == "submit":
                    found = re.search(r"submitted (\S+) \(", done.stdout)
                    assert found, done.stdout
                    name = found.group(1)
                if words[1:3] == ["describe", name]:
                    assert name in done.stdout
                if words[1] == "plan" and "--what-if" not in words:
                    assert '"allocation"' in done.stdout
    finally:
        for process in background:
            process.kill()
            process.wait(10)
    assert {"voda plan", "voda simulate", "voda submit", "voda describe",
            "voda delete"} <= set(ran)


def _up(port: int, process: subprocess.Popen[bytes]) -> bool:
    assert process.poll() is None, "a background command of the tour exited"
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False
