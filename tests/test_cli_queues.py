"""`voda queue list | describe` against a running `voda serve` with team queues."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.conftest import ServeFactory
from tests.polling import wait_for
from voda.cli.common import EXIT_NOT_FOUND
from voda.cli.main import app

QUEUES = """
queues:
  - name: team-a
    guarantee: {default: 4}
    lending_limit: {default: 2}
    match: {namespace: research}
  - name: team-b
    borrowing_limit: {default: 7}
    weight: 2
"""


def test_the_cli_lists_and_describes_queues_with_their_usage(serve: ServeFactory,
                                                             tmp_path: Path) -> None:
    (tmp_path / "queues.yaml").write_text(QUEUES)
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", "--cluster", "1x8", "--queues",
                   str(tmp_path / "queues.yaml"), "--time-scale", "1", "--rate-limit", "0.1",
                   "--step-interval", "0.1", tokens=True)
    env = {"VODA_CONFIG": str(tmp_path / "none.toml"), "VODA_URL": server.url,
           "VODA_TOKEN": server.tokens["alice"], "COLUMNS": "200"}

    def voda(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(app, list(args), env=env)
        return result.exit_code, result.output

    def cells(out: str) -> list[list[str]]:
        return [line.replace("\u2502", " ").split() for line in out.splitlines()]

    with server.client("alice") as alice:
        alice.post("/v1/jobs", json={"name": "wide", "queue": "team-b", "min": 1, "max": 8,
                                     "command": "x", "epochs": 1_000_000})
        wait_for(lambda: alice.get("/v1/jobs/wide").json()["workers"] == 6)
    code, out = voda("queue", "list")
    assert code == 0, out
    rows = {row[0]: row for row in cells(out) if row[:1] in (["team-a"], ["team-b"])}
    # team-b: the 4 unguaranteed GPUs and 2 lent by team-a (its lending limit), though
    # its borrowing limit would let it hold 7
    assert rows["team-b"][1:6] == ["default", "6/0", "6", "0", "0"]
    assert rows["team-a"][1:6] == ["default", "0/4", "0", "2", "0"]
    code, out = voda("queue", "list", "--json")
    assert code == 0
    listed = {q["name"]: q for q in json.loads(out)["queues"]}
    assert listed["team-b"]["weight"] == 2 and listed["team-a"]["lending_limit"] == {
        "default": 2}
    code, out = voda("queue", "describe", "team-a")
    assert code == 0, out
    assert "namespace=research" in out and "config" in out
    row = next(row for row in cells(out) if row[:1] == ["default"])
    assert row[:8] == ["default", "4", "unlimited", "2", "0", "0", "2", "0"]
    code, out = voda("queue", "describe", "team-z")
    assert code == EXIT_NOT_FOUND and "team-z" in out
