"""Conformance of the fake API server, checked with two independent clients: the
official `kubernetes` Python client and `kubectl` 1.32.

Each case states a behaviour of the real kube-apiserver that Voda relies on."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config, watch

from voda_testing.kube import FakeApiServer, Fault
from voda_testing.kube.harness import eventually

ROOT = Path(__file__).resolve().parent.parent
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


@pytest.fixture(scope="module")
def api_client(fake_api: FakeApiServer) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(str(fake_api.kubeconfig), client_configuration=configuration)
    configuration.retries = 0
    return client.ApiClient(configuration)


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def crds(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def pod(name: str, gated: bool = False, labels: dict[str, str] | None = None,
        gpus: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"containers": [container]}
    if gated:
        spec["schedulingGates"] = [{"name": "voda.io/placement"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def mpijob(name: str, workers: int = 2) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "w", "image": "horovod"}]}}
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": name},
            "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template},
                "Worker": {"replicas": workers, "template": template}}}}


def pytorchjob(name: str, workers: int = 2) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 4},
                     "pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": {
                         "spec": {"containers": [{"name": "pytorch", "image": "torch"}]}}}}}}


def status_of(exc: pytest.ExceptionInfo[client.ApiException]) -> dict[str, Any]:
    return json.loads(exc.value.body)


# ----- the official client ---------------------------------------------------------------
def test_create_get_list_with_label_and_field_selectors(core: client.CoreV1Api,
                                                        namespace: str) -> None:
    core.create_namespaced_pod(namespace, pod("a", labels={"app": "x", "tier": "1"}))
    core.create_namespaced_pod(namespace, pod("b", labels={"app": "y"}))
    assert core.read_namespaced_pod("a", namespace).metadata.labels["app"] == "x"
    names = lambda **kw: sorted(p.metadata.name for p in  # noqa: E731
                                core.list_namespaced_pod(namespace, **kw).items)
    assert names(label_selector="app=x") == ["a"]
    assert names(label_selector="app in (x,y),tier") == ["a"]
    assert names(label_selector="app!=x") == ["b"]
    assert names(label_selector="!tier") == ["b"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="status.phase=Pending") == ["a", "b"]
    assert names(field_selector="status.phase!=Running,status.phase!=Failed") == ["a", "b"]
    assert names(field_selector="status.phase!=Pending,metadata.name=a") == []
    assert names(field_selector="status.phase=Pending,status.phase!=Pending") == []
    with pytest.raises(client.ApiException) as missing:
        core.read_namespaced_pod("nope", namespace)
    assert missing.value.status == 404 and status_of(missing)["reason"] == "NotFound"
    with pytest.raises(client.ApiException) as twice:
        core.create_namespaced_pod(namespace, pod("a"))
    assert twice.value.status == 409 and status_of(twice)["reason"] == "AlreadyExists"
    with pytest.raises(client.ApiException) as bad_field:
        core.list_namespaced_pod(namespace, field_selector="spec.containers=x")
    assert bad_field.value.status == 400


def test_lists_come_in_pages_with_continue_tokens(core: client.CoreV1Api,
                                                  namespace: str) -> None:
    for i in range(5):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": f"c{i}"}})
    names, token = [], None
    while True:
        page = core.list_namespaced_config_map(namespace, limit=2, _continue=token)
        names += [c.metadata.name for c in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert names == [f"c{i}" for i in range(5)]


def test_a_filtered_page_reads_on_until_it_is_full(core: client.CoreV1Api,
                                                   namespace: str) -> None:
    for i in range(6):
        core.create_namespaced_config_map(namespace, {"metadata": {
            "name": f"c{i}", "labels": {"odd": str(i % 2)}}})
    pages, token = [], None
    while True:
        page = core.list_namespaced_config_map(namespace, limit=2, label_selector="odd=1",
                                               _continue=token)
        pages.append([c.metadata.name for c in page.items])
        assert page.metadata.remaining_item_count is None  # not told with a selector
        token = page.metadata._continue
        if not token:
            break
    assert pages == [["c1", "c3"], ["c5"]]
    assert core.list_namespaced_config_map(namespace, limit=2).metadata.remaining_item_count == 4


def test_lists_come_in_name_order_and_their_timings_are_kept(
        fake_api: FakeApiServer, core: client.CoreV1Api, namespace: str) -> None:
    for name in ("m", "b", "x"):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    assert [c.metadata.name for c in core.list_namespaced_config_map(namespace).items] == [
        "b", "m", "x"]
    core.delete_namespaced_config_map("m", namespace)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "a"}})
    assert [c.metadata.name for c in core.list_namespaced_config_map(namespace).items] == [
        "a", "b", "x"]
    (listed,) = [r for r in fake_api.requests if r.verb == "list"
                 and r.path == f"/api/v1/namespaces/{namespace}/configmaps"][-1:]
    timing = eventually(lambda: listed.timing)  # noted once the server's write returns
    assert 0 <= timing["built"] <= timing["sent"] and timing["bytes"] > 0


def test_every_write_moves_one_global_resource_version(core: client.CoreV1Api,
                                                       namespace: str) -> None:
    first = core.create_namespaced_pod(namespace, pod("a"))
    second = core.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}})
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
    listed = core.list_namespaced_pod(namespace)
    assert int(listed.metadata.resource_version) >= int(second.metadata.resource_version)


def test_put_and_merge_patch_with_a_stale_resource_version_are_409(
        crds: client.CustomObjectsApi, namespace: str) -> None:
    job = crds.create_namespaced_custom_object("kubeflow.org", "v2beta1", namespace,
                                               "mpijobs", mpijob("j"))
    stale = job["metadata"]["resourceVersion"]
    crds.patch_namespaced_custom_object("kubeflow.org", "v2beta1", namespace, "mpijobs", "j",
                                        {"metadata": {"labels": {"x": "1"}}},
                                        _content_type=MERGE)
    with pytest.raises(client.ApiException) as put:
        crds.replace_namespaced_custom_object("kubeflow.org", "v2beta1", namespace,
                                              "mpijobs", "j", job)
    assert put.value.status == 409 and status_of(put)["reason"] == "Conflict"
    with pytest.raises(client.ApiException) as patched:
        crds.patch_namespaced_custom_object(
            "kubeflow.org", "v2beta1", namespace, "mpijobs", "j",
            {"metadata": {"resourceVersion": stale},
             "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 3}}}}, _content_type=MERGE)
    assert patched.value.status == 409
    current = crds.get_namespaced_custom_object("kubeflow.org", "v2beta1", namespace,
                                                "mpijobs", "j")
    assert current["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    fresh = crds.patch_namespaced_custom_object(
        "kubeflow.org", "v2beta1", namespace, "mpijobs", "j",
        {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
         "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 3}}}}, _content_type=MERGE)
    assert fresh["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    assert fresh["metadata"]["generation"] == 2


def test_custom_resources_are_validated_and_pruned_against_the_crd_schema(
        crds: client.CustomObjectsApi, namespace: str) -> None:
    bad = mpijob("bad")
    bad["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = "two"
    with pytest.raises(client.ApiException) as invalid:
        crds.create_namespaced_custom_object("kubeflow.org", "v2beta1", namespace,
                                             "mpijobs", bad)
    assert invalid.value.status == 422
    causes = status_of(invalid)["details"]["causes"]
    assert causes[0]["field"] == "spec.mpiReplicaSpecs.Worker.replicas"
    extra = mpijob("extra")
    extra["spec"]["notAField"] = 1
    created = crds.create_namespaced_custom_object("kubeflow.org", "v2beta1", namespace,
                                                   "mpijobs", extra)
    assert "notAField" not in created["spec"]  # pruned, as a real server does
    strict = mpijob("strict")
    strict["spec"]["notAField"] = 1
    with pytest.raises(client.ApiException) as refused:
        crds.create_namespaced_custom_object("kubeflow.org", "v2beta1", namespace,
                                             "mpijobs", strict, field_validation="Strict")
    assert refused.value.status == 422 and "notAField" in status_of(refused)["message"]


def test_custom_resources_take_merge_and_json_patches_but_not_strategic_merge(
        crds: client.CustomObjectsApi, namespace: str) -> None:
    crds.create_namespaced_custom_object("kubeflow.org", "v2beta1", namespace, "mpijobs",
                                         mpijob("p"))
    with pytest.raises(client.ApiException) as strategic:
        crds.patch_namespaced_custom_object("kubeflow.org", "v2beta1", namespace, "mpijobs",
                                            "p", {"spec": {"slotsPerWorker": 2}},
                                            _content_type=STRATEGIC)
    assert strategic.value.status == 415
    patched = crds.patch_namespaced_custom_object(
        "kubeflow.org", "v2beta1", namespace, "mpijobs", "p",
        [{"op": "replace", "path": "/spec/mpiReplicaSpecs/Worker/replicas", "value": 5}],
        _content_type=JSON_PATCH)
    assert patched["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 5


def test_status_subresource_separates_spec_and_status_writes(
        crds: client.CustomObjectsApi, namespace: str) -> None:
    crds.create_namespaced_custom_object("kubeflow.org", "v2beta1", namespace, "mpijobs",
                                         mpijob("s"))
    conditions = [{"type": "Running", "status": "True"}]
    main = crds.patch_namespaced_custom_object(
        "kubeflow.org", "v2beta1", namespace, "mpijobs", "s",
        {"status": {"conditions": conditions}, "spec": {"slotsPerWorker": 2}},
        _content_type=MERGE)
    assert "status" not in main and main["spec"]["slotsPerWorker"] == 2
    status = crds.patch_namespaced_custom_object_status(
        "kubeflow.org", "v2beta1", namespace, "mpijobs", "s",
        {"status": {"conditions": conditions}, "spec": {"slotsPerWorker": 3}},
        _content_type=MERGE)
    assert status["status"]["conditions"] == conditions
    assert status["spec"]["slotsPerWorker"] == 2


def test_scale_subresource_of_pytorchjob(crds: client.CustomObjectsApi, namespace: str) -> None:
    crds.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs",
                                         pytorchjob("t", workers=2))
    scale = crds.get_namespaced_custom_object_scale("kubeflow.org", "v1", namespace,
                                                    "pytorchjobs", "t")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 2
    crds.patch_namespaced_custom_object_scale("kubeflow.org", "v1", namespace, "pytorchjobs",
                                              "t", {"spec": {"replicas": 3}},
                                              _content_type=MERGE)
    job = crds.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", "t")
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    with pytest.raises(client.ApiException) as negative:
        crds.patch_namespaced_custom_object_scale("kubeflow.org", "v1", namespace,
                                                  "pytorchjobs", "t", {"spec": {"replicas": -1}},
                                                  _content_type=MERGE)
    assert negative.value.status == 422


def test_scheduling_gates_may_only_be_removed_and_node_selector_only_added_while_gated(
        core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, pod("g", gated=True))
    with pytest.raises(client.ApiException) as new_gate:
        core.patch_namespaced_pod("g", namespace, {"spec": {"schedulingGates": [
            {"name": "voda.io/placement"}, {"name": "other"}]}}, _content_type=MERGE)
    assert new_gate.value.status == 422 and "only deletion" in status_of(new_gate)["message"]
    with pytest.raises(client.ApiException) as bind_gated:
        core.create_namespaced_pod_binding("g", namespace, client.V1Binding(
            metadata=client.V1ObjectMeta(name="g"),
            target=client.V1ObjectReference(kind="Node", name="n1")))
    assert bind_gated.value.status == 409
    assert "non-empty .spec.schedulingGates" in status_of(bind_gated)["message"]
    pinned = core.patch_namespaced_pod("g", namespace, {"spec": {
        "nodeSelector": {"kubernetes.io/hostname": "n1"}, "schedulingGates": None}},
        _content_type=MERGE)
    assert pinned.spec.node_selector == {"kubernetes.io/hostname": "n1"}
    assert not pinned.spec.scheduling_gates
    with pytest.raises(client.ApiException) as moved:
        core.patch_namespaced_pod("g", namespace, {"spec": {"nodeSelector": {
            "kubernetes.io/hostname": "n2"}}}, _content_type=MERGE)
    assert moved.value.status == 422
    with pytest.raises(client.ApiException) as node_name:
        core.patch_namespaced_pod("g", namespace, {"spec": {"nodeName": "n1"}},
                                  _content_type=MERGE)
    assert node_name.value.status == 422


def test_binding_sets_the_node_once(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, pod("b"))
    target = client.V1Binding(metadata=client.V1ObjectMeta(name="b"),
                              target=client.V1ObjectReference(kind="Node", name="n1"))
    # The client cannot parse the Status a binding returns; the write is what matters.
    core.create_namespaced_pod_binding("b", namespace, target, _preload_content=False)
    bound = core.read_namespaced_pod("b", namespace)
    assert bound.spec.node_name == "n1"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in bound.status.conditions)
    with pytest.raises(client.ApiException) as again:
        core.create_namespaced_pod_binding("b", namespace, target)
    assert again.value.status == 409 and "already assigned" in status_of(again)["message"]


def test_strategic_merge_patch_of_a_pod_merges_lists_by_key(core: client.CoreV1Api,
                                                             namespace: str) -> None:
    body = pod("s", gated=True)
    body["spec"]["schedulingGates"].append({"name": "other"})
    core.create_namespaced_pod(namespace, body)
    patched = core.patch_namespaced_pod("s", namespace, {
        "metadata": {"labels": {"a": "b"}},
        "spec": {"schedulingGates": [{"name": "other", "$patch": "delete"}]}})
    assert [g.name for g in patched.spec.scheduling_gates] == ["voda.io/placement"]
    assert patched.metadata.labels == {"a": "b"}


def test_delete_waits_for_finalizers_and_cascades_to_dependents(
        core: client.CoreV1Api, crds: client.CustomObjectsApi, namespace: str) -> None:
    owner = crds.create_namespaced_custom_object("kubeflow.org", "v2beta1", namespace,
                                                 "mpijobs", mpijob("o"))
    ref = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "o",
           "uid": owner["metadata"]["uid"], "controller": True}
    child = pod("o-worker-0")
    child["metadata"]["ownerReferences"] = [ref]
    core.create_namespaced_pod(namespace, child)
    kept = core.create_namespaced_config_map(namespace, {"metadata": {
        "name": "kept", "ownerReferences": [ref], "finalizers": ["test/hold"]}})
    crds.delete_namespaced_custom_object("kubeflow.org", "v2beta1", namespace, "mpijobs", "o")
    with pytest.raises(client.ApiException):
        core.read_namespaced_pod("o-worker-0", namespace)  # cascaded (background)
    held = core.read_namespaced_config_map("kept", namespace)
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("kept", namespace, {"metadata": {"finalizers": None}},
                                     _content_type=MERGE)
    with pytest.raises(client.ApiException) as gone:
        core.read_namespaced_config_map("kept", namespace)
    assert gone.value.status == 404 and kept.metadata.name == "kept"


def test_orphan_deletion_keeps_dependents_without_the_owner_reference(
        core: client.CoreV1Api, crds: client.CustomObjectsApi, namespace: str) -> None:
    owner = crds.create_namespaced_custom_object("kubeflow.org", "v2beta1", namespace,
                                                 "mpijobs", mpijob("o"))
    child = pod("o-worker-0")
    child["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v2beta1",
                                             "kind": "MPIJob", "name": "o",
                                             "uid": owner["metadata"]["uid"]}]
    core.create_namespaced_pod(namespace, child)
    crds.delete_namespaced_custom_object("kubeflow.org", "v2beta1", namespace, "mpijobs", "o",
                                         propagation_policy="Orphan")
    assert not core.read_namespaced_pod("o-worker-0", namespace).metadata.owner_references


def test_a_dependent_created_after_its_owner_was_deleted_is_collected(
        core: client.CoreV1Api, crds: client.CustomObjectsApi, namespace: str) -> None:
    # A controller that read its owner just before the deletion still creates the dependent;
    # the garbage collector deletes it, as it does any object whose owners are all gone.
    owner = crds.create_namespaced_custom_object("kubeflow.org", "v2beta1", namespace,
                                                 "mpijobs", mpijob("o"))
    crds.delete_namespaced_custom_object("kubeflow.org", "v2beta1", namespace, "mpijobs", "o")
    late = pod("o-worker-0")
    late["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v2beta1",
                                            "kind": "MPIJob", "name": "o",
                                            "uid": owner["metadata"]["uid"]}]
    core.create_namespaced_pod(namespace, late)
    with pytest.raises(client.ApiException) as gone:
        core.read_namespaced_pod("o-worker-0", namespace)
    assert gone.value.status == 404
    # One owner still there keeps it.
    other = crds.create_namespaced_custom_object("kubeflow.org", "v2beta1", namespace,
                                                 "mpijobs", mpijob("p"))
    late["metadata"]["ownerReferences"].append({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "p",
        "uid": other["metadata"]["uid"]})
    core.create_namespaced_pod(namespace, late)
    kept = core.read_namespaced_pod("o-worker-0", namespace)
    # Losing that owner too (a write that drops it) collects it.
    kept.metadata.owner_references = kept.metadata.owner_references[:1]
    core.replace_namespaced_pod("o-worker-0", namespace, kept)
    with pytest.raises(client.ApiException) as collected:
        core.read_namespaced_pod("o-worker-0", namespace)
    assert collected.value.status == 404


def test_a_bound_pod_is_deleted_gracefully(core: client.CoreV1Api, namespace: str,
                                           fake_api: FakeApiServer) -> None:
    core.create_namespaced_pod(namespace, pod("r"))
    fake_api.store.bind(namespace, "r", "n1")
    core.delete_namespaced_pod("r", namespace)
    terminating = core.read_namespaced_pod("r", namespace)
    assert terminating.metadata.deletion_timestamp is not None
    core.delete_namespaced_pod("r", namespace, grace_period_seconds=0)
    with pytest.raises(client.ApiException):
        core.read_namespaced_pod("r", namespace)


def test_watch_resumes_from_a_resource_version_with_bookmarks(
        core: client.CoreV1Api, namespace: str) -> None:
    start = core.create_namespaced_pod(namespace, pod("w0")).metadata.resource_version
    core.create_namespaced_pod(namespace, pod("w1", labels={"keep": "1"}))
    core.create_namespaced_pod(namespace, pod("w2"))

    def later() -> None:
        time.sleep(0.3)
        core.patch_namespaced_pod("w1", namespace, {"metadata": {"labels": {"keep": None}}},
                                  _content_type=MERGE)

    threading.Thread(target=later).start()
    began = time.monotonic()
    events = [(e["type"], e["raw_object"]["metadata"].get("name"))
              for e in watch.Watch().stream(core.list_namespaced_pod, namespace,
                                            label_selector="keep=1", resource_version=start,
                                            timeout_seconds=1, allow_watch_bookmarks=True)]
    assert time.monotonic() - began < 5  # timeoutSeconds ends the stream
    assert events[0] == ("ADDED", "w1")  # replayed from the resource version
    assert ("DELETED", "w1") in events  # left the selection
    assert ("BOOKMARK", None) in events


def test_a_watch_from_a_compacted_resource_version_is_410_gone(
        core: client.CoreV1Api, namespace: str, fake_api: FakeApiServer) -> None:
    old = core.create_namespaced_pod(namespace, pod("c")).metadata.resource_version
    core.create_namespaced_pod(namespace, pod("d"))
    fake_api.store.compact()
    with pytest.raises(client.ApiException) as gone:
        list(watch.Watch().stream(core.list_namespaced_pod, namespace, resource_version=old,
                                  timeout_seconds=1))
    assert gone.value.status == 410


def test_injected_faults_answer_with_their_status(core: client.CoreV1Api, namespace: str,
                                                  fake_api: FakeApiServer) -> None:
    fake_api.add_fault(Fault(429, verb="list", resource="pods", times=1, retry_after=2))
    fake_api.add_fault(Fault(500, verb="create", resource="pods", times=2))
    with pytest.raises(client.ApiException) as throttled:
        core.list_namespaced_pod(namespace)
    assert throttled.value.status == 429 and throttled.value.headers["Retry-After"] == "2"
    for _ in range(2):
        with pytest.raises(client.ApiException) as failed:
            core.create_namespaced_pod(namespace, pod("f"))
        assert failed.value.status == 500
    assert core.create_namespaced_pod(namespace, pod("f")).metadata.name == "f"
    assert core.list_namespaced_pod(namespace).items


@pytest.mark.parametrize("mode", ["refuse", "hang"])
def test_an_outage_makes_the_server_unreachable_until_it_ends(
        core: client.CoreV1Api, namespace: str, fake_api: FakeApiServer, mode: str) -> None:
    with fake_api.outage(mode), pytest.raises(urllib3.exceptions.HTTPError):
        core.list_namespaced_pod(namespace, _request_timeout=1)
    assert core.list_namespaced_pod(namespace, _request_timeout=5).items == []


# ----- kubectl ---------------------------------------------------------------------------------
def kubectl(kubeconfig: Path, namespace: str, *args: str, stdin: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, *args],
                          capture_output=True, text=True, input=stdin, timeout=60)




def test_kubectl_creates_applies_patches_scales_and_deletes(kubeconfig: Path,
                                                            namespace: str) -> None:
    mpi = ROOT / "examples" / "jobs" / "mpijob.yaml"
    torch = ROOT / "examples" / "jobs" / "pytorchjob.yaml"
    assert kubectl(kubeconfig, namespace, "create", "-f", str(mpi)).returncode == 0
    replicas = kubectl(kubeconfig, namespace, "get", "mpijob", "tf-mnist", "-o",
                       "jsonpath={.spec.mpiReplicaSpecs.Worker.replicas}")
    assert replicas.stdout == "2"
    patched = kubectl(kubeconfig, namespace, "patch", "mpijob", "tf-mnist", "--type=merge",
                      "-p", '{"spec":{"mpiReplicaSpecs":{"Worker":{"replicas":4}}}}')
    assert patched.returncode == 0, patched.stderr
    assert kubectl(kubeconfig, namespace, "apply", "-f", str(torch)).returncode == 0
    again = kubectl(kubeconfig, namespace, "apply", "-f", str(torch))
    assert "unchanged" in again.stdout
    assert kubectl(kubeconfig, namespace, "scale", "pytorchjob", "bert-finetune",
                   "--replicas=3").returncode == 0
    listed = json.loads(kubectl(kubeconfig, namespace, "get", "pytorchjobs,mpijobs", "-o",
                                "json").stdout)
    sizes = {i["kind"]: (i["spec"].get("pytorchReplicaSpecs") or i["spec"]["mpiReplicaSpecs"])
             ["Worker"]["replicas"] for i in listed["items"]}
    assert sizes == {"PyTorchJob": 3, "MPIJob": 4}
    bad = kubectl(kubeconfig, namespace, "create", "-f", "-", stdin=json.dumps(
        {**mpijob("bad"), "spec": {"slotsPerWorker": "x", "mpiReplicaSpecs": {}}}))
    assert bad.returncode != 0 and "slotsPerWorker" in bad.stderr
    assert kubectl(kubeconfig, namespace, "delete", "mpijob", "tf-mnist").returncode == 0
    assert "NotFound" in kubectl(kubeconfig, namespace, "get", "mpijob", "tf-mnist").stderr


def test_kubectl_selects_labels_and_watches(kubeconfig: Path, namespace: str,
                                            core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(namespace, pod("a", labels={"app": "x"}))
    core.create_namespaced_pod(namespace, pod("b", labels={"app": "y"}))
    selected = kubectl(kubeconfig, namespace, "get", "pods", "-l", "app=x", "-o", "name")
    assert selected.stdout.split() == ["pod/a"]
    watcher = subprocess.Popen(["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace,
                                "get", "pods", "--watch-only", "-o", "name"],
                               stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)
        core.create_namespaced_pod(namespace, pod("c"))
        time.sleep(1.0)
    finally:
        watcher.terminate()
        out, _ = watcher.communicate(timeout=10)
    assert "pod/c" in out.split()
    gated = kubectl(kubeconfig, namespace, "patch", "pod", "a", "--type=merge", "-p",
                    '{"spec":{"schedulingGates":[{"name":"late"}]}}')
    assert gated.returncode != 0 and "only deletion" in gated.stderr


def configmap_yaml(name: str) -> str:
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n"


def test_a_write_past_its_timeout_parameter_is_answered_504_and_not_applied(
        kubeconfig: Path, namespace: str, fake_api: FakeApiServer) -> None:
    """kube-apiserver's request deadline: `?timeout=` (which kubectl's --request-timeout
    and client-go send) bounds the request; a write held up past it is not stored."""
    fake_api.add_fault(Fault(0, verb="create", resource="configmaps", delay=1.0))
    late = kubectl(kubeconfig, namespace, "--request-timeout=300ms", "create", "-f", "-",
                   stdin=configmap_yaml("late"))
    assert late.returncode != 0
    sent = [r for r in fake_api.requests if r.verb == "create" and r.resource == "configmaps"]
    assert "timeout=300ms" in sent[-1].query
    eventually(lambda: not fake_api.in_flight)  # the held-up create has been answered
    assert fake_api.store.list("configmaps", namespace)[0] == []
    bad = kubectl(kubeconfig, namespace, "get", "--raw",
                  f"/api/v1/namespaces/{namespace}/configmaps?timeout=soon")
    assert "invalid timeout specified in the request URL" in bad.stderr
    fake_api.add_fault(Fault(0, verb="create", resource="configmaps", delay=0.2))
    assert kubectl(kubeconfig, namespace, "--request-timeout=5s", "create", "-f", "-",
                   stdin=configmap_yaml("in-time")).returncode == 0
    assert [c["metadata"]["name"] for c in fake_api.store.list("configmaps", namespace)[0]
            ] == ["in-time"]
