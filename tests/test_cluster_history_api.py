"""The cluster's history over REST (GET /v1/cluster/history) and `voda history`, against a
real `voda serve` sampling every 0.2 s: the series the History page draws, bounded, a 422
naming the field for a bad value, and the client command's table, JSON and YAML."""

from __future__ import annotations

import json

import yaml
from polling import wait_for
from typer.testing import CliRunner

from tests.conftest import ServeFactory, ServeProcess
from voda.cli.main import app

runner = CliRunner()


def voda(server: ServeProcess, *args: str, user: str = "alice") -> tuple[int, str]:
    env = {"VODA_CONFIG": "/nonexistent/config.toml", "VODA_URL": server.url,
           "VODA_TOKEN": server.tokens[user]}
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output


def test_history_over_rest_and_the_cli(serve: ServeFactory, store_url: str) -> None:
    server = serve(store_url, "--cluster", "2x4,1x8:a100", "--time-scale", "1",
                   "--step-interval", "0.1", tokens=True,
                   config="[server]\nhistory_sample_seconds = 0.2\n")
    with server.client("alice") as client:
        body = {"name": "held", "command": "x", "min": 2, "max": 2, "epochs": 100000}
        assert client.post("/v1/jobs", json=body).status_code == 201

        def sampled() -> bool:
            view.update(client.get("/v1/cluster/history", params={"gpu_type": "default"}).json())
            return sum(p["allocated"] > 0 for p in view["points"]) >= 2

        view: dict = {}
        wait_for(sampled, timeout=30)
        assert view["gpu_type"] == "default" and view["range"] == "hour"
        assert view["seconds"] == 3600 and view["sample_seconds"] == 0.2
        times = [p["time"] for p in view["points"]]
        assert times == sorted(times) and len(times) <= 240
        assert {p["gpus"] for p in view["points"]} == {8.0}
        assert max(p["allocated"] for p in view["points"]) == 2.0
        assert set(view["points"][0]) == {"time", "gpus", "allocated", "in_use", "running",
                                          "waiting", "wait_mean_seconds", "wait_max_seconds"}
        # Averaged into at most `points`; another GPU type has its own series.
        few = client.get("/v1/cluster/history",
                         params={"points": 2, "gpu_type": "default"}).json()
        assert 1 <= len(few["points"]) <= 2
        # Without gpu_type: the cluster's first (a100, in name order).
        a100 = client.get("/v1/cluster/history", params={"range": "week"}).json()
        assert a100["gpu_type"] == "a100" and a100["seconds"] == 7 * 86400
        assert all(p["gpus"] == 8.0 and p["allocated"] == 0 for p in a100["points"])
        # A bad value: 422 naming the field.
        for params, field in (({"range": "year"}, "range"), ({"points": 0}, "points"),
                              ({"points": 241}, "points"), ({"gpu_type": "h100"}, "gpu_type")):
            answer = client.get("/v1/cluster/history", params=params)
            assert answer.status_code == 422, (params, answer.text)
            assert [e["field"] for e in answer.json()["errors"]] == [field], answer.text
    with server.client(anonymous=True) as anonymous:  # a read like the others: a token is needed
        assert anonymous.get("/v1/cluster/history").status_code == 401

    code, out = voda(server, "history", "--range", "hour", "--rows", "3", "--gpu-type",
                     "default")
    assert code == 0, out
    assert "default GPUs, last hour" in out and "ALLOCATED" in out and "LONGEST WAIT" in out
    code, out = voda(server, "history", "-o", "json")
    assert code == 0, out
    answer = json.loads(out)
    assert answer["gpu_type"] == "a100" and answer["range"] == "day"
    code, out = voda(server, "history", "-o", "yaml", "--rows", "1")
    assert code == 0 and len(yaml.safe_load(out)["points"]) <= 1
    code, out = voda(server, "history", "--range", "year")
    assert code == 2 and "range: must be one of hour, day, week" in out
    code, out = voda(server, "history", "--rows", "0")
    assert code == 2 and "rows" in out
    code, out = voda(server, "history", "--gpu-type", "h100")
    assert code == 1 and "gpu_type" in out
