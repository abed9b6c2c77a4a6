"""Rollouts complete and wedged reconcilers are restarted (deploy/base/deployment.yaml):
a standby `voda serve` answers /healthz (the readiness probe) while it waits for the
lease, the Service's Endpoints name the leader alone and follow it to the next leader,
and /livez fails once the reconciler has stopped looping."""

from __future__ import annotations

import asyncio
import signal
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from voda.api.app import create_app
from voda.api.service import Service
from voda.backends.kubernetes.settings import KubernetesSettings
from voda.config import ServerSettings, User, hash_token
from voda_testing.kube.deployed import DEPLOY, rendered
from voda_testing.kube.harness import FakeCluster, eventually
from voda_testing.kube.replica import Replica

pytestmark = pytest.mark.slow


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeCluster]:
    with FakeCluster.running(tmp_path, nodes=1) as cluster:
        yield cluster


def endpoint(fake: FakeCluster) -> tuple[str, int] | None:
    subsets = fake.server.store.get("endpoints", "voda", "voda").get("subsets") or []
    if not subsets:
        return None
    return subsets[0]["addresses"][0]["ip"], subsets[0]["ports"][0]["port"]


def test_a_standby_is_ready_and_the_service_follows_the_leader(
        tmp_path: Path, fake: FakeCluster) -> None:
    replicas: list[Replica] = []
    try:
        leader = Replica(tmp_path, fake, "voda-a")
        replicas.append(leader)
        eventually(leader.leading, timeout=60)
        eventually(lambda: endpoint(fake) == ("127.0.0.1", leader.port), timeout=60)
        standby = Replica(tmp_path, fake, "voda-b")
        replicas.append(standby)
        eventually(standby.standing_by, timeout=60)
        # The readiness and liveness probes pass on the standby; nothing else is served.
        eventually(lambda: standby.status("/healthz") == 200, timeout=60)
        assert standby.status("/livez") == 200
        assert standby.status("/v1/jobs") == 503
        assert endpoint(fake) == ("127.0.0.1", leader.port)
        assert leader.status("/livez") == 200
        # A rollout stops the old leader: it leaves the Service, the standby takes it.
        leader.proc.send_signal(signal.SIGTERM)
        assert leader.proc.wait(30) == 0
        eventually(standby.leading, timeout=60)
        eventually(lambda: endpoint(fake) == ("127.0.0.1", standby.port), timeout=60)
        assert standby.status("/healthz") == 200
    finally:
        for replica in replicas:
            replica.stop()


def test_livez_fails_while_the_reconciler_is_wedged(tmp_path: Path, fake: FakeCluster) -> None:
    backend = fake.backend(KubernetesSettings(namespace=fake.namespace,
                                              liveness_seconds=1.0))
    service = Service(ServerSettings(db=f"sqlite:///{tmp_path / 'v.db'}",
                                     backend="kubernetes",
                                     tokens={hash_token("a-long-enough-token"): User("a")}),
                      backend)
    service.start()
    app = create_app(service.settings, service=service)
    app.state.service = service  # as its lifespan does (ASGITransport runs none)

    def livez() -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport,
                                         base_url="http://127.0.0.1") as client:
                return await client.get("/livez")
        return asyncio.run(call())

    backend.running()
    assert backend.stalled() is None and livez().status_code == 200
    release = threading.Event()

    def wedge() -> None:  # a reconciler stuck behind the backend's lock
        with backend.lock:
            release.wait(30)

    thread = threading.Thread(target=wedge)
    thread.start()
    try:
        reason = eventually(backend.stalled, timeout=60)
        assert reason.startswith("kubernetes: the reconciler has not looped for")
        answer = livez()
        assert answer.status_code == 503 and answer.json()["status"] == "wedged"
        assert answer.json()["reasons"][0].startswith("kubernetes: the reconciler")
    finally:
        release.set()
        thread.join()
    eventually(lambda: backend.stalled() is None, timeout=60)
    assert livez().status_code == 200
    service.close()


def test_the_deployment_probes_what_a_standby_answers() -> None:
    (deployment,) = [d for d in rendered(DEPLOY / "base") if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    (service,) = [d for d in rendered(DEPLOY / "base") if d["kind"] == "Service"]
    assert "selector" not in service["spec"]  # the leader writes the Endpoints
    (config,) = [d for d in rendered(DEPLOY / "base") if d["kind"] == "ConfigMap"]
    toml: dict[str, Any] = tomllib.loads(config["data"]["config.toml"])
    assert toml["kubernetes"]["leader_service"] == service["metadata"]["name"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
