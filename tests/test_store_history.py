"""The cluster's history: the samples the service takes (voda.api.history), how the store
keeps them and their retention, and how a time range is averaged into points
(voda.store.history), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from voda.api.history import cluster_samples
from voda.core.model import Cluster, JobStatus, Node
from voda.engine.scheduler import JobRecord
from voda.store import history


def sample(t: float, gpu_type: str = "default", waiting: int = 0, wait: float = 0.0) -> dict:
    return {"time": t, "gpu_type": gpu_type, "gpus": 8, "allocated": int(t) % 9,
            "in_use": int(t) % 5, "running": 1, "waiting": waiting,
            "wait_mean_seconds": wait, "wait_max_seconds": wait}


def test_a_range_is_averaged_into_at_most_the_points_asked(sessions) -> None:
    with sessions.begin() as s:
        history.add_samples(s, [sample(t, waiting=t % 3, wait=t) for t in range(1000)]
                            + [sample(t, "a100") for t in range(0, 1000, 100)], keep_after=0)
    with sessions() as s:
        points = history.samples(s, "default", 0.0, 1000.0, 100)
        assert len(points) == 100
        assert points[0]["time"] == pytest.approx(4.5)  # samples 0..9
        assert points[0]["wait_mean_seconds"] == pytest.approx(4.5)
        assert points[0]["wait_max_seconds"] == 9  # the longest wait: the most, not a mean
        assert points[-1]["allocated"] == pytest.approx(sum(t % 9 for t in range(990, 1000))
                                                        / 10)
        # The range is [start, end), one GPU type; fewer samples than points: one each.
        assert [p["time"] for p in history.samples(s, "a100", 100.0, 500.0, 100)] == [
            100.0, 200.0, 300.0, 400.0]
        assert history.samples(s, "h100", 0.0, 1000.0, 100) == []


def test_samples_and_node_changes_older_than_the_retention_are_deleted(sessions) -> None:
    with sessions.begin() as s:
        history.add_node_events(s, [{"node": "a-0", "time": t, "state": state,
                                     "message": None}
                                    for t, state in ((10.0, "drained"), (20.0, "active"),
                                                     (30.0, "drained"))])
        history.add_samples(s, [sample(t) for t in range(0, 100, 10)], keep_after=0)
    with sessions() as s:
        assert [e.state for e in history.node_events(s, "a-0", 2)] == ["active", "drained"]
    with sessions.begin() as s:
        history.add_samples(s, [sample(100.0)], keep_after=25.0)
    with sessions() as s:
        assert [p["time"] for p in history.samples(s, "default", 0, 200, 1000)] == [
            30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
        assert [e.time for e in history.node_events(s, "a-0", 50)] == [30.0]


def test_a_sample_counts_gpus_jobs_and_waits_per_gpu_type() -> None:
    cluster = Cluster((Node("a", 4), Node("b", 4), Node("c", 8, "a100")))

    def record(name: str, status: JobStatus, workers: int, waited: float = 0.0,
               gpu_type: str = "default") -> JobRecord:
        return JobRecord(name=name, min_workers=1, max_workers=4, epochs=1, submit_time=0.0,
                         gpu_type=gpu_type, status=status, current_workers=workers,
                         waiting_seconds_since_start=waited)

    records = [record("run", JobStatus.RUNNING, 3), record("wait", JobStatus.WAITING, 0, 120),
               record("new", JobStatus.SUBMITTED, 0, 60), record("done", JobStatus.COMPLETED, 0),
               record("held", JobStatus.WAITING, 2)]  # holds GPUs, not running yet
    by_type = {s["gpu_type"]: s for s in cluster_samples(cluster, records, 50.0, 60.0)}
    assert by_type["default"] == {
        "time": 50.0, "gpu_type": "default", "gpus": 8, "allocated": 5, "in_use": 3,
        "running": 1, "waiting": 2, "wait_mean_seconds": 1.5, "wait_max_seconds": 2.0}
    assert by_type["a100"]["gpus"] == 8 and by_type["a100"]["waiting"] == 0
