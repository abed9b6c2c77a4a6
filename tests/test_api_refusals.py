"""A GPU type whose decisions are refused, through the real service over loopback HTTP:
the other types go on, and the error is reported per type in /v1/cluster and /metrics."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
import uvicorn
from polling import wait_for
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port
from voda.api.app import create_app
from voda.config import ServerSettings, User, hash_token
from voda.core.allocation import registry
from voda.core.model import Job

TOKEN = "refusals-admin-token"


def over_capacity(jobs: Sequence[Job], capacity: int) -> dict[str, int]:
    """Breaks the contract: every job at max, whatever the capacity."""
    return {job.name: job.max_workers for job in jobs}


over_capacity.name = "OverCapacity"  # type: ignore[attr-defined]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    registry.register("OverCapacity", over_capacity)
    settings = ServerSettings(backend="emulated", cluster="1x4,1x4:a100",
                              db=f"sqlite:///{tmp_path / 'voda.db'}", time_scale=1.0,
                              rate_limit_seconds=0.2, step_interval=0.1,
                              port=free_port(),
                              tokens={hash_token(TOKEN): User("admin", admin=True)})
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1",
                                           port=settings.port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{settings.port}"
    wait_for(lambda: _up(url), timeout=60)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        registry.unregister("OverCapacity")


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def refused_gauge(text: str) -> dict[str, float]:
    return {s.labels["gpu_type"]: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "voda_scheduling_refused"}


def test_a_refused_gpu_type_is_reported_and_the_others_go_on(server: str) -> None:
    with httpx.Client(base_url=server, timeout=10.0,
                      headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        changed = client.put("/v1/schedulers/a100", json={"algorithm": "OverCapacity"})
        assert changed.status_code == 200, changed.text
        a100 = client.post("/v1/jobs", json={"name": "on-a100", "command": "x", "epochs": 50,
                                             "min": 1, "max": 4, "gpu_type": "a100"})
        other = client.post("/v1/jobs", json={"name": "on-a100-too", "command": "x", "epochs": 50,
                                              "min": 1, "max": 4, "gpu_type": "a100"})
        assert other.status_code == 201  # both at max: 8 GPUs of the 4
        default = client.post("/v1/jobs", json={"name": "on-default", "command": "x",
                                                "epochs": 50, "min": 1, "max": 2})
        assert a100.status_code == default.status_code == 201
        a100_name, default_name = a100.json()["name"], default.json()["name"]
        wait_for(lambda: client.get(f"/v1/jobs/{default_name}").json()["status"] == "Running")
        wait_for(lambda: "a100" in client.get("/v1/cluster").json()["errors"])
        cluster = client.get("/v1/cluster").json()
        assert "8 GPUs allocated but the capacity is 4" in cluster["errors"]["a100"]
        types = {t["gpu_type"]: t for t in cluster["gpu_types"]}
        assert "OverCapacity" in types["a100"]["error"]
        assert types["default"]["error"] is None
        # the refused plan was not applied: the job that made it refused got nothing
        assert client.get(f"/v1/jobs/{other.json()['name']}").json()["workers"] == 0
        gauge = refused_gauge(client.get("/metrics").text)
        assert gauge["a100"] == 1.0 and gauge["default"] == 0.0
        # a good algorithm again: the type recovers and its job runs
        client.put("/v1/schedulers/a100", json={"algorithm": "ElasticFIFO"})
        wait_for(lambda: client.get(f"/v1/jobs/{a100_name}").json()["status"] == "Running")
        wait_for(lambda: client.get("/v1/cluster").json()["errors"] == {})
        assert refused_gauge(client.get("/metrics").text)["a100"] == 0.0


def test_stored_parameters_that_are_refused_fall_back_to_the_default_algorithm(
    tmp_path: Path,
) -> None:
    from voda.api.backends import create_backend
    from voda.api.service import Service
    from voda.store import jobs as store
    from voda.store.db import make_engine, migrate, session_factory

    url = f"sqlite:///{tmp_path / 'voda.db'}"
    engine = make_engine(url)
    migrate(engine)
    with session_factory(engine).begin() as session:
        store.save_algorithm(session, "default", "Tiresias", {"queue_thresholds": [5, 1]})
    engine.dispose()
    settings = ServerSettings(backend="emulated", cluster="1x4", db=url, time_scale=1.0)
    service = Service(settings, create_backend(settings))
    service.start()  # does not fail on the stored knobs
    try:
        assert service.scheduler_view("default")["algorithm"] == "ElasticFIFO"
    finally:
        service.close()
