"""Conformance of the fake API server's control plane, through the official client: the
Binding's preconditions, eviction under a PodDisruptionBudget, DefaultTolerationSeconds,
and a watch cache that forgets (410 Gone without a compaction)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch

from voda.backends.kubernetes.api import Kind, KubeApi
from voda.backends.kubernetes.informer import Informer
from voda_testing.kube import FakeApiServer, Store
from voda_testing.kube.harness import FakeCluster, eventually
from voda_testing.kube.store import WatchWindow


def connect(kubeconfig: Path | str) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(str(kubeconfig), client_configuration=configuration)
    configuration.retries = 0
    return client.ApiClient(configuration)


@pytest.fixture(scope="module")
def core(fake_api: FakeApiServer) -> client.CoreV1Api:
    return client.CoreV1Api(connect(fake_api.kubeconfig))  # type: ignore[attr-defined]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    fake = FakeCluster.start(tmp_path)
    yield fake
    fake.stop()


def pod(name: str, labels: dict[str, str] | None = None,
        tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def status_of(error: pytest.ExceptionInfo[client.ApiException]) -> dict[str, Any]:
    return json.loads(error.value.body)  # type: ignore[no-any-return]


def binding(name: str, node: str, uid: str | None = None,
            resource_version: str | None = None) -> client.V1Binding:
    return client.V1Binding(
        metadata=client.V1ObjectMeta(name=name, uid=uid, resource_version=resource_version),
        target=client.V1ObjectReference(kind="Node", name=node))


# ----- pods/binding ------------------------------------------------
def test_a_binding_whose_uid_is_not_the_pods_is_a_conflict(core: client.CoreV1Api,
                                                            namespace: str) -> None:
    created = core.create_namespaced_pod(namespace, pod("u"))
    with pytest.raises(client.ApiException) as wrong:
        core.create_namespaced_pod_binding("u", namespace, binding("u", "n1", uid="not-it"))
    assert wrong.value.status == 409 and status_of(wrong)["reason"] == "Conflict"
    assert status_of(wrong)["message"] == (
        f'Operation cannot be fulfilled on pods "u": StorageError: invalid object, Code: 4, '
        f"Key: /registry/pods/{namespace}/u, ResourceVersion: 0, AdditionalErrorMsg: "
        f"Precondition failed: UID in precondition: not-it, UID in object meta: "
        f"{created.metadata.uid}")
    assert not core.read_namespaced_pod("u", namespace).spec.node_name
    core.create_namespaced_pod_binding("u", namespace, binding(
        "u", "n1", uid=created.metadata.uid), _preload_content=False)
    assert core.read_namespaced_pod("u", namespace).spec.node_name == "n1"


def test_a_binding_with_a_stale_resource_version_is_a_conflict(core: client.CoreV1Api,
                                                               namespace: str) -> None:
    created = core.create_namespaced_pod(namespace, pod("r"))
    core.patch_namespaced_pod("r", namespace, {"metadata": {"labels": {"x": "1"}}})
    with pytest.raises(client.ApiException) as stale:
        core.create_namespaced_pod_binding("r", namespace, binding(
            "r", "n1", resource_version=created.metadata.resource_version))
    assert stale.value.status == 409
    assert (f"Precondition failed: ResourceVersion in precondition: "
            f"{created.metadata.resource_version}, ResourceVersion in object meta: "
            in status_of(stale)["message"])
    current = core.read_namespaced_pod("r", namespace).metadata.resource_version
    core.create_namespaced_pod_binding("r", namespace, binding(
        "r", "n1", resource_version=current), _preload_content=False)
    with pytest.raises(client.ApiException) as again:
        core.create_namespaced_pod_binding("r", namespace, binding("r", "n2"))
    assert again.value.status == 409
    assert status_of(again)["message"].endswith('pod r is already assigned to node "n1"')


# ----- DefaultTolerationSeconds ------------------------------------------------
def test_every_pod_gets_300_s_tolerations_of_not_ready_and_unreachable_nodes(
        core: client.CoreV1Api, namespace: str) -> None:
    plain = core.create_namespaced_pod(namespace, pod("t"))
    assert sorted((t.key, t.operator, t.effect, t.toleration_seconds)
                  for t in plain.spec.tolerations) == [
        ("node.kubernetes.io/not-ready", "Exists", "NoExecute", 300),
        ("node.kubernetes.io/unreachable", "Exists", "NoExecute", 300)]
    own = core.create_namespaced_pod(namespace, pod("o", tolerations=[
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
         "effect": "NoExecute", "tolerationSeconds": 5}]))
    assert sorted((t.key, t.toleration_seconds) for t in own.spec.tolerations) == [
        ("node.kubernetes.io/not-ready", 300), ("node.kubernetes.io/unreachable", 5)]
    everything = core.create_namespaced_pod(namespace, pod("e", tolerations=[
        {"operator": "Exists"}]))
    assert len(everything.spec.tolerations) == 1


# ----- pods/eviction and PodDisruptionBudgets ------------------------------------------------
def evict(core: client.CoreV1Api, namespace: str, name: str) -> None:
    core.create_namespaced_pod_eviction(name, namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace)))


def budget(name: str, selector: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name}, "spec": {"selector": selector, **spec}}


def allowed(policy: client.PolicyV1Api, name: str, namespace: str) -> int | None:
    status = policy.read_namespaced_pod_disruption_budget(name, namespace).status
    return status.disruptions_allowed if status is not None else None


def test_an_eviction_the_budget_does_not_allow_is_429(cluster: FakeCluster) -> None:
    api = connect(cluster.admin_kubeconfig)
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    ns = cluster.namespace
    cluster.sim.add_node("a", 8)
    for i in range(3):
        core.create_namespaced_pod(ns, pod(f"w{i}", labels={"app": "train"}))
    policy.create_namespaced_pod_disruption_budget(ns, budget(
        "keep-two", {"matchLabels": {"app": "train"}}, minAvailable=2))
    eventually(lambda: allowed(policy, "keep-two", ns) == 1)
    evict(core, ns, "w0")
    assert core.read_namespaced_pod("w0", ns).metadata.deletion_timestamp
    with pytest.raises(client.ApiException) as refused:
        evict(core, ns, "w1")
    assert refused.value.status == 429
    assert status_of(refused)["reason"] == "TooManyRequests"
    assert status_of(refused)["message"] == (
        "Cannot evict pod as it would violate the pod's disruption budget.")
    [cause] = status_of(refused)["details"]["causes"]
    assert cause["reason"] == "DisruptionBudget"
    # the healthy count is the controller's last (3 until it sees the eviction)
    assert re.fullmatch(r"The disruption budget keep-two needs 2 healthy pods and has "
                        r"[23] currently", cause["message"])
    assert not core.read_namespaced_pod("w1", ns).metadata.deletion_timestamp
    def counts() -> tuple[int, int, int]:
        status = policy.read_namespaced_pod_disruption_budget("keep-two", ns).status
        return status.current_healthy, status.desired_healthy, status.expected_pods

    eventually(lambda: counts() == (2, 2, 2))  # once the evicted pod is gone


def test_max_unavailable_and_pods_under_two_budgets(cluster: FakeCluster) -> None:
    api = connect(cluster.admin_kubeconfig)
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    ns = cluster.namespace
    cluster.sim.add_node("a", 8)
    for i in range(4):
        core.create_namespaced_pod(ns, pod(f"m{i}", labels={"app": "m", "i": str(i)}))
    policy.create_namespaced_pod_disruption_budget(ns, budget(
        "one-down", {"matchLabels": {"app": "m"}}, maxUnavailable="25%"))
    eventually(lambda: allowed(policy, "one-down", ns) == 1)
    policy.create_namespaced_pod_disruption_budget(ns, budget(
        "first", {"matchExpressions": [{"key": "i", "operator": "In", "values": ["0"]}]},
        minAvailable=0))
    with pytest.raises(client.ApiException) as two:
        evict(core, ns, "m0")
    assert two.value.status == 500
    assert "more than one PodDisruptionBudget" in status_of(two)["message"]
    evict(core, ns, "m1")
    with pytest.raises(client.ApiException) as refused:
        evict(core, ns, "m2")
    assert refused.value.status == 429


def test_a_budget_the_disruption_controller_has_not_seen_refuses_evictions(
        core: client.CoreV1Api, fake_api: FakeApiServer, namespace: str) -> None:
    policy = client.PolicyV1Api(connect(fake_api.kubeconfig))  # type: ignore[attr-defined]
    core.create_namespaced_pod(namespace, pod("p", labels={"app": "x"}))
    fake_api.store.patch("pods", namespace, "p", {"status": {"phase": "Running"}},
                         "application/merge-patch+json", subresource="status")
    policy.create_namespaced_pod_disruption_budget(namespace, budget(
        "new", {"matchLabels": {"app": "x"}}, minAvailable=0))
    with pytest.raises(client.ApiException) as refused:
        evict(core, namespace, "p")
    assert refused.value.status == 429
    assert status_of(refused)["details"]["causes"][0]["message"] == (
        "The disruption budget new is still being processed by the server.")
    pending = core.create_namespaced_pod(namespace, pod("q", labels={"app": "x"}))
    evict(core, namespace, pending.metadata.name)  # a Pending pod ignores budgets
    with pytest.raises(client.ApiException):
        core.read_namespaced_pod("q", namespace)


# ----- the watch cache ------------------------------------------------
@pytest.fixture
def small_window(tmp_path: Path) -> Iterator[FakeApiServer]:
    server = FakeApiServer(Store(window=WatchWindow(capacity=3, max_age_seconds=3600)),
                           bookmark_interval=0.2).start()
    server.kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")  # type: ignore
    yield server
    server.stop()


def test_a_watch_from_before_the_resources_window_is_410_gone(
        small_window: FakeApiServer) -> None:
    core = client.CoreV1Api(connect(small_window.kubeconfig))  # type: ignore[attr-defined]
    start = core.list_namespaced_pod("default").metadata.resource_version
    for i in range(4):  # one more than the window keeps
        core.create_namespaced_pod("default", pod(f"p{i}"))
    with pytest.raises(client.ApiException) as gone:
        list(watch.Watch().stream(core.list_namespaced_pod, "default",
                                  resource_version=start, timeout_seconds=1))
    assert gone.value.status == 410
    assert f"too old resource version: {start} (" in gone.value.reason + str(gone.value.body)
    # other resources keep their own window: nodes had no events since
    events = list(watch.Watch().stream(core.list_node, resource_version=start,
                                       timeout_seconds=1))
    assert events == []


def test_events_older_than_the_window_are_forgotten(tmp_path: Path) -> None:
    store = Store(window=WatchWindow(capacity=1000, max_age_seconds=0.3))
    start = store.rv
    store.create("configmaps", "default", {"metadata": {"name": "old"}})
    store.subscribe(start, lambda change: None, "configmaps")[1]()  # still kept
    eventually(lambda: store.oldest_watchable("configmaps") > start)
    with pytest.raises(Exception, match="too old resource version"):
        store.subscribe(start, lambda change: None, "configmaps")


def test_an_informer_away_for_longer_than_the_window_relists_by_itself(
        fake_api: FakeApiServer, namespace: str) -> None:
    api = KubeApi.connect(str(fake_api.kubeconfig), backoff=0.05, max_backoff=0.2)
    seen: dict[str, str] = {}
    informer = Informer(api, Kind("", "v1", "configmaps"),
                        lambda kind, obj, old: seen.__setitem__(obj["metadata"]["name"], kind),
                        namespace, backoff=0.05, max_backoff=0.2).start()
    try:
        assert informer.synced.wait(20)
        with fake_api.outage("refuse"):
            for i in range(fake_api.store.window.capacity + 5):  # the default window
                fake_api.store.create("configmaps", namespace, {"metadata": {"name": f"c{i}"}})
            errors = informer.errors
            eventually(lambda: informer.errors > errors)  # it found the server gone
        eventually(lambda: informer.relists == 2, timeout=60)
        eventually(lambda: len(seen) == fake_api.store.window.capacity + 5, timeout=60)
    finally:
        informer.stop()

