"""End-to-end over real HTTP: `voda serve` in a subprocess, emulated backend, SQLite and
PostgreSQL stores. The service is shared by the tests, so each works on its own jobs."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import yaml

from tests.conftest import ServeProcess, read_example
from tests.polling import wait_for

UID_RE = r"^{base}-\d{{14}}-[0-9a-f]{{6}}$"


def submit(client: httpx.Client, doc: dict | bytes) -> dict:
    body = doc if isinstance(doc, bytes) else yaml.safe_dump(doc).encode()
    response = client.post("/v1/jobs", content=body,
                           headers={"Content-Type": "application/yaml"})
    assert response.status_code == 201, response.text
    return response.json()


@pytest.mark.parametrize(("example", "kind", "base"), [
    ("compact.yaml", "VodaJob", "resnet-cifar"),
    ("mpijob.yaml", "MPIJob", "tf-mnist"),
    ("pytorchjob.yaml", "PyTorchJob", "bert-finetune"),
], ids=["a compact spec", "an MPIJob", "a PyTorchJob"])
def test_submit_each_example_and_read_it_back(api_server: ServeProcess, example: str, kind: str,
                                              base: str) -> None:
    with api_server.client("alice") as client:
        job = submit(client, read_example(example))
        assert job["name"] == base, "the job keeps the name it was submitted with"
        assert re.match(UID_RE.format(base=base), job["uid"]), job["uid"]
        assert (job["kind"], job["user"]) == (kind, "alice")
        assert job["status"] in ("Submitted", "Waiting", "Running")
        again = client.get(f"/v1/jobs/{job['name']}").json()
        assert again["name"] == job["name"] and again["kind"] == kind
        assert client.delete(f"/v1/jobs/{job['name']}").status_code == 200


def test_concurrent_submissions_get_unique_names(api_server: ServeProcess) -> None:
    """Generated names (generate_name) are unique; of concurrent submissions of one name,
    exactly one is accepted and the others are 409 naming the field and that job."""
    doc = {"generate_name": "burst-", "command": "sleep 1", "epochs": 100,
           "gpu_type": "a100"}
    same = {"name": "burst", "command": "sleep 1", "epochs": 100, "gpu_type": "a100"}

    def one(_: int) -> str:
        with api_server.client("bob") as client:
            return submit(client, doc)["name"]

    def named(_: int) -> httpx.Response:
        with api_server.client("bob") as client:
            return client.post("/v1/jobs", json=same)

    with ThreadPoolExecutor(8) as pool:
        names = list(pool.map(one, range(40)))
        answers = list(pool.map(named, range(8)))
    assert len(set(names)) == 40 and all(re.match(r"^burst-[a-z0-9]{5}$", n) for n in names)
    assert sorted(a.status_code for a in answers) == [201] + [409] * 7
    (kept,) = [a.json() for a in answers if a.status_code == 201]
    for refused in (a.json() for a in answers if a.status_code == 409):
        assert refused["errors"][0]["field"] == "name"
        assert kept["uid"] in refused["errors"][0]["reason"]
    names.append(kept["name"])
    with api_server.client("bob") as client:
        listed = client.get("/v1/jobs", params={"user": "bob", "limit": 1000}).json()
    assert set(names) <= {j["name"] for j in listed["items"]}
    with api_server.client("root") as client:
        for name in names:
            assert client.delete(f"/v1/jobs/{name}").status_code == 200


def test_list_filters_and_pages(api_server: ServeProcess) -> None:
    with api_server.client("bob") as client:
        mine = [submit(client, {"name": f"page-{i}", "command": "x", "gpu_type": "a100",
                                "epochs": 1000, "min": 8})["name"] for i in range(5)]
        seen: list[str] = []
        offset: int | None = 0
        while offset is not None:
            page = client.get("/v1/jobs", params={"gpu_type": "a100", "user": "bob",
                                                  "limit": 2, "offset": offset}).json()
            assert len(page["items"]) <= 2
            assert all(j["gpu_type"] == "a100" and j["user"] == "bob" for j in page["items"])
            seen += [j["name"] for j in page["items"]]
            offset = page["next_offset"]
        assert set(mine) <= set(seen) and len(seen) == len(set(seen))
        for name in mine:
            client.delete(f"/v1/jobs/{name}")
        canceled = client.get("/v1/jobs", params={"status": "Canceled", "limit": 1000}).json()
        assert set(mine) <= {j["name"] for j in canceled["items"]}
        assert all(j["status"] == "Canceled" for j in canceled["items"])


def test_users_see_and_delete_only_their_own_jobs(api_server: ServeProcess) -> None:
    with api_server.client("alice") as alice, api_server.client("bob") as bob, \
            api_server.client("root") as root:
        job = submit(bob, {"name": "private", "command": "x", "epochs": 50})
        name = job["name"]
        assert alice.get(f"/v1/jobs/{name}").status_code == 404
        assert alice.delete(f"/v1/jobs/{name}").status_code == 404
        assert alice.patch(f"/v1/jobs/{name}", json={"priority": 1}).status_code == 404
        listed = alice.get("/v1/jobs", params={"limit": 1000}).json()["items"]
        assert all(j["user"] == "alice" for j in listed)
        assert root.get(f"/v1/jobs/{name}").status_code == 200  # the admin sees everything
        assert root.delete(f"/v1/jobs/{name}").json()["status"] == "Canceled"


def test_tokens_are_required_except_for_health_and_metrics(api_server: ServeProcess) -> None:
    with httpx.Client(base_url=api_server.url) as anonymous:
        assert anonymous.get("/v1/jobs").status_code == 401
        bad = anonymous.get("/v1/jobs", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401 and "token" in bad.json()["error"]
        assert anonymous.get("/healthz").status_code == 200
        assert anonymous.get("/metrics").status_code == 200
        assert "/v1/jobs" in anonymous.get("/openapi.json").json()["paths"]


def test_describe_a_running_job(api_server: ServeProcess) -> None:
    with api_server.client("alice") as client:
        name = submit(client, {"name": "describe", "command": "x", "min": 1, "max": 2,
                               "epochs": 1000, "priority": 0, "gpu_type": "default"})["name"]
        wait_for(lambda: client.get(f"/v1/jobs/{name}").json()["status"] == "Running")
        time.sleep(0.5)
        job = client.get(f"/v1/jobs/{name}").json()
        assert 1 <= job["workers"] <= 2
        assert sum(p["workers"] for p in job["placement"]) == job["workers"]
        assert job["gpu_seconds"] > 0 and job["running_seconds"] > 0
        assert job["total_seconds"] >= job["running_seconds"]
        assert set(job["speedup"]) == {"1", "2"} and job["speedup"]["1"] == 1.0
        assert job["estimated_remaining_seconds"] > 0
        client.delete(f"/v1/jobs/{name}")


def test_priority_change_and_delete(api_server: ServeProcess) -> None:
    with api_server.client("alice") as client:
        name = submit(client, {"name": "prio", "command": "x", "epochs": 500,
                               "priority": 4})["name"]
        changed = client.patch(f"/v1/jobs/{name}", json={"priority": 1})
        assert changed.status_code == 200 and changed.json()["priority"] == 1
        assert client.get(f"/v1/jobs/{name}").json()["priority"] == 1
        negative = client.patch(f"/v1/jobs/{name}", json={"priority": -1})
        assert negative.status_code == 422 and negative.json()["errors"][0]["field"] == "priority"
        deleted = client.delete(f"/v1/jobs/{name}").json()
        assert deleted["status"] == "Canceled" and deleted["workers"] == 0
        assert client.get(f"/v1/jobs/{name}").json()["status"] == "Canceled"
        assert client.delete("/v1/jobs/no-such-job").status_code == 404


def test_epoch_reports_feed_the_owners_category_history(api_server: ServeProcess) -> None:
    with api_server.client("alice") as client, api_server.client("bob") as bob:
        doc = {"name": "reporter", "command": "x", "epochs": 20, "min": 2, "max": 2,
               "category": "reported-category"}
        name = submit(client, doc)["name"]
        early = client.post(f"/v1/jobs/{name}/metrics",
                            json={"epoch": 1, "epoch_seconds": 5.0, "workers": 2})
        assert early.status_code in (200, 409)  # 409 while it has not started
        wait_for(lambda: client.get(f"/v1/jobs/{name}").json()["status"] == "Running")
        report = client.post(f"/v1/jobs/{name}/metrics",
                             json={"epoch": 2, "epoch_seconds": 5.0, "workers": 2})
        assert report.status_code == 200, report.text
        job = report.json()
        assert job["epoch_time_by_workers"]["2"] == 5.0
        assert job["completed_epochs"] == 2.0
        assert job["estimated_remaining_seconds"] > 0
        resubmitted = submit(client, {**doc, "name": "reporter-again"})
        assert resubmitted["epoch_time_by_workers"] == {"2": 5.0}
        assert resubmitted["category"] == "reported-category"
        # another owner's jobs do not read alice's history
        others = submit(bob, {**doc, "name": "reporter-bob"})
        assert others["epoch_time_by_workers"] == {}
        bad = client.post(f"/v1/jobs/{name}/metrics", json={"epoch": 1, "epoch_seconds": 0,
                                                            "workers": 2})
        assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "epoch_seconds"
        client.delete(f"/v1/jobs/{name}")
        client.delete(f"/v1/jobs/{resubmitted['name']}")
        bob.delete(f"/v1/jobs/{others['name']}")
        late = client.post(f"/v1/jobs/{name}/metrics",
                           json={"epoch": 3, "epoch_seconds": 5.0, "workers": 2})
        assert late.status_code == 409


def test_algorithm_switch_per_gpu_type(api_server: ServeProcess) -> None:
    with api_server.client("root") as root, api_server.client("alice") as alice:
        before = root.get("/v1/schedulers/a100").json()
        assert "FIFO" in before["valid_algorithms"]
        switched = root.put("/v1/schedulers/a100", json={"algorithm": "FIFO"})
        assert switched.status_code == 200 and switched.json()["algorithm"] == "FIFO"
        assert root.get("/v1/schedulers/default").json()["algorithm"] == before["algorithm"]
        unknown = root.put("/v1/schedulers/a100", json={"algorithm": "Nope"})
        assert unknown.status_code == 422
        assert unknown.json()["errors"][0]["field"] == "algorithm"
        assert "ElasticFIFO" in unknown.json()["valid"]
        assert root.get("/v1/schedulers/a100").json()["algorithm"] == "FIFO"  # unchanged
        assert alice.put("/v1/schedulers/a100", json={"algorithm": "FIFO"}).status_code == 403
        assert root.get("/v1/schedulers/h100").status_code == 404
        types = {t["gpu_type"]: t for t in root.get("/v1/cluster").json()["gpu_types"]}
        assert types["a100"]["algorithm"] == "FIFO"
        rate = root.put("/v1/schedulers/a100", json={"rate_limit_seconds": 0.2})
        assert rate.json()["rate_limit_seconds"] == 0.2
        assert root.put("/v1/schedulers/a100",
                        json={"algorithm": before["algorithm"]}).status_code == 200


def test_cluster_view(api_server: ServeProcess) -> None:
    with api_server.client("alice") as client:
        view = client.get("/v1/cluster").json()
    assert len(view["nodes"]) == 6
    totals = {t["gpu_type"]: t["total"] for t in view["gpu_types"]}
    assert totals == {"default": 16, "a100": 16}
    for t in view["gpu_types"]:
        assert t["used"] + t["free"] == t["total"]


BAD_INPUTS = [
    ("not YAML", b"name: [unclosed", 422, "body"),
    ("an unknown kind", b"apiVersion: batch/v1\nkind: Job\n", 422, "kind"),
    ("min greater than max", b"name: a\ncommand: x\nmin: 4\nmax: 2\n", 422, "max"),
    ("min below one", b"name: a\ncommand: x\nmin: 0\n", 422, "min"),
    ("an unknown GPU type", b"name: a\ncommand: x\ngpu_type: h100\n", 422, "gpu_type"),
    ("more GPUs than the type has", b"name: a\ncommand: x\nmin: 64\nmax: 64\n", 422, "min"),
    ("no command or image", b"name: a\n", 422, "command"),
    ("an unknown profile", b"name: a\ncommand: x\nprofile: nope\n", 422, "profile"),
    ("an oversized body", b"name: a\ncommand: x\n#" + b"x" * (1 << 20), 413, "body"),
    ("an invalid MPIJob", read_example("mpijob.yaml").replace(b"slotsPerWorker: 1",
                                                               b"slotsPerWorker: one"),
     422, "spec.slotsPerWorker"),
]


@pytest.mark.parametrize(("body", "status", "field"), [(b, s, f) for _, b, s, f in BAD_INPUTS],
                         ids=[f"refuses {what}" for what, *_ in BAD_INPUTS])
def test_bad_input_gets_a_json_error_naming_the_field(api_server: ServeProcess, body: bytes,
                                                      status: int, field: str) -> None:
    with api_server.client("alice") as client:
        response = client.post("/v1/jobs", content=body,
                           headers={"Content-Type": "application/yaml"})
    assert response.status_code == status, response.text
    payload = response.json()
    assert field in [e["field"] for e in payload["errors"]], payload
    assert all(e["reason"] for e in payload["errors"])


def test_bad_request_bodies_elsewhere_are_4xx(api_server: ServeProcess) -> None:
    with api_server.client("alice") as client:
        name = submit(client, {"name": "bodies", "command": "x", "epochs": 100})["name"]
        not_json = client.patch(f"/v1/jobs/{name}", content=b"{", headers={
            "Content-Type": "application/json"})
        assert not_json.status_code == 422 and not_json.json()["errors"]
        extra = client.patch(f"/v1/jobs/{name}", json={"priority": 1, "owner": "x"})
        assert extra.status_code == 422
        assert client.get("/v1/jobs", params={"limit": 0}).status_code == 422
        unknown = client.get("/v1/jobs", params={"status": "Sleeping"})
        assert unknown.status_code == 422 and unknown.json()["errors"][0]["field"] == "status"
        client.delete(f"/v1/jobs/{name}")


def test_jobs_carry_a_forecast_and_a_spec_can_be_forecast(api_server: ServeProcess) -> None:
    doc = {"name": "forecast-me", "command": "sleep 1", "epochs": 50, "gpu_type": "a100"}
    with api_server.client("alice") as client:
        job = submit(client, doc)

        def forecast_of() -> dict | None:
            return client.get(f"/v1/jobs/{job['name']}").json().get("forecast")

        wait_for(lambda: forecast_of() is not None, timeout=60)
        seen = forecast_of()
        assert seen is not None
        assert seen["basis"] == "assuming no new arrivals"
        assert seen["finish"] is None or seen["finish"] >= seen["computed_at"]
        listed = client.get("/v1/jobs", params={"user": "alice", "limit": 1000}).json()
        assert any("forecast" in j for j in listed["items"])
        body = yaml.safe_dump(doc).encode()
        what_if = client.post("/v1/forecast", content=body,
                              headers={"Content-Type": "application/yaml"})
        assert what_if.status_code == 200, what_if.text
        assert what_if.json()["forecast"]["basis"] == "assuming no new arrivals"
        bad = client.post("/v1/forecast", content=yaml.safe_dump({**doc, "epochs": 0}).encode(),
                          headers={"Content-Type": "application/yaml"})
        assert bad.status_code == 422 and "epochs" in bad.text, bad.text
        assert client.delete(f"/v1/jobs/{job['name']}").status_code == 200
