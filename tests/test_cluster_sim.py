"""The cluster simulator plays the controllers Voda works beside; these cases pin down
the behaviours of kube-scheduler, kubelets, mpi-operator and the training operator
that the Kubernetes backend depends on."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from voda_testing.kube import Store
from voda_testing.kube.cluster import (
    GPU,
    HOSTNAME,
    WORK_ANNOTATION,
    ClusterSimulator,
    GpuLedger,
    SimSettings,
)
from voda_testing.kube.patches import MERGE

FAST = SimSettings(tick_seconds=0.005, start_seconds=0.01, terminate_seconds=0.01,
                   image_pull_seconds=0.005, toleration_seconds_scale=0.05 / 300, speed=1.0)


@pytest.fixture
def sim() -> ClusterSimulator:
    simulator = ClusterSimulator(Store(), FAST)
    yield simulator
    simulator.stop()


def until(sim: ClusterSimulator, check: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sim.step()
        result = check()
        if result:
            return result
        time.sleep(0.005)
    raise AssertionError("condition not met in time")


def pod(name: str, gpus: int = 1, gated: bool = False, node: str | None = None,
        scheduler: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i", "resources": {
        "limits": {GPU: str(gpus)}}}]}
    if gated:
        spec["schedulingGates"] = [{"name": "voda.io/placement"}]
    if node:
        spec["nodeSelector"] = {HOSTNAME: node}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"metadata": {"name": name}, "spec": spec}


def get(sim: ClusterSimulator, kind: str, name: str, ns: str = "default") -> dict[str, Any]:
    return sim.store.try_get(kind, ns, name) or {}


def phase(sim: ClusterSimulator, name: str) -> str | None:
    return get(sim, "pods", name).get("status", {}).get("phase")


def node_of(sim: ClusterSimulator, name: str) -> str | None:
    return get(sim, "pods", name).get("spec", {}).get("nodeName")


def mpijob(name: str, workers: int, work: float = 0.3, clean: str = "Running"
           ) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "w", "image": "horovod", "resources": {
        "limits": {GPU: "1"}}}], "schedulingGates": [{"name": "voda.io/placement"}]}}
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": name, "annotations": {WORK_ANNOTATION: str(work)}},
            "spec": {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": clean},
                     "mpiReplicaSpecs": {
                         "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                             {"name": "l", "image": "horovod"}]}}},
                         "Worker": {"replicas": workers, "template": template}}}}


def pytorchjob(name: str, workers: int, work: float = 0.3) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "annotations": {WORK_ANNOTATION: str(work)}},
            "spec": {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 4},
                     "pytorchReplicaSpecs": {"Worker": {
                         "replicas": workers, "restartPolicy": "OnFailure",
                         "template": {"spec": {"containers": [{
                             "name": "pytorch", "image": "torch",
                             "resources": {"limits": {GPU: "1"}}}]}}}}}}


def ungate(sim: ClusterSimulator, name: str, node: str) -> None:
    sim.store.patch("pods", "default", name, {"spec": {
        "nodeSelector": {HOSTNAME: node}, "schedulingGates": None}}, MERGE)


def conditions(obj: dict[str, Any]) -> set[str]:
    return {c["type"] for c in obj.get("status", {}).get("conditions", [])
            if c.get("status") == "True"}


# ----- kube-scheduler and kubelets -----------------------------------------------------------
def test_scheduler_binds_ungated_pods_within_gpu_capacity(sim: ClusterSimulator) -> None:
    sim.add_node("a", gpus=2)
    for name in ("p1", "p2", "p3"):
        sim.store.create("pods", "default", pod(name, node="a"))
    until(sim, lambda: phase(sim, "p1") == "Running" and phase(sim, "p2") == "Running")
    assert node_of(sim, "p3") is None
    assert "Unschedulable" in str(get(sim, "pods", "p3")["status"]["conditions"])
    sim.store.delete("pods", "default", "p1")  # graceful: the kubelet finishes it
    until(sim, lambda: node_of(sim, "p3") == "a")
    assert not sim.ledger.violations


def test_gated_pods_wait_and_go_where_their_node_selector_says(sim: ClusterSimulator) -> None:
    sim.add_node("a", gpus=4)
    sim.add_node("b", gpus=4)
    sim.store.create("pods", "default", pod("g", gated=True))
    for _ in range(5):
        sim.step()
    assert node_of(sim, "g") is None
    ungate(sim, "g", "b")
    assert until(sim, lambda: node_of(sim, "g")) == "b"


@pytest.mark.parametrize("change", ["cordoned", "not ready", "tainted"])
def test_unusable_nodes_get_no_pods(sim: ClusterSimulator, change: str) -> None:
    sim.add_node("a", gpus=4, taints=[{"key": "gpu", "effect": "NoSchedule"}]
                 if change == "tainted" else None)
    if change == "cordoned":
        sim.cordon("a")
    elif change == "not ready":
        sim.set_ready("a", False)
    sim.store.create("pods", "default", pod("p"))
    for _ in range(10):
        sim.step()
    assert node_of(sim, "p") is None


def test_pods_of_another_scheduler_are_left_alone(sim: ClusterSimulator) -> None:
    sim.add_node("a", gpus=4)
    sim.store.create("pods", "default", pod("mine", scheduler="voda-scheduler"))
    sim.store.create("pods", "default", pod("default"))
    until(sim, lambda: node_of(sim, "default"))
    assert node_of(sim, "mine") is None


def test_a_not_ready_node_loses_its_pods_only_when_it_is_deleted(sim: ClusterSimulator) -> None:
    sim.add_node("a", gpus=4)
    sim.store.create("pods", "default", pod("p"))
    until(sim, lambda: phase(sim, "p") == "Running")
    sim.set_ready("a", False)
    until(sim, lambda: get(sim, "pods", "p")["metadata"].get("deletionTimestamp"))
    for _ in range(10):
        sim.step()
    assert get(sim, "pods", "p")  # stuck terminating: its kubelet is gone
    sim.remove_node("a")
    until(sim, lambda: not get(sim, "pods", "p"))


def test_the_ledger_sees_a_node_over_its_gpus() -> None:
    store = Store()
    ledger = GpuLedger(store)
    store.create("nodes", "", {"metadata": {"name": "a"},
                               "status": {"allocatable": {GPU: "1"}}})
    for name in ("x", "y"):
        store.create("pods", "default", pod(name))
        store.bind("default", name, "a")  # bypassing any scheduler
    assert ledger.violations and "node a holds 2 GPUs of 1" in ledger.violations[0]


# ----- mpi-operator ------------------------------------------------------------------------------
def test_mpi_operator_creates_indexed_workers_and_lists_running_ones_for_discovery(
        sim: ClusterSimulator) -> None:
    sim.add_node("a", gpus=4)
    sim.store.create("mpijobs", "default", mpijob("m", workers=2, work=100))
    until(sim, lambda: get(sim, "pods", "m-worker-1"))
    worker = get(sim, "pods", "m-worker-1")
    assert worker["metadata"]["labels"]["training.kubeflow.org/replica-index"] == "1"
    assert worker["spec"]["schedulingGates"] == [{"name": "voda.io/placement"}]
    ungate(sim, "m-worker-0", "a")
    until(sim, lambda: "m-worker-0" in get(sim, "configmaps", "m-config").get(
        "data", {}).get("discover_hosts.sh", ""))
    assert "m-worker-1" not in get(sim, "configmaps", "m-config")["data"]["discover_hosts.sh"]
    assert "Running" not in conditions(get(sim, "mpijobs", "m"))  # not every worker runs
    ungate(sim, "m-worker-1", "a")
    until(sim, lambda: "Running" in conditions(get(sim, "mpijobs", "m")))


def test_mpi_operator_deletes_the_highest_indices_on_scale_down_and_recreates_deleted_workers(
        sim: ClusterSimulator) -> None:
    sim.add_node("a", gpus=4)
    sim.store.create("mpijobs", "default", mpijob("m", workers=3, work=100))
    until(sim, lambda: get(sim, "pods", "m-worker-2"))
    sim.store.patch("mpijobs", "default", "m",
                    {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1}}}}, MERGE)
    until(sim, lambda: not get(sim, "pods", "m-worker-2") and not get(sim, "pods", "m-worker-1"))
    uid = get(sim, "pods", "m-worker-0")["metadata"]["uid"]
    ungate(sim, "m-worker-0", "a")
    until(sim, lambda: phase(sim, "m-worker-0") == "Running")
    sim.store.delete("pods", "default", "m-worker-0")
    until(sim, lambda: get(sim, "pods", "m-worker-0").get("metadata", {}).get("uid") not in (
        None, uid))
    assert get(sim, "pods", "m-worker-0")["spec"]["schedulingGates"]  # back gated


def test_an_evicted_worker_fails_the_whole_mpijob(sim: ClusterSimulator) -> None:
    sim.add_node("a", gpus=4)
    sim.store.create("mpijobs", "default", mpijob("m", workers=2, work=100))
    until(sim, lambda: get(sim, "pods", "m-worker-1"))
    for i in range(2):
        ungate(sim, f"m-worker-{i}", "a")
    until(sim, lambda: phase(sim, "m-worker-1") == "Running")
    sim.evict("default", "m-worker-1")
    until(sim, lambda: "Failed" in conditions(get(sim, "mpijobs", "m")))
    reasons = {c["reason"] for c in get(sim, "mpijobs", "m")["status"]["conditions"]}
    assert "MPIJobEvicted" in reasons


def test_an_mpijob_succeeds_once_its_workers_did_the_work_and_frees_them(
        sim: ClusterSimulator) -> None:
    sim.add_node("a", gpus=4)
    sim.store.create("mpijobs", "default", mpijob("m", workers=2, work=0.2))
    until(sim, lambda: get(sim, "pods", "m-worker-1"))
    for i in range(2):
        ungate(sim, f"m-worker-{i}", "a")
    until(sim, lambda: "Succeeded" in conditions(get(sim, "mpijobs", "m")))
    until(sim, lambda: not get(sim, "pods", "m-worker-0") and not get(sim, "pods", "m-worker-1"))
    assert not sim.ledger.violations


@pytest.mark.parametrize("plural", ["mpijobs", "pytorchjobs"])
def test_an_operator_never_writes_its_status_over_a_newer_condition_from_a_stale_read(
        sim: ClusterSimulator, plural: str) -> None:
    """Both operators write status with UpdateStatus, against the version they read: a
    condition another writer added meanwhile survives, and the stale write is redone."""
    make = mpijob if plural == "mpijobs" else pytorchjob
    sim.store.create(plural, "default", make("j", workers=2, work=100))
    until(sim, lambda: get(sim, "pods", "j-worker-1") and get(sim, plural, "j").get("status"))
    stale = get(sim, plural, "j")
    ours = {"type": "VodaAtMax", "status": "False", "reason": "Shared", "message": "m"}
    sim.store.patch(plural, "default", "j", {
        "metadata": {"resourceVersion": stale["metadata"]["resourceVersion"]},
        "status": {"conditions": [*stale["status"]["conditions"], ours]}}, MERGE,
        subresource="status")
    sim.add_node("a", gpus=4)
    if plural == "mpijobs":
        for i in range(2):
            ungate(sim, f"j-worker-{i}", "a")
    until(sim, lambda: phase(sim, "j-worker-1") == "Running")
    sim.operators[f"{plural}.kubeflow.org"].reconcile(sim, stale)  # a reconcile that read early
    assert ours in get(sim, plural, "j")["status"]["conditions"]
    until(sim, lambda: get(sim, plural, "j")["status"].get("replicaStatuses", {}).get(
        "Worker", {}).get("active") == 2)
    assert ours in get(sim, plural, "j")["status"]["conditions"]


# ----- training operator ---------------------------------------------------------------
def test_training_operator_runs_elastic_workers_and_reports_active_replicas(
        sim: ClusterSimulator) -> None:
    sim.add_node("a", gpus=4)
    sim.store.create("pytorchjobs", "default", pytorchjob("t", workers=2, work=100))
    until(sim, lambda: get(sim, "pods", "t-worker-1"))
    env = {e["name"]: e["value"]
           for e in get(sim, "pods", "t-worker-0")["spec"]["containers"][0]["env"]}
    assert env["PET_NNODES"] == "1:4" and env["PET_RDZV_ENDPOINT"] == "t-worker-0:23456"
    until(sim, lambda: get(sim, "pytorchjobs", "t").get("status", {}).get(
        "replicaStatuses", {}).get("Worker", {}).get("active") == 2)
    sim.store.patch("pytorchjobs", "default", "t", {"spec": {"pytorchReplicaSpecs": {
        "Worker": {"replicas": 1}}}}, MERGE)
    until(sim, lambda: not get(sim, "pods", "t-worker-1"))


def test_training_operator_restarts_a_failed_worker_and_completes(sim: ClusterSimulator) -> None:
    sim.add_node("a", gpus=4)
    sim.store.create("pytorchjobs", "default", pytorchjob("t", workers=1, work=0.3))
    until(sim, lambda: phase(sim, "t-worker-0") == "Running")
    uid = get(sim, "pods", "t-worker-0")["metadata"]["uid"]
    sim.evict("default", "t-worker-0")
    until(sim, lambda: get(sim, "pods", "t-worker-0").get("metadata", {}).get("uid") not in (
        None, uid))
    until(sim, lambda: "Succeeded" in conditions(get(sim, "pytorchjobs", "t")))
    assert phase(sim, "t-worker-0") == "Succeeded"


def test_torchrun_restarts_the_survivors_of_a_worker_the_operator_never_saw_running(
        sim: ClusterSimulator) -> None:
    """The scale-down lands before the operator's first look at the running group: the
    peers still lose one, and their containers restart once, not again on a later write."""
    sim.add_node("a", gpus=4)
    sim.store.create("pytorchjobs", "default", pytorchjob("t", workers=3, work=100))
    names = ("t-worker-0", "t-worker-1", "t-worker-2")
    until(sim, lambda: all(phase(sim, n) == "Running" for n in names))
    sim.store.patch("pytorchjobs", "default", "t", {"spec": {"pytorchReplicaSpecs": {
        "Worker": {"replicas": 2}}}}, MERGE)

    def restarts(name: str) -> int | None:
        return (get(sim, "pods", name)["status"].get("containerStatuses") or [{}])[0].get(
            "restartCount")

    until(sim, lambda: not get(sim, "pods", "t-worker-2") and restarts("t-worker-0") == 1
          and restarts("t-worker-1") == 1)
    sim.set_phase(get(sim, "pods", "t-worker-0"), "Running")  # any later status write
    for _ in range(20):
        sim.step()
    assert (restarts("t-worker-0"), restarts("t-worker-1")) == (1, 1)
    last = get(sim, "pods", "t-worker-0")["status"]["containerStatuses"][0]["lastState"]
    assert "a peer left the worker group" in last["terminated"]["message"]
