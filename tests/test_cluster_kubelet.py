"""The simulated kubelets and node lifecycle controller, seen through the official client:
image pulls and container starts take time, containers that exit are restarted after a
CrashLoopBackOff back-off, and nodes that stop being Ready are tainted, their pods
evicted only once their tolerationSeconds are over."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from voda_testing.kube.cluster import SimSettings
from voda_testing.kube.cluster.kubelet import backoff_seconds
from voda_testing.kube.harness import FakeCluster, eventually

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
# 10 s of back-off are 0.2 s; 300 s of tolerationSeconds 0.6 s
SETTINGS = SimSettings(tick_seconds=0.01, start_seconds=0.02, terminate_seconds=0.02,
                       image_pull_seconds=0.4, restart_backoff_scale=0.02,
                       toleration_seconds_scale=0.002)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[FakeCluster, client.CoreV1Api]]:
    fake = FakeCluster.start(tmp_path, SETTINGS)
    configuration = client.Configuration()
    config.load_kube_config(str(fake.admin_kubeconfig), client_configuration=configuration)
    yield fake, client.CoreV1Api(client.ApiClient(configuration))
    assert fake.sim.errors == []
    fake.stop()


def pod(name: str, node: str, policy: str = "Always", image: str = "trainer:1",
        tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": image}],
                            "restartPolicy": policy,
                            "nodeSelector": {"kubernetes.io/hostname": node}}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": name}, "spec": spec}


def container(core: client.CoreV1Api, name: str) -> client.V1ContainerStatus | None:
    statuses = core.read_namespaced_pod(name, "default").status.container_statuses
    return statuses[0] if statuses else None


def test_a_pod_runs_only_after_its_image_is_pulled_and_its_container_started(
        cluster: tuple[FakeCluster, client.CoreV1Api]) -> None:
    fake, core = cluster
    fake.sim.add_node("a", 4)
    core.create_namespaced_pod("default", pod("first", "a"))
    eventually(lambda: core.read_namespaced_pod("first", "default").spec.node_name)
    bound = time.monotonic()
    eventually(lambda: core.read_namespaced_pod("first", "default").status.phase == "Running")
    assert time.monotonic() - bound >= SETTINGS.image_pull_seconds * 0.9
    running = container(core, "first")
    assert running is not None and running.ready and running.state.running is not None
    assert running.restart_count == 0 and running.image == "trainer:1"
    assert "trainer:1" in fake.sim.images["a"]  # the next pod on "a" needs no pull


def test_a_crashing_container_is_restarted_after_a_growing_back_off(
        cluster: tuple[FakeCluster, client.CoreV1Api]) -> None:
    fake, core = cluster
    fake.sim.add_node("a", 4)
    core.create_namespaced_pod("default", pod("crash", "a"))
    eventually(lambda: core.read_namespaced_pod("crash", "default").status.phase == "Running")
    for restarts, wait in ((0, 10), (1, 20), (2, 40)):
        fake.sim.exit_container("default", "crash", exit_code=2)
        waiting = container(core, "crash")
        assert waiting is not None and waiting.state.waiting.reason == "CrashLoopBackOff"
        assert waiting.state.waiting.message.startswith(
            f"back-off {wait}s restarting failed container=main pod=crash_default(")
        assert waiting.restart_count == restarts and not waiting.ready
        assert waiting.last_state.terminated.exit_code == 2
        assert waiting.last_state.terminated.reason == "Error"
        pod_now = core.read_namespaced_pod("crash", "default")
        assert pod_now.status.phase == "Running"
        assert {c.type: c.status for c in pod_now.status.conditions}["Ready"] == "False"
        eventually(lambda r=restarts: (c := container(core, "crash")) is not None
                   and c.restart_count == r + 1 and c.state.running is not None)
    assert [backoff_seconds(n) for n in range(1, 8)] == [10, 20, 40, 80, 160, 300, 300]


def test_a_container_that_exits_by_itself_loops_in_crash_loop_back_off(
        cluster: tuple[FakeCluster, client.CoreV1Api]) -> None:
    fake, core = cluster
    fake.sim.add_node("a", 4)
    body = pod("loop", "a")
    body["metadata"]["annotations"] = {"sim.voda.io/exit-after-seconds": "0.05"}
    core.create_namespaced_pod("default", body)
    eventually(lambda: (c := container(core, "loop")) is not None and c.restart_count >= 2)
    assert core.read_namespaced_pod("loop", "default").status.phase == "Running"


@pytest.mark.parametrize(("policy", "code", "phase"), [
    ("Never", 1, "Failed"), ("Never", 0, "Succeeded"), ("OnFailure", 0, "Succeeded")])
def test_a_container_not_to_be_restarted_ends_the_pod(
        cluster: tuple[FakeCluster, client.CoreV1Api], policy: str, code: int,
        phase: str) -> None:
    fake, core = cluster
    fake.sim.add_node("a", 4)
    core.create_namespaced_pod("default", pod("once", "a", policy))
    eventually(lambda: core.read_namespaced_pod("once", "default").status.phase == "Running")
    fake.sim.exit_container("default", "once", exit_code=code)
    ended = core.read_namespaced_pod("once", "default")
    assert ended.status.phase == phase
    assert ended.status.container_statuses[0].state.terminated.exit_code == code


def taints(core: client.CoreV1Api, node: str) -> list[tuple[str, str]]:
    return sorted((t.key, t.effect) for t in core.read_node(node).spec.taints or [])


def test_nodes_that_are_not_ready_or_unreachable_are_tainted_until_they_are_back(
        cluster: tuple[FakeCluster, client.CoreV1Api]) -> None:
    fake, core = cluster
    for name in ("a", "b"):
        fake.sim.add_node(name, 4)
    fake.sim.set_ready("a", False, unreachable=False)
    fake.sim.set_ready("b", False)
    eventually(lambda: taints(core, "a") == [(NOT_READY, "NoExecute"),
                                             (NOT_READY, "NoSchedule")])
    eventually(lambda: taints(core, "b") == [(UNREACHABLE, "NoExecute"),
                                             (UNREACHABLE, "NoSchedule")])
    assert any(t.time_added for t in core.read_node("b").spec.taints)
    fake.sim.set_ready("b", True)
    eventually(lambda: taints(core, "b") == [])


def test_pods_leave_an_unreachable_node_only_after_their_toleration_seconds(
        cluster: tuple[FakeCluster, client.CoreV1Api]) -> None:
    fake, core = cluster
    fake.sim.add_node("a", 4)
    forever = [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}]
    longer = [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute",
               "tolerationSeconds": 3000}]
    for name, tolerations in (("default", None), ("forever", forever), ("longer", longer)):
        core.create_namespaced_pod("default", pod(name, "a", tolerations=tolerations))
    eventually(lambda: all(core.read_namespaced_pod(n, "default").status.phase == "Running"
                           for n in ("default", "forever", "longer")))
    cut = time.monotonic()
    fake.sim.set_ready("a", False)

    def deleting(name: str) -> bool:
        return core.read_namespaced_pod(name, "default").metadata.deletion_timestamp is not None

    eventually(lambda: deleting("default"))
    assert time.monotonic() - cut >= 300 * SETTINGS.toleration_seconds_scale * 0.9
    assert not deleting("longer") and not deleting("forever")
    eventually(lambda: deleting("longer"), timeout=60)
    assert not deleting("forever")
    assert core.read_namespaced_pod("default", "default")  # Terminating: its kubelet is gone


def test_a_pod_that_does_not_tolerate_the_taint_leaves_at_once(
        cluster: tuple[FakeCluster, client.CoreV1Api]) -> None:
    fake, core = cluster
    fake.sim.add_node("a", 4)
    core.create_namespaced_pod("default", pod("p", "a"))
    eventually(lambda: core.read_namespaced_pod("p", "default").status.phase == "Running")
    fake.sim.store.patch("nodes", "", "a", {"spec": {"taints": [
        {"key": "maintenance", "effect": "NoExecute"}]}}, "application/merge-patch+json")
    eventually(lambda: core.read_namespaced_pod("p", "default").metadata.deletion_timestamp)
