"""Per-user limits, run-time node changes and TLS, over real HTTP against `voda serve`
(SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tests.conftest import ServeFactory
from tests.polling import wait_for
from voda.cli.main import app

FAST = ("--time-scale", "1", "--rate-limit", "0.1", "--step-interval", "0.1")
LIMITS = """
[server]
user_best_priority = 2
user_max_queued_jobs = 3
[users.bob]
best_priority = 5
max_queued_jobs = 1
"""


def test_users_are_held_to_their_priority_and_queue_limits(serve: ServeFactory,
                                                           store_url: str) -> None:
    server = serve(store_url, "--cluster", "1x1", *FAST, tokens=True, config=LIMITS)
    # generate_name: each submission its own name, so only the limits under test refuse one
    job = {"generate_name": "limited-", "command": "x", "epochs": 100_000}
    with server.client("alice") as alice, server.client("bob") as bob, \
            server.client("root") as root:
        too_good = alice.post("/v1/jobs", json={**job, "priority": 1})
        assert too_good.status_code == 403
        assert too_good.json()["errors"][0]["field"] == "priority"
        first = alice.post("/v1/jobs", json={**job, "priority": 2}).json()["name"]
        wait_for(lambda: alice.get(f"/v1/jobs/{first}").json()["status"] == "Running")
        names = [alice.post("/v1/jobs", json={**job, "priority": 2}).json()["name"]
                 for _ in range(3)]  # running jobs do not count: three wait
        over = alice.post("/v1/jobs", json={**job, "priority": 2})
        assert over.status_code == 403 and over.json()["errors"][0]["field"] == "queued_jobs"
        assert bob.post("/v1/jobs", json={**job, "priority": 4}).status_code == 403
        assert bob.post("/v1/jobs", json={**job, "priority": 5}).status_code == 201
        assert bob.post("/v1/jobs", json={**job, "priority": 5}).status_code == 403
        raised = alice.patch(f"/v1/jobs/{names[0]}", json={"priority": 0})
        assert raised.status_code == 403
        assert root.patch(f"/v1/jobs/{names[0]}", json={"priority": 0}).status_code == 200
        assert root.post("/v1/jobs", json={**job, "priority": 0}).status_code == 201
        alice.delete(f"/v1/jobs/{names[1]}")  # room in the queue again
        assert alice.post("/v1/jobs", json={**job, "priority": 3}).status_code == 201


def test_a_max_above_the_cluster_runs_on_what_there_is_and_grows_when_nodes_join(
        serve: ServeFactory, tmp_path: Path) -> None:
    server = serve(f"sqlite:///{tmp_path / 'voda.db'}", "--cluster", "1x4", *FAST,
                   tokens=True)
    with server.client("alice") as alice, server.client("root") as root:
        submitted = alice.post("/v1/jobs", json={"name": "roomy", "command": "x", "min": 2,
                                                 "max": 8, "epochs": 100_000})
        assert submitted.status_code == 201, submitted.text
        name = submitted.json()["name"]
        wait_for(lambda: alice.get(f"/v1/jobs/{name}").json()["workers"] == 4)
        reason = alice.get(f"/v1/jobs/{name}").json()["reason"]
        assert reason["code"] == "Shared"
        assert "max of 8 is more than the 4 default GPUs there are" in reason["message"]
        added = root.post("/v1/nodes", json={"name": "node-9", "gpus": 4})
        assert added.status_code == 201, added.text
        wait_for(lambda: alice.get(f"/v1/jobs/{name}").json()["workers"] == 8)
        # A min that can never fit is still refused, naming the field.
        refused = alice.post("/v1/jobs", json={"name": "huge", "command": "x", "min": 9,
                                               "max": 9, "epochs": 10})
        assert refused.status_code == 422
        assert refused.json()["errors"][0]["field"] == "min"
        assert "can never run: the cluster has 8 default GPUs" in refused.text


def test_nodes_are_added_drained_and_removed_at_run_time(serve: ServeFactory,
                                                         store_url: str) -> None:
    server = serve(store_url, "--cluster", "1x4", *FAST, tokens=True)
    with server.client("alice") as alice, server.client("root") as root:
        name = alice.post("/v1/jobs", json={"name": "wide", "command": "x", "min": 4,
                                            "max": 4, "epochs": 100_000}).json()["name"]
        wait_for(lambda: alice.get(f"/v1/jobs/{name}").json()["status"] == "Running")
        assert alice.patch("/v1/nodes/node-0", json={"schedulable": False}).status_code == 403
        drained = root.patch("/v1/nodes/node-0", json={"schedulable": False})
        assert drained.status_code == 200 and drained.json()["schedulable"] is False
        job = alice.get(f"/v1/jobs/{name}").json()
        assert job["status"] == "Waiting" and job["workers"] == 0
        assert "min 4 workers do not fit" in job["unschedulable"]
        assert any(e["new"] == "Unschedulable" and "do not fit" in e["message"]
                   for e in job["events"])
        added = root.post("/v1/nodes", json={"name": "node-9", "gpus": 4, "leaf": "rack-2"})
        assert added.status_code == 201, added.text
        wait_for(lambda: alice.get(f"/v1/jobs/{name}").json()["status"] == "Running")
        job = alice.get(f"/v1/jobs/{name}").json()
        assert job["placement"] == [{"node": "node-9", "workers": 4}]
        assert job["unschedulable"] is None
        assert root.post("/v1/nodes", json={"name": "node-9", "gpus": 4}).status_code == 409
        assert root.delete("/v1/nodes/node-0").json()["removed"] is True
        assert root.delete("/v1/nodes/nope").status_code == 404
        nodes = {n["name"] for n in root.get("/v1/cluster").json()["nodes"]}
        assert nodes == {"node-9"}
    server.kill()
    again = serve(store_url, "--cluster", "1x4", *FAST, tokens=True)  # the changes are kept
    with again.client("root") as root:
        assert {n["name"] for n in root.get("/v1/cluster").json()["nodes"]} == {"node-9"}


def test_the_cli_adds_drains_and_removes_nodes(serve: ServeFactory, tmp_path: Path) -> None:
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", "--cluster", "2x2", *FAST, tokens=True)
    env = {"VODA_CONFIG": str(tmp_path / "none.toml"), "VODA_URL": server.url,
           "VODA_TOKEN": server.tokens["root"]}

    def voda(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(app, list(args), env=env)
        return result.exit_code, result.output

    assert voda("node", "add", "node-7", "--gpus", "2")[0] == 0
    code, out = voda("node", "drain", "node-0")
    assert code == 0 and "drained" in out
    code, out = voda("cluster")
    assert code == 0 and "node-0 (drained)" in out and "node-7" in out
    assert voda("node", "add", "node-0")[0] == 0  # back in service
    assert voda("node", "remove", "node-1")[0] == 0
    code, out = voda("cluster", "--json")
    assert {n["name"] for n in json.loads(out)["nodes"]} == {"node-0", "node-7"}
    env["VODA_TOKEN"] = server.tokens["alice"]
    code, out = voda("node", "drain", "node-0")
    assert code == 1 and "administrator" in out


def test_the_local_backend_takes_commands_from_administrators_only(serve: ServeFactory,
                                                                   tmp_path: Path) -> None:
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", "--backend", "local", "--slots", "1",
                   "--run-dir", str(tmp_path / "runs"), tokens=True)
    proof = tmp_path / "proof"
    with server.client("alice") as alice:
        refused = alice.post("/v1/jobs", json={"name": "x", "command": f"touch {proof}"})
        assert refused.status_code == 403 and refused.json()["errors"][0]["field"] == "command"
    assert not proof.exists()
    with server.client("root") as root:  # its nodes change at run time too
        assert root.post("/v1/nodes", json={"name": "local-extra", "gpus": 1}).status_code == 201
        nodes = {n["name"]: n for n in root.get("/v1/cluster").json()["nodes"]}
        assert set(nodes) == {"local", "local-extra"}
        assert root.patch("/v1/nodes/local-extra",
                          json={"schedulable": False}).json()["schedulable"] is False
        assert root.delete("/v1/nodes/local-extra").json()["removed"] is True
        assert [n["name"] for n in root.get("/v1/cluster").json()["nodes"]] == ["local"]


def test_allowed_origins_may_call_across_origins(serve: ServeFactory, tmp_path: Path) -> None:
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", tokens=True,
                   config='[server]\nallowed_origins = "http://dash.example"\n')
    with server.client("alice") as client:
        allowed = client.get("/v1/jobs", headers={"Origin": "http://dash.example"})
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == "http://dash.example"
        preflight = client.options("/v1/jobs", headers={
            "Origin": "http://dash.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type"})
        assert preflight.status_code == 200
        other = client.get("/v1/jobs", headers={"Origin": "http://other.example"})
        assert other.status_code == 403


def test_tls_is_served_with_a_certificate_and_key(serve: ServeFactory, tmp_path: Path,
                                                  certificate: tuple[Path, Path, Path]) -> None:
    ca, chain, key = certificate
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", "--tls-cert", str(chain), "--tls-key",
                   str(key), tokens=True, scheme="https",
                   verify=ssl.create_default_context(cafile=str(ca)))
    context = ssl.create_default_context(cafile=str(ca))
    with httpx.Client(base_url=server.url, verify=context, headers={
            "Authorization": f"Bearer {server.tokens['alice']}"}) as client:
        assert client.get("/v1/jobs").status_code == 200
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=2)
    env = {"VODA_CONFIG": str(tmp_path / "none.toml"), "VODA_URL": server.url,
           "VODA_TOKEN": server.tokens["alice"], "VODA_CA_BUNDLE": str(ca)}
    result = CliRunner().invoke(app, ["jobs", "--json"], env=env)
    assert result.exit_code == 0, result.output


def test_a_tls_client_that_never_says_hello_is_closed_at_the_head_deadline(
        serve: ServeFactory, tmp_path: Path, certificate: tuple[Path, Path, Path]) -> None:
    import socket

    from tests.test_api_connections import closed_by_server

    ca, chain, key = certificate
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", "--tls-cert", str(chain), "--tls-key",
                   str(key), tokens=True, scheme="https",
                   config="[server]\nheader_timeout_seconds = 2\n",
                   verify=ssl.create_default_context(cafile=str(ca)))
    silent = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    try:
        wait_for(lambda: closed_by_server(silent), timeout=30)  # asyncio's own: 60 s
    finally:
        silent.close()
    context = ssl.create_default_context(cafile=str(ca))
    with httpx.Client(base_url=server.url, verify=context) as client:
        assert client.get("/healthz").status_code == 200  # a real client is served
