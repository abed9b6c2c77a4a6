"""Team queues in the service, over real HTTP against `voda serve` (SQLite and PostgreSQL):
`--queues FILE` and config.toml's [[queues]] put the live scheduler under the quota layer;
every job joins a queue (its spec's, its user's, else `default`); GET /v1/queues and
/metrics show usage against guarantee, borrowing, lending and reclaims; administrators
change queues over the API, and the changes outlive a restart
(docs/design/013-queues.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ServeFactory
from tests.polling import wait_for

FAST = ("--time-scale", "1", "--rate-limit", "0.1", "--step-interval", "0.1")
QUEUE_FILE = """
queues:
  - name: team-a
    guarantee: {default: 4}
  - name: team-b
    guarantee: {default: 0}
    borrowing_limit: {default: 8}
"""
CONFIG = """
[users.alice]
queue = "team-b"
[[queues]]
name = "team-c"
guarantee = {default = 0}
weight = 2
"""
LONG = {"command": "x", "epochs": 1_000_000}


def queue_file(tmp_path: Path) -> str:
    path = tmp_path / "queues.yaml"
    path.write_text(QUEUE_FILE)
    return str(path)


def usage(client: httpx.Client, queue: str, gpu_type: str = "default") -> dict[str, Any]:
    view = client.get(f"/v1/queues/{queue}")
    assert view.status_code == 200, view.text
    return next(u for u in view.json()["usage"] if u["gpu_type"] == gpu_type)


def workers(client: httpx.Client, name: str) -> int:
    return int(client.get(f"/v1/jobs/{name}").json()["workers"])


def scraped(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics' samples by (name, sorted labels)."""
    text = client.get("/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def of(queue: str, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"queue": queue, "gpu_type": "default", **more}.items()))


def test_jobs_join_their_spec_s_queue_else_their_user_s_else_default(
        serve: ServeFactory, store_url: str, tmp_path: Path) -> None:
    server = serve(store_url, "--cluster", "1x8", "--queues", queue_file(tmp_path), *FAST,
                   tokens=True, config=CONFIG)
    with server.client("alice") as alice, server.client("bob") as bob:
        unknown = bob.post("/v1/jobs", json={"name": "lost", "queue": "team-z", **LONG})
        assert unknown.status_code == 422, unknown.text
        error = unknown.json()["errors"][0]
        assert error["field"] == "queue" and "unknown queue 'team-z'" in error["reason"]
        assert "team-a" in error["reason"]
        named = bob.post("/v1/jobs", json={"name": "named", "queue": "team-c", **LONG})
        assert named.status_code == 201 and named.json()["team_queue"] == "team-c"
        by_user = alice.post("/v1/jobs", json={"name": "by-user", **LONG})
        assert by_user.json()["team_queue"] == "team-b"
        plain = bob.post("/v1/jobs", json={"name": "plain", **LONG})
        assert plain.json()["team_queue"] == "default"
        listed = {q["name"]: q for q in bob.get("/v1/queues").json()["queues"]}
        assert list(listed) == ["team-a", "team-b", "team-c", "default"]
        assert listed["team-c"]["weight"] == 2 and listed["team-c"]["source"] == "config"
        assert listed["default"]["declared"] is False
        assert bob.get("/v1/queues/nope").status_code == 404


def test_an_owner_s_guarantee_comes_back_by_shrinking_the_borrower(
        serve: ServeFactory, store_url: str, tmp_path: Path) -> None:
    server = serve(store_url, "--cluster", "1x8", "--queues", queue_file(tmp_path), *FAST,
                   tokens=True)
    with server.client("bob") as bob:
        bob.post("/v1/jobs", json={"name": "borrower", "queue": "team-b", "min": 2, "max": 8,
                                   **LONG})
        wait_for(lambda: workers(bob, "borrower") == 8)
        b = usage(bob, "team-b")
        assert (b["used"], b["guarantee"], b["borrowed"]) == (8, 0, 8)
        a = usage(bob, "team-a")
        assert (a["used"], a["guarantee"], a["lent"]) == (0, 4, 4)  # its idle guarantee
        assert scraped(bob)[("voda_queue_gpus_lent", of("team-a"))] == 4
        bob.post("/v1/jobs", json={"name": "owner", "queue": "team-a", "min": 4, "max": 4,
                                   **LONG})
        wait_for(lambda: workers(bob, "owner") == 4)
        assert workers(bob, "borrower") == 4  # shrunk, not preempted
        b = usage(bob, "team-b")
        assert b["reclaimed_by_shrinking"] >= 4 and b["reclaimed_by_preemption"] == 0
        assert (b["used"], b["borrowed"], b["waiting_jobs"]) == (4, 4, 0)
        a = usage(bob, "team-a")
        assert (a["used"], a["borrowed"], a["lent"]) == (4, 0, 0)
        metrics = scraped(bob)
        assert metrics[("voda_queue_gpus_used", of("team-a"))] == 4
        assert metrics[("voda_queue_gpus_guaranteed", of("team-a"))] == 4
        assert metrics[("voda_queue_gpus_borrowed", of("team-b"))] == 4
        assert metrics[("voda_queue_gpus_lent", of("team-a"))] == 0
        assert metrics[("voda_queue_jobs_waiting", of("default"))] == 0
        assert metrics[("voda_queue_gpus_reclaimed_total", of("team-b", how="shrinking"))
                       ] == b["reclaimed_by_shrinking"]
        assert metrics[("voda_queue_gpus_reclaimed_total", of("team-b", how="preemption"))
                       ] == 0  # the series exists from 0: nothing was preempted


def test_administrators_change_queues_over_the_api_and_the_changes_outlive_a_restart(
        serve: ServeFactory, store_url: str, tmp_path: Path) -> None:
    path = queue_file(tmp_path)
    server = serve(store_url, "--cluster", "1x8", "--queues", path, *FAST, tokens=True)
    with server.client("alice") as alice, server.client("root") as root:
        assert alice.put("/v1/queues/team-d", json={"guarantee": {"default": 2}}
                         ).status_code == 403
        assert alice.delete("/v1/queues/team-a").status_code == 403
        created = root.put("/v1/queues/team-d", json={"guarantee": {"default": 2},
                                                       "weight": 3})
        assert created.status_code == 201, created.text
        assert created.json()["source"] == "api" and created.json()["weight"] == 3
        replaced = root.put("/v1/queues/team-d", json={"guarantee": {"default": 1}})
        assert replaced.status_code == 200 and replaced.json()["guarantee"] == {"default": 1}
        assert root.put("/v1/queues/team-b", json={"guarantee": {"default": 3}}
                        ).json()["source"] == "api"  # over the file's
        deleted = root.delete("/v1/queues/team-a")
        assert deleted.status_code == 200 and deleted.json()["name"] == "team-a"
        assert root.delete("/v1/queues/team-a").status_code == 404
        job = alice.post("/v1/jobs", json={"name": "joins", "queue": "team-d", **LONG})
        assert job.status_code == 201 and job.json()["team_queue"] == "team-d"
        gone = alice.post("/v1/jobs", json={"name": "too-late", "queue": "team-a", **LONG})
        assert gone.status_code == 422 and gone.json()["errors"][0]["field"] == "queue"
    server.kill()
    again = serve(store_url, "--cluster", "1x8", "--queues", path, *FAST, tokens=True)
    with again.client("alice") as alice:
        names = [q["name"] for q in alice.get("/v1/queues").json()["queues"]]
        assert names == ["team-b", "team-d", "default"]
        assert usage(alice, "team-b")["guarantee"] == 3
        assert usage(alice, "team-d")["guarantee"] == 1
        assert alice.get("/v1/jobs/joins").json()["team_queue"] == "team-d"


@pytest.mark.parametrize("name, body, field", [
    ("Team_A", {"guarantee": {"default": 1}}, "name"),
    ("team-x", {"guarantee": {"default": -1}}, "guarantee.default"),
    ("team-x", {"guarantee": {"default": 1_000_001}}, "guarantee.default"),
    ("team-x", {"borrowing_limit": {"default": 10**7}}, "borrowing_limit.default"),
    ("team-x", {"weight": 0}, "weight"),
    ("team-x", {"name": "team-y"}, "name"),
    ("team-x", {"match": {f"k{i}": "v" for i in range(17)}}, "match"),
    ("team-x", {"guarantee": {f"t{i}": 1 for i in range(65)}}, "guarantee"),
    ("team-x", {"colour": "red"}, "colour"),
], ids=["a name that is not a DNS label", "a negative guarantee",
        "a guarantee beyond any cluster", "a borrowing limit beyond any cluster",
        "a weight of zero", "a body naming another queue", "too many match columns",
        "too many GPU types", "an unknown field"])
def test_a_bad_queue_is_refused_naming_the_field(api_server: Any, name: str,
                                                 body: dict[str, Any], field: str) -> None:
    with api_server.client("root") as root:
        refused = root.put(f"/v1/queues/{name}", json=body)
        assert refused.status_code == 422, refused.text
        fields = [e["field"] for e in refused.json()["errors"]]
        assert any(f == field or f.endswith(f".{field}") or f.startswith(f"{field}.")
                   for f in fields), fields
        assert root.get(f"/v1/queues/{name}").status_code == 404
