"""`voda queue list | describe | history` against a running `voda serve` with team
queues."""

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
                   "--step-interval", "0.1", tokens=True,
                   config="[server]\nhistory_sample_seconds = 0.2\n")
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
    # Its history: samples every 0.2 s here, averaged in spans of 15 s (an hour in 240
    # points), so team-b's 6 borrowed GPUs show as the mean since it started to borrow
    def borrowed() -> list[float]:
        code, out = voda("queue", "history", "team-b", "--range", "hour", "-o", "json")
        assert code == 0, out
        return [p["borrowed"] for p in json.loads(out)["points"]]

    try:
        wait_for(lambda: borrowed()[-1] > 5, timeout=30)
    except AssertionError:
        raise AssertionError(borrowed()) from None
    code, out = voda("queue", "history", "team-b", "--range", "hour", "--rows", "240")
    assert code == 0, out
    assert out.splitlines()[0] == "queue team-b, default GPUs, last hour"
    header = cells(out)[1]
    assert header[:2] == ["TIME", "USED"] and "BORROWED" in header
    last = cells(out)[-1]
    assert last[2:4] == ["0", "7"] and last[1] == last[4] and last[5:7] == ["0.0", "0.0"]
    assert float(last[4]) > 5  # GPUs held = borrowed: team-b has no guarantee
    for bad, field in ((("--range", "year"), "range"), (("--rows", "0"), "rows"),
                       (("-o", "xml"), "output")):
        code, out = voda("queue", "history", "team-b", *bad)
        assert code == 2 and out.startswith(f"{field}: "), out
    code, out = voda("queue", "history", "team-z")
    assert code == EXIT_NOT_FOUND and "team-z" in out
