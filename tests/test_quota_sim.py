"""`voda simulate --queues FILE`: the queue file, and the per-queue figures."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from voda.core.quotas.share import QueueOutcome, QuotaDecision
from voda.sim.compare import RunRequest, run_one
from voda.sim.queue_stats import QueueStats
from voda.sim.queues import QueueFileError, parse_queues

ROWS = [("2017-10-09 07:00:00", 3600, 4, "a"), ("2017-10-09 07:00:10", 1800, 8, "b"),
        ("2017-10-09 07:10:00", 600, 2, "a"), ("2017-10-09 07:20:00", 7200, 4, "b"),
        ("2017-10-09 07:30:00", 900, 1, "c")]


def trace(tmp_path: Path) -> str:
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "".join(
        f"{t},{d},{g},{d * g},{c}\n" for t, d, g, c in ROWS))
    return str(path)


def queue_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "queues.yaml"
    path.write_text(text)
    return str(path)


TEAMS = """queues:
  - name: team-a
    guarantee: {default: 8}
    match: {cluster: a}
  - name: team-b
    guarantee: {default: 4}
    borrowing_limit: {default: 4}
    weight: 2
    match: {cluster: b}
"""


@pytest.mark.parametrize("algorithm", ["ElasticFIFO", "Tiresias"])
def test_the_json_has_every_queue_with_its_figures(tmp_path: Path, algorithm: str) -> None:
    request = RunRequest(trace(tmp_path), "4x4", algorithm, queues=queue_file(tmp_path, TEAMS))
    result = run_one(request).to_dict()
    queues = {q["name"]: q for q in result["queues"]}
    assert set(queues) == {"default", "team-a", "team-b"}, "unmatched rows go to default"
    assert queues["team-a"]["jobs"] == 2 and queues["default"]["jobs"] == 1
    for q in queues.values():
        assert q["guarantee_violations"] == 0
        assert set(q) >= {"avg_jct", "p99_jct", "reclaim_seconds_p50", "reclaim_seconds_p99",
                          "gpus_reclaimed_by_shrinking", "gpus_reclaimed_by_preemption"}
    assert result["unfinished"] == 0


def test_one_open_default_queue_changes_nothing(tmp_path: Path) -> None:
    path = trace(tmp_path)
    today = run_one(RunRequest(path, "4x4", "ElasticFIFO")).to_dict()
    queued = run_one(RunRequest(path, "4x4", "ElasticFIFO", queues=queue_file(
        tmp_path, "queues:\n  - name: default\n"))).to_dict()
    assert [j["jct"] for j in queued["jobs"]] == [j["jct"] for j in today["jobs"]]
    assert "queues" not in today


@pytest.mark.parametrize(("text", "field"), [
    ("queues: 3", "a list under 'queues'"),
    ("queues:\n  - {name: a, guarantee: {default: -2}}", "guarantee.default"),
    ("queues:\n  - {name: a, weight: 0}", "weight"),
    ("queues:\n  - {name: a, color: red}", "unknown field 'color'"),
    ("queues:\n  - {guarantee: {default: 2}}", "queues[0].name"),
    ("queues:\n  - {name: a, match: [1]}", "queues[0].match"),
], ids=["not a list", "negative guarantee", "zero weight", "unknown field", "no name",
        "match not a mapping"])
def test_a_bad_queue_file_is_refused_naming_the_field(text: str, field: str) -> None:
    import yaml

    with pytest.raises(QueueFileError, match=field.replace("[", r"\[").replace("]", r"\]")
                       .replace(".", r"\.")):
        parse_queues(yaml.safe_load(text))


def test_the_cli_runs_with_queues_and_refuses_a_bad_file(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from voda.cli.main import app

    runner = CliRunner()
    path = trace(tmp_path)
    good = runner.invoke(app, ["simulate", "-w", path, "-c", "4x4", "--json",
                               "--queues", queue_file(tmp_path, TEAMS)])
    assert good.exit_code == 0, good.output
    result = json.loads(good.stdout)["results"][0]
    assert {q["name"] for q in result["queues"]} == {"default", "team-a", "team-b"}
    assert set(result["finish_time_fairness"]) == {"share_at_most_1", "worst"}
    negative = queue_file(tmp_path, "queues:\n  - {name: a, weight: -1}")
    bad = runner.invoke(app, ["simulate", "-w", path, "-c", "4x4", "--queues", negative])
    assert bad.exit_code == 2
    assert "weight" in bad.output


def outcome(name: str, held_before: int, used: int, owed: int, reclaimed: int = 0
            ) -> QueueOutcome:
    return QueueOutcome(name=name, guarantee=owed, ceiling=math.inf, lendable=math.inf,
                        weight=1.0, held_before=held_before, within_guarantee=owed, share=used,
                        used=used, reclaimed_by_shrinking=reclaimed)


def decision(*outcomes: QueueOutcome) -> QuotaDecision:
    return QuotaDecision({}, {o.name: o for o in outcomes}, {}, frozenset())


def test_a_reclaim_is_timed_from_the_decision_that_takes_gpus_back_plus_the_restart_penalty(
        ) -> None:
    now = [0.0]
    stats = QueueStats(lambda: now[0], penalty=30.0)
    # a owed 4 that idle GPUs cover: waiting for the decision, not a reclaim
    stats("default", decision(outcome("a", 0, 4, 4), outcome("b", 8, 8, 0)))
    # a owed 4 again; b gives back 2 of them now and 2 at the next decision
    now[0] = 100.0
    stats("default", decision(outcome("a", 0, 2, 4), outcome("b", 8, 6, 0, reclaimed=2)))
    now[0] = 160.0
    stats("default", decision(outcome("a", 2, 4, 4), outcome("b", 6, 4, 0, reclaimed=2)))
    # a owed 4 and given them in the decision that reclaims them: the restart penalty alone
    now[0] = 500.0
    stats("default", decision(outcome("a", 0, 4, 4), outcome("b", 8, 4, 0, reclaimed=4)))
    assert stats.queues["a"].reclaim_seconds == [90.0, 30.0]
    assert stats.queues["a"].violations == 1
    assert stats.queues["b"].by_shrinking == 8
