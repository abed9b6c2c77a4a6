"""Conformance of the stand-in Kubeflow operators (mpi-operator v0.8.2, training operator
release-1.9) and of what each kind of installation serves, checked through the official
`kubernetes` client and `kubectl`: each case states what the real operator does."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from voda_testing.kube.cluster.horovod import ElasticLauncher
from voda_testing.kube.harness import FakeCluster, eventually

NS = "default"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    # kubectl sends its token over TLS only
    with FakeCluster.running(tmp_path, nodes=1, tls=True) as c:
        yield c


def api_client(cluster: FakeCluster) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(str(cluster.kubeconfig), client_configuration=configuration)
    configuration.retries = 0
    return client.ApiClient(configuration)


def custom(cluster: FakeCluster) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client(cluster))


def kubectl(cluster: FakeCluster, *args: str, stdin: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig), "-n", NS, *args],
                          capture_output=True, text=True, input=stdin, timeout=60)


def pytorchjob(name: str = "pt", container: str = "pytorch", workers: int = 2,
               elastic: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 1,
                                       "maxReplicas": 4, **(elastic or {})},
                     "pytorchReplicaSpecs": {"Worker": {
                         "replicas": workers, "restartPolicy": "OnFailure",
                         "template": {"spec": {"containers": [
                             {"name": container, "image": "torch",
                              "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}}}


def mpijob(name: str = "mpi", workers: int = 2, launcher: bool = True,
           worker_policy: str | None = None, launcher_command: list[str] | None = None,
           launcher_env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    worker: dict[str, Any] = {"replicas": workers, "template": {"spec": {"containers": [
        {"name": "w", "image": "horovod", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}
    if worker_policy:
        worker["restartPolicy"] = worker_policy
    specs: dict[str, Any] = {"Worker": worker}
    if launcher:
        specs["Launcher"] = {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "l", "image": "horovod", "env": launcher_env or [],
             "command": launcher_command or ["horovodrun", "--min-np", "1", "python", "t.py"]
             }]}}}
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
            "spec": {"mpiReplicaSpecs": specs}}


def create(cluster: FakeCluster, obj: dict[str, Any]) -> dict[str, Any]:
    group, version = obj["apiVersion"].split("/")
    plural = obj["kind"].lower() + "s"
    return custom(cluster).create_namespaced_custom_object(group, version, NS, plural,
                                                           copy.deepcopy(obj))


def pods(cluster: FakeCluster, prefix: str) -> dict[str, dict[str, Any]]:
    items, _ = cluster.server.store.list("pods", NS)
    return {p["metadata"]["name"]: p for p in items if p["metadata"]["name"].startswith(prefix)}


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def condition(obj: dict[str, Any], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


# ----- the training operator's webhook --------------------------------------------------------
WEBHOOK = ('admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied '
           "the request: ")


@pytest.mark.parametrize("change,message", [
    ({"container": "worker"}, "spec.pytorchReplicaSpecs[Worker].template.spec.containers: "
     "Required value: must have at least one container with name pytorch"),
    ({"name": "1-job"}, 'metadata.name: Invalid value: "1-job": should match: a DNS-1035 '
     "label must consist of lower case alphanumeric characters or '-', start with an "
     "alphabetic character"),
], ids=["no container named pytorch", "a name that is no DNS-1035 label"])
def test_the_pytorchjob_webhook_denies_in_the_operators_words(
        cluster: FakeCluster, change: dict[str, str], message: str) -> None:
    with pytest.raises(client.ApiException) as denied:
        create(cluster, pytorchjob(**change))
    assert denied.value.status == 403
    assert WEBHOOK + message in json.loads(denied.value.body)["message"]
    assert cluster.server.store.list("pytorchjobs", NS)[0] == []


def test_the_webhook_wants_one_master_and_a_worker_with_an_elastic_policy(
        cluster: FakeCluster) -> None:
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"] = {"Master": {
        "replicas": 2, "template": job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]}}
    with pytest.raises(client.ApiException) as denied:
        create(cluster, job)
    assert ("[spec.pytorchReplicaSpecs[Worker]: Required value: must be configured if "
            "elastic policy is used, spec.pytorchReplicaSpecs[Master].replicas: Forbidden: "
            "must be 1]") in json.loads(denied.value.body)["message"]


def test_kubectl_sees_the_webhook_deny_an_update(cluster: FakeCluster) -> None:
    create(cluster, pytorchjob())
    patched = kubectl(cluster, "patch", "pytorchjob", "pt", "--type=json", "-p",
                      '[{"op": "replace", "path": "/spec/pytorchReplicaSpecs/Worker/template/'
                      'spec/containers/0/name", "value": "main"}]')
    assert patched.returncode != 0
    assert "must have at least one container with name pytorch" in patched.stderr


# ----- the CRDs' defaults -----------------------------------------------------------------------
def test_the_server_applies_the_crds_defaults_on_create(cluster: FakeCluster) -> None:
    job = mpijob(launcher=True)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"] = [
        {"containerPort": 22}]
    stored = create(cluster, job)
    spec = stored["spec"]
    assert (spec["slotsPerWorker"], spec["mpiImplementation"], spec["sshAuthMountPath"],
            spec["launcherCreationPolicy"], spec["runLauncherAsWorker"]) == (
        1, "OpenMPI", "/root/.ssh", "AtStartup", False)
    port = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"][0]
    assert port == {"containerPort": 22, "protocol": "TCP"}
    assert "cleanPodPolicy" not in (spec.get("runPolicy") or {})  # the operator's default


# ----- mpi-operator -------------------------------------------------------------------------------
def events_of(cluster: FakeCluster, name: str) -> list[dict[str, Any]]:
    items, _ = cluster.server.store.list("events", NS)
    return [e for e in items if e["involvedObject"]["name"] == name]


@pytest.mark.parametrize("job,message", [
    (mpijob(worker_policy="Always"), 'spec.mpiReplicaSpecs[Worker].restartPolicy: Unsupported '
     'value: "Always": supported values: "Never", "OnFailure"'),
    (mpijob(launcher=False), "spec.mpiReplicaSpecs[Launcher]: Required value: must have "
     "Launcher replica spec"),
    (mpijob(name="m" * 56, workers=3), 'metadata.name: Invalid value: "' + "m" * 56 + '": will '
     'not able to create pod and service with invalid DNS label "' + "m" * 56 + '-worker-2": '
     "must be no more than 63 characters"),
], ids=["worker restartPolicy Always", "no launcher", "a worker hostname over 63"])
def test_mpi_operator_answers_an_invalid_mpijob_with_an_event_and_nothing_else(
        cluster: FakeCluster, job: dict[str, Any], message: str) -> None:
    create(cluster, job)  # accepted: mpi-operator has no webhook
    name = job["metadata"]["name"]
    event = eventually(lambda: events_of(cluster, name))[0]
    assert (event["type"], event["reason"]) == ("Warning", "ValidationError")
    assert event["message"].startswith("Found validation errors: ")
    assert message in event["message"]
    cluster.sim.wait_idle()
    assert not pods(cluster, name) and not cluster.server.store.try_get("services", NS, name)


def test_mpi_operator_names_one_service_after_the_job_and_hosts_under_it(
        cluster: FakeCluster) -> None:
    create(cluster, mpijob("hv"))
    eventually(lambda: len(pods(cluster, "hv-worker")) == 2)
    service = cluster.server.store.get("services", NS, "hv")
    assert service["spec"]["clusterIP"] == "None"
    assert cluster.server.store.try_get("services", NS, "hv-worker") is None
    worker = pods(cluster, "hv-worker")["hv-worker-1"]
    assert (worker["spec"]["hostname"], worker["spec"]["subdomain"]) == ("hv-worker-1", "hv")
    assert worker["spec"]["restartPolicy"] == "Never"  # the operator's default for workers
    config_map = cluster.server.store.get("configmaps", NS, "hv-config")
    assert config_map["data"]["hostfile"] == (
        "hv-worker-0.hv.default.svc slots=1\nhv-worker-1.hv.default.svc slots=1\n")
    eventually(lambda: cluster.server.store.get("configmaps", NS, "hv-config")["data"][
        "discover_hosts.sh"] == "#!/bin/sh\necho hv-worker-0.hv.default.svc\n"
                                "echo hv-worker-1.hv.default.svc\n")


def test_the_launcher_is_a_batch_job_whose_pod_has_a_generated_name(
        cluster: FakeCluster) -> None:
    create(cluster, mpijob("hv"))
    launchers = eventually(lambda: [p for n, p in pods(cluster, "hv-launcher-").items()])
    (pod,) = launchers
    batch = cluster.server.store.get("jobs.batch", NS, "hv-launcher")
    assert len(pod["metadata"]["name"]) == len("hv-launcher-") + 5
    assert pod["metadata"]["ownerReferences"][0]["uid"] == batch["metadata"]["uid"]
    assert cluster.server.store.try_get("pods", NS, "hv-launcher") is None


def test_an_mpijob_is_running_only_once_the_launcher_and_every_worker_run(
        cluster: FakeCluster) -> None:
    cluster.sim.remove_node("n0")
    cluster.sim.add_node("small", 1)
    create(cluster, mpijob("hv"))
    eventually(lambda: any(p["status"]["phase"] == "Running"
                           for p in pods(cluster, "hv-launcher-").values()))
    eventually(lambda: sum(p["status"]["phase"] == "Running"
                           for p in pods(cluster, "hv-worker").values()) == 1)
    cluster.sim.wait_idle()
    assert not condition(cluster.server.store.get("mpijobs", NS, "hv"), "Running")
    cluster.sim.add_node("more", 1)
    eventually(lambda: condition(cluster.server.store.get("mpijobs", NS, "hv"), "Running"))


def test_mpi_operator_leaves_a_failed_worker_failed(cluster: FakeCluster) -> None:
    create(cluster, mpijob("hv"))
    eventually(lambda: condition(cluster.server.store.get("mpijobs", NS, "hv"), "Running"))
    worker = pods(cluster, "hv-worker")["hv-worker-1"]
    cluster.sim.set_phase(worker, "Failed", "Error", "exit code 1")
    for _ in range(20):
        cluster.sim.wait_idle()
        now = pods(cluster, "hv-worker")["hv-worker-1"]
        assert now["metadata"]["uid"] == worker["metadata"]["uid"]
        assert now["status"]["phase"] == "Failed"


# ----- the training operator ----------------------------------------------------------------------
def test_the_training_operator_gives_torchrun_the_pytorch_containers_port(
        cluster: FakeCluster) -> None:
    create(cluster, pytorchjob("pt"))
    worker = eventually(lambda: pods(cluster, "pt-worker").get("pt-worker-0"))
    env = env_of(worker)
    assert env["PET_RDZV_ENDPOINT"] == "pt-worker-0:23456"
    assert env["PET_NNODES"] == "1:4"
    assert "PET_MAX_RESTARTS" not in env  # only when elasticPolicy.maxRestarts is set
    assert worker["spec"]["containers"][0]["ports"][0]["name"] == "pytorchjob-port"
    job = pytorchjob("pq", elastic={"maxRestarts": 7})
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "ports"] = [{"name": "pytorchjob-port", "containerPort": 29500}]
    create(cluster, job)
    env = env_of(eventually(lambda: pods(cluster, "pq-worker").get("pq-worker-0")))
    assert (env["PET_RDZV_ENDPOINT"], env["PET_MAX_RESTARTS"]) == ("pq-worker-0:29500", "7")


def test_the_training_operator_makes_a_service_per_replica_and_an_hpa_from_metrics(
        cluster: FakeCluster) -> None:
    metrics = [{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 80}}}]
    create(cluster, pytorchjob("pt", workers=3, elastic={"metrics": metrics}))
    eventually(lambda: all(cluster.server.store.try_get("services", NS, f"pt-worker-{i}")
                           for i in range(3)))
    hpa = eventually(lambda: cluster.server.store.try_get(
        "horizontalpodautoscalers.autoscaling", NS, "pt"))
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "PyTorchJob"
    assert hpa["spec"]["metrics"] == metrics
    custom(cluster).patch_namespaced_custom_object(
        "kubeflow.org", "v1", NS, "pytorchjobs", "pt",
        {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}}})
    eventually(lambda: cluster.server.store.try_get("services", NS, "pt-worker-2") is None)
    create(cluster, pytorchjob("plain"))
    cluster.sim.wait_idle()
    assert cluster.server.store.try_get("horizontalpodautoscalers.autoscaling", NS,
                                        "plain") is None


def test_torchrun_restarts_the_group_when_a_peer_leaves_until_max_restarts(
        cluster: FakeCluster) -> None:
    create(cluster, pytorchjob("pt", workers=3))
    eventually(lambda: sum(p["status"]["phase"] == "Running"
                           for p in pods(cluster, "pt-worker").values()) == 3)
    custom(cluster).patch_namespaced_custom_object(
        "kubeflow.org", "v1", NS, "pytorchjobs", "pt",
        {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}})
    # No maxRestarts: torchrun's default is 0, so both survivors exit and restart.
    eventually(lambda: all(
        (p["status"].get("containerStatuses") or [{}])[0].get("restartCount") == 1
        for n, p in pods(cluster, "pt-worker").items() if n != "pt-worker-2"))


# ----- installed kinds -----------------------------------------------------------------------
@pytest.mark.parametrize("crds,served", [
    ("all", {("mpijobs", "v2beta1"), ("pytorchjobs", "v1")}),
    ("mpi-operator", {("mpijobs", "v2beta1")}),
    ("training-operator", {("pytorchjobs", "v1")}),
    ("training-operator-with-mpijob-v1", {("pytorchjobs", "v1"), ("mpijobs", "v1")}),
    ("mpi-operator-v0.4", {("mpijobs", "v2beta1")}),
])
def test_discovery_shows_the_kinds_installed(tmp_path: Path, crds: str,
                                             served: set[tuple[str, str]]) -> None:
    c = FakeCluster.start(tmp_path, crds=crds)
    try:
        apis = client.ApisApi(api_client(c)).get_api_versions()
        (group,) = [g for g in apis.groups if g.name == "kubeflow.org"]
        found = set()
        for version in group.versions:
            listing = custom(c).get_api_resources("kubeflow.org", version.version)
            found |= {(r.name, version.version) for r in listing.resources if "/" not in r.name}
        assert found == served
    finally:
        c.stop()


def test_mpi_operator_v0_4s_crd_prunes_scheduling_gates(tmp_path: Path) -> None:
    c = FakeCluster.start(tmp_path, crds="mpi-operator-v0.4", tls=True)
    try:
        job = mpijob("old")
        job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["schedulingGates"] = [
            {"name": "voda.io/placement"}]
        result = kubectl(c, "create", "--validate=warn", "-f", "-", stdin=json.dumps(job))
        assert result.returncode == 0, result.stderr
        assert "unknown field" in result.stderr and "schedulingGates" in result.stderr
        stored = c.server.store.get("mpijobs", NS, "old")
        assert "schedulingGates" not in stored["spec"]["mpiReplicaSpecs"]["Worker"][
            "template"]["spec"]
    finally:
        c.stop()


# ----- Horovod's elastic driver -------------------------------------------------------------
def driver(*flags: str, timeout: str = "5") -> ElasticLauncher:
    return ElasticLauncher.of({"command": ["horovodrun", "--min-np", "2", *flags, "python"],
                               "env": [{"name": "HOROVOD_ELASTIC_TIMEOUT", "value": timeout}]})


def test_horovod_sees_the_host_list_only_after_the_configmap_delay() -> None:
    d = driver()
    d.write_script(frozenset({"a", "b"}), now=0.0, delay=30.0)
    assert d.step({"a", "b"}, now=10.0) == set()
    assert d.step({"a", "b"}, now=30.0) == {"a", "b"}


def test_horovod_blacklists_a_host_whose_worker_died_for_good_without_a_cooldown() -> None:
    d = driver(timeout="10000")
    d.write_script(frozenset({"a", "b"}), 0.0, 0.0)
    assert d.step({"a", "b"}, 1.0) == {"a", "b"}
    assert d.step({"a"}, 2.0) == {"a"}  # b's process died while listed
    assert d.step({"a", "b"}, 1000.0) == {"a"}
    cooled = driver("--blacklist-cooldown-range", "10", "100")
    cooled.write_script(frozenset({"a", "b"}), 0.0, 0.0)
    cooled.step({"a", "b"}, 1.0)
    cooled.step({"a"}, 2.0)
    assert cooled.step({"a", "b"}, 5.0) == {"a"}
    assert cooled.step({"a", "b"}, 12.0) == {"a", "b"}


def test_horovod_fails_after_the_elastic_timeout_without_min_np_hosts() -> None:
    d = driver(timeout="5")
    d.write_script(frozenset({"a"}), 0.0, 0.0)
    d.step({"a"}, 1.0)
    assert d.failure is None
    d.step({"a"}, 6.5)
    assert d.failure is not None and "at least 2 Horovod processes" in d.failure
    assert driver().timeout == 5.0 and ElasticLauncher.of({}).timeout == 600.0


def test_a_launcher_without_min_np_hosts_fails_the_mpijob_after_the_elastic_timeout(
        cluster: FakeCluster) -> None:
    cluster.sim.remove_node("n0")
    cluster.sim.add_node("small", 1)
    create(cluster, mpijob("hv", launcher_command=["horovodrun", "--min-np", "2", "python"],
                           launcher_env=[{"name": "HOROVOD_ELASTIC_TIMEOUT", "value": "1"}]))
    failed = eventually(lambda: [c for c in (cluster.server.store.get(
        "mpijobs", NS, "hv").get("status") or {}).get("conditions") or []
        if c["type"] == "Failed" and c["status"] == "True"])
    assert failed[0]["reason"] == "BackoffLimitExceeded/Error"
    assert "run at least 2 Horovod processes" in failed[0]["message"]
    assert condition(cluster.server.store.get("jobs.batch", NS, "hv-launcher"), "Failed")
