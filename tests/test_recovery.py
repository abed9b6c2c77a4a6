"""kill -9 recovery: `voda serve` is killed with SIGKILL while jobs run, then started again."""

from __future__ import annotations

import time

import httpx

from tests.conftest import ServeFactory
from tests.polling import wait_for
from voda.core.model import JobStatus
from voda.engine.scheduler import JobRecord
from voda.store import jobs as store
from voda.store.db import make_engine, migrate, session_factory

ARGS = ("--cluster", "2x4", "--time-scale", "1", "--rate-limit", "0.2", "--step-interval", "0.2")


def jobs_by_name(client: httpx.Client) -> dict[str, dict]:
    items = client.get("/v1/jobs", params={"limit": 1000}).json()["items"]
    return {j["name"]: client.get(f"/v1/jobs/{j['name']}").json() for j in items}


def test_kill_9_keeps_every_job_and_adopts_running_ones(serve: ServeFactory,
                                                        store_url: str) -> None:
    first = serve(store_url, *ARGS)
    with first.client() as client:
        def submit(name: str, **fields: object) -> str:
            doc = {"name": name, "command": "train", "min": 4, "max": 4, "epochs": 1000,
                   **fields}
            response = client.post("/v1/jobs", json=doc)
            assert response.status_code == 201, response.text
            return response.json()["name"]

        a = submit("a", priority=0, category="resnet")
        b = submit("b", priority=0)
        c = submit("c", priority=1)  # no room: waits
        d = submit("d", priority=2)
        client.patch(f"/v1/jobs/{d}", json={"priority": 5})
        e = submit("e", priority=2)
        client.delete(f"/v1/jobs/{e}")
        wait_for(lambda: all(client.get(f"/v1/jobs/{n}").json()["status"] == "Running"
                             for n in (a, b)))
        # epoch 2: the first epoch after the start includes the restore and is no measure
        report = {"epoch": 2, "epoch_seconds": 12.0, "workers": 4, "samples_per_second": 50.0}
        reported = client.post(f"/v1/jobs/{a}/metrics", json=report)
        assert reported.status_code == 200
        assert reported.json()["layout_throughput"] == {"4x1": 50.0}  # 4 workers on 1 node
        time.sleep(1.0)  # some attained service
        before = jobs_by_name(client)
    first.kill()

    second = serve(store_url, *ARGS)
    with second.client() as client:
        health = client.get("/healthz").json()
        assert health["recovered_jobs"] == 5
        assert health["adopted_running_jobs"] == 2
        after = jobs_by_name(client)
        assert set(after) == set(before)  # nothing lost, nothing duplicated
        for name, old in before.items():
            new = after[name]
            assert new["status"] == old["status"], name
            assert new["priority"] == old["priority"], name
            assert new["gpu_seconds"] >= old["gpu_seconds"], name
            assert new["waiting_seconds"] + new["running_seconds"] >= (
                old["waiting_seconds"] + old["running_seconds"]), name
        for name in (a, b):  # adopted, not restarted
            assert after[name]["placement"] == before[name]["placement"]
            assert after[name]["first_start_time"] == before[name]["first_start_time"]
            assert after[name]["preemptions"] == before[name]["preemptions"] == 0
        assert after[a]["epoch_time_by_workers"] == {"4": 12.0}
        assert after[a]["layout_throughput"] == {"4x1": 50.0}  # the category's, kept
        assert after[c]["status"] == "Waiting" and after[d]["priority"] == 5
        assert after[e]["status"] == "Canceled"
        # Waiting jobs are scheduled as room appears.
        client.delete(f"/v1/jobs/{a}")
        wait_for(lambda: client.get(f"/v1/jobs/{c}").json()["status"] == "Running")
        time.sleep(0.5)  # a step writes the new state
    second.kill()

    third = serve(store_url, *ARGS)  # a second crash keeps the newer state
    with third.client() as client:
        final = jobs_by_name(client)
        assert final[a]["status"] == "Canceled" and final[c]["status"] == "Running"
        assert final[c]["preemptions"] == 0
        assert len(final) == 5


def _stored_jobs(url: str, count: int, now: float) -> None:
    engine = make_engine(url)
    migrate(engine)
    rows = []
    for i in range(count):
        record = JobRecord(name=f"stored-{i:04d}", min_workers=1, max_workers=2, epochs=100,
                           submit_time=now - count + i, status=JobStatus.WAITING,
                           waiting_seconds=10.0, priority=i % 3)
        rows.append(store.new_job_values(record, {
            "user": "local", "kind": "VodaJob", "spec": {}, "command": "x"}, now - 5))
    with session_factory(engine).begin() as session:
        store.insert_jobs(session, rows)
    engine.dispose()


def test_a_store_of_many_jobs_is_recovered_and_scheduled(serve: ServeFactory,
                                                         store_url: str) -> None:
    _stored_jobs(store_url, 300, time.time())
    server = serve(store_url, *ARGS)
    with server.client() as client:
        health = client.get("/healthz").json()
        assert health["recovered_jobs"] == 300
        wait_for(lambda: client.get("/healthz").json()["first_schedule_seconds"] is not None)
        running = client.get("/v1/jobs", params={"status": "Running", "limit": 1000}).json()
        assert 1 <= running["total"] <= 8
        job = client.get("/v1/jobs/stored-0299").json()
        assert job["waiting_seconds"] >= 15.0  # 10 stored + 5 carried forward
        assert job["priority"] == 299 % 3
