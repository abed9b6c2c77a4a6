"""Team queues' history (docs/design/013-queues.md, "Service"): the samples the service
takes per queue and GPU type with the cluster's (voda.api.history), how the store keeps,
averages and forgets them (voda.store.history), and GET /v1/queues/{name}/history
against a real `voda serve` sampling every 0.2 s, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from tests.conftest import ServeFactory
from tests.polling import wait_for
from voda.api.history import queue_samples
from voda.core.quotas.usage import TypeUsage
from voda.store import history
from voda.store.db import make_engine, session_factory
from voda.store.models import ClusterSampleRow, QueueSampleRow

FAST = ("--time-scale", "1", "--rate-limit", "0.1", "--step-interval", "0.1")
QUEUE_FILE = """
queues:
  - name: team-a
    guarantee: {default: 4}
    borrowing_limit: {default: 2}
  - name: team-b
    guarantee: {default: 0}
"""
SAMPLED = "[server]\nhistory_sample_seconds = 0.2\n"
LONG = {"command": "x", "epochs": 1_000_000}


def row(t: float, queue: str = "team-a", gpu_type: str = "default", used: int = 0,
        limit: int | None = 2) -> dict:
    return {"time": t, "gpu_type": gpu_type, "queue": queue, "used": used, "guarantee": 4,
            "borrowed": max(0, used - 4), "lent": 0, "waiting": used % 2,
            "borrowing_limit": limit}


def test_a_queue_s_range_is_averaged_into_points_and_forgotten_after_the_retention(
        sessions) -> None:
    with sessions.begin() as s:
        history.add_samples(s, [], keep_after=0, queue_rows=[
            *(row(t, used=t % 7) for t in range(100)),
            *(row(t, "team-b", limit=None) for t in range(0, 100, 10)),
            row(5.0, gpu_type="a100", used=8)])
    with sessions() as s:
        points = history.queue_samples(s, "team-a", "default", 0.0, 100.0, 10)
        assert len(points) == 10
        assert points[0]["time"] == pytest.approx(4.5)  # samples 0..9
        assert points[0]["used"] == pytest.approx(sum(t % 7 for t in range(10)) / 10)
        assert {p["guarantee"] for p in points} == {4.0}
        assert {p["borrowing_limit"] for p in points} == {2.0}
        assert set(points[0]) == {"time", "used", "guarantee", "borrowed", "lent", "waiting",
                                  "borrowing_limit"}
        # One queue, one GPU type; unlimited borrowing reads back as None.
        assert [p["used"] for p in history.queue_samples(s, "team-a", "a100", 0, 100, 10)] == [
            8.0]
        team_b = history.queue_samples(s, "team-b", "default", 0.0, 100.0, 100)
        assert [p["time"] for p in team_b] == [float(t) for t in range(0, 100, 10)]
        assert {p["borrowing_limit"] for p in team_b} == {None}
        assert history.queue_samples(s, "team-z", "default", 0.0, 100.0, 10) == []
    with sessions.begin() as s:  # the cluster's samples prune the queues' too
        history.add_samples(s, [], keep_after=95.0)
    with sessions() as s:
        left = history.queue_samples(s, "team-a", "default", 0.0, 200.0, 1000)
        assert [p["time"] for p in left] == [95.0, 96.0, 97.0, 98.0, 99.0]
        assert history.queue_samples(s, "team-b", "default", 0.0, 200.0, 1000) == []


def test_a_queue_sample_is_its_usage_per_gpu_type() -> None:
    usage = {"team-a": {"default": TypeUsage("default", 5, 4, 1, 0, 2, 3, None)},
             "default": {"default": TypeUsage("default", 0, 0, 0, 0, 0, None, None),
                         "a100": TypeUsage("a100", 2, 0, 2, 0, 0, None, None)}}
    rows = queue_samples(usage, 10.0)
    assert rows[0] == {"time": 10.0, "gpu_type": "default", "queue": "team-a", "used": 5,
                       "guarantee": 4, "borrowed": 1, "lent": 0, "waiting": 2,
                       "borrowing_limit": 3}
    assert [(r["queue"], r["gpu_type"]) for r in rows] == [
        ("team-a", "default"), ("default", "default"), ("default", "a100")]


def test_a_queue_s_history_over_rest(serve: ServeFactory, store_url: str,
                                     tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(QUEUE_FILE)
    server = serve(store_url, "--cluster", "1x8,1x4:a100", "--queues", str(path), *FAST,
                   tokens=True, config=SAMPLED)
    with server.client("alice") as client:
        job = {"name": "held", "queue": "team-a", "min": 2, "max": 2, **LONG}
        assert client.post("/v1/jobs", json=job).status_code == 201

        def sampled() -> bool:
            view.update(client.get("/v1/queues/team-a/history",
                                   params={"gpu_type": "default"}).json())
            return sum(p["used"] == 2 for p in view["points"]) >= 1

        view: dict = {}
        wait_for(sampled, timeout=30)
        assert view["queue"] == "team-a" and view["gpu_type"] == "default"
        assert view["range"] == "hour" and view["seconds"] == 3600
        assert view["sample_seconds"] == 0.2
        times = [p["time"] for p in view["points"]]
        assert times == sorted(times) and 1 <= len(times) <= 240
        assert {p["guarantee"] for p in view["points"]} == {4.0}
        assert {p["borrowing_limit"] for p in view["points"]} == {2.0}
        assert max(p["used"] for p in view["points"]) == 2.0
        assert all(p["borrowed"] == 0 for p in view["points"])
        # Another queue has its own series: unlimited borrowing is null.
        team_b = client.get("/v1/queues/team-b/history", params={"range": "day"}).json()
        assert team_b["gpu_type"] == "a100" and team_b["seconds"] == 86400
        assert team_b["points"] and all(p["borrowing_limit"] is None and p["used"] == 0
                                        for p in team_b["points"])
        few = client.get("/v1/queues/team-a/history",
                         params={"points": 1, "gpu_type": "default"}).json()
        assert len(few["points"]) == 1
        # The implicit default queue is sampled too; an unknown queue is not found.
        assert client.get("/v1/queues/default/history").json()["points"]
        assert client.get("/v1/queues/team-z/history").status_code == 404
        for params, field in (({"range": "year"}, "range"), ({"points": 0}, "points"),
                              ({"points": 241}, "points"), ({"gpu_type": "h100"}, "gpu_type")):
            answer = client.get("/v1/queues/team-a/history", params=params)
            assert answer.status_code == 422, (params, answer.text)
            assert [e["field"] for e in answer.json()["errors"]] == [field], answer.text
        paths = client.get("/openapi.json").json()["paths"]
        assert "/v1/queues/{name}/history" in paths
    with server.client(anonymous=True) as anonymous:  # a read like the others: a token is needed
        assert anonymous.get("/v1/queues/team-a/history").status_code == 401


def rows_of(store_url: str, table: type[ClusterSampleRow] | type[QueueSampleRow]
            ) -> tuple[int, float | None, float | None]:
    """The table's row count, oldest and newest time, read from the store itself."""
    engine = make_engine(store_url)
    try:
        with session_factory(engine)() as s:
            count, oldest, newest = s.execute(select(func.count(), func.min(table.time),
                                                     func.max(table.time))).one()
    finally:
        engine.dispose()
    return count, oldest, newest


def test_queue_samples_are_pruned_with_the_cluster_s_and_taken_only_with_queues(
        serve: ServeFactory, store_url: str, tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(QUEUE_FILE)
    kept = 1.5  # seconds
    server = serve(store_url, "--cluster", "1x8", "--queues", str(path), *FAST, tokens=True,
                   config=SAMPLED + f"history_days = {kept / 86400!r}\n")

    def pruned() -> bool:
        count, oldest, newest = rows_of(store_url, QueueSampleRow)
        return (count > 0 and oldest is not None and newest is not None
                and newest - oldest >= kept - 0.5 and newest - oldest <= kept + 0.01)

    wait_for(pruned, timeout=30)
    server.kill()
    count, _, newest = rows_of(store_url, QueueSampleRow)
    assert newest is not None
    # Three queues (team-a, team-b, default), one GPU type: three rows a sample, at most
    # kept / 0.2 + 1 samples kept.
    assert count % 3 == 0 and count <= 3 * (kept / 0.2 + 2), count

    # Without queues, only the cluster's samples are taken.
    plain = serve(store_url, "--cluster", "1x8", *FAST, tokens=True, config=SAMPLED)
    wait_for(lambda: rows_of(store_url, ClusterSampleRow)[2] is not None
             and rows_of(store_url, ClusterSampleRow)[2] > newest + 1.0, timeout=30)
    assert rows_of(store_url, QueueSampleRow)[2] == newest
    with plain.client("alice") as client:
        later = client.get("/v1/queues/default/history", params={"range": "hour"}).json()
        assert all(p["time"] <= newest for p in later["points"])
