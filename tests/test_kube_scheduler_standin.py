"""Conformance of the simulator's kube-scheduler, through the official client: it places
what the real one places and refuses what it refuses, with its condition and wording.

Each case states a behaviour of kube-scheduler's default profile (NodeUnschedulable,
TaintToleration, NodeAffinity, NodeResourcesFit, and the taint manager's NoExecute
evictions) that the Kubernetes backend must live with."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from voda_testing.kube.cluster import GPU
from voda_testing.kube.harness import FakeCluster, eventually

NS = "default"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    fake = FakeCluster.start(tmp_path)
    yield fake
    fake.stop()


@pytest.fixture
def core(cluster: FakeCluster) -> client.CoreV1Api:
    configuration = client.Configuration()
    config.load_kube_config(str(cluster.admin_kubeconfig), client_configuration=configuration)
    configuration.retries = 0
    return client.CoreV1Api(client.ApiClient(configuration))


def pod(name: str, requests: dict[str, str] | None = None,
        limits: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}],
                     **spec}}


def node_of(core: client.CoreV1Api, name: str) -> str | None:
    return core.read_namespaced_pod(name, NS).spec.node_name


def scheduled(core: client.CoreV1Api, name: str) -> Any:
    """The pod's PodScheduled condition, once it has one."""
    def condition() -> Any:
        for c in core.read_namespaced_pod(name, NS).status.conditions or []:
            if c.type == "PodScheduled":
                return c
        return None
    return eventually(condition, timeout=60)


def refused(core: client.CoreV1Api, name: str) -> str:
    condition = scheduled(core, name)
    assert (condition.status, condition.reason) == ("False", "Unschedulable")
    assert node_of(core, name) is None
    return str(condition.message)


def bound(core: client.CoreV1Api, name: str) -> str:
    return str(eventually(lambda: node_of(core, name), timeout=60))


def test_cpu_requests_are_counted_and_the_refusal_is_worded_as_kube_scheduler_does(
        cluster: FakeCluster, core: client.CoreV1Api) -> None:
    cluster.sim.add_node("n1", gpus=0, resources={"cpu": "4"})
    core.create_namespaced_pod(NS, pod("a", requests={"cpu": "3"}))
    assert bound(core, "a") == "n1"
    core.create_namespaced_pod(NS, pod("b", requests={"cpu": "1500m"}))
    assert refused(core, "b") == (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
        "1 No preemption victims found for incoming pod.")
    core.delete_namespaced_pod("a", NS)
    assert bound(core, "b") == "n1"


def test_a_limit_alone_is_the_request_and_memory_is_counted(
        cluster: FakeCluster, core: client.CoreV1Api) -> None:
    cluster.sim.add_node("n1", gpus=0, resources={"memory": "8Gi"})
    core.create_namespaced_pod(NS, pod("a", limits={"memory": "6Gi"}))
    assert bound(core, "a") == "n1"
    core.create_namespaced_pod(NS, pod("b", limits={"memory": "4Gi"}))
    assert "1 Insufficient memory." in refused(core, "b")


def test_the_pod_count_is_allocatable_pods(cluster: FakeCluster, core: client.CoreV1Api) -> None:
    cluster.sim.add_node("n1", gpus=0, resources={"pods": "2"})
    for name in ("a", "b"):
        core.create_namespaced_pod(NS, pod(name))
        bound(core, name)
    core.create_namespaced_pod(NS, pod("c"))
    assert "0/1 nodes are available: 1 Too many pods." in refused(core, "c")


def test_gpus_and_every_short_resource_are_named(cluster: FakeCluster,
                                                  core: client.CoreV1Api) -> None:
    cluster.sim.add_node("n1", gpus=2, resources={"cpu": "2"})
    core.create_namespaced_pod(NS, pod("a", limits={GPU: "4", "cpu": "3"}))
    assert refused(core, "a").startswith(
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu.")


def test_untolerated_taints_of_every_hard_effect_refuse_and_prefer_no_schedule_only_steers(
        cluster: FakeCluster, core: client.CoreV1Api) -> None:
    cluster.sim.add_node("hard", gpus=0, taints=[{"key": "k", "value": "v",
                                                  "effect": "NoSchedule"}])
    cluster.sim.add_node("exec", gpus=0, taints=[{"key": "gone", "effect": "NoExecute"}])
    core.create_namespaced_pod(NS, pod("a"))
    assert refused(core, "a") == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {gone: }, "
        "1 node(s) had untolerated taint {k: v}. preemption: 0/2 nodes are available: "
        "2 Preemption is not helpful for scheduling.")
    core.create_namespaced_pod(NS, pod("b", tolerations=[
        {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}]))
    assert bound(core, "b") == "hard"
    cluster.sim.add_node("soft", gpus=0, taints=[{"key": "s", "effect": "PreferNoSchedule"}])
    assert bound(core, "a") == "soft"  # only a preference: the one node left takes it
    cluster.sim.add_node("plain", gpus=0)
    core.create_namespaced_pod(NS, pod("c"))
    assert bound(core, "c") == "plain"  # preferred over the PreferNoSchedule node


def test_a_no_execute_taint_evicts_running_pods_that_do_not_tolerate_it(
        cluster: FakeCluster, core: client.CoreV1Api) -> None:
    cluster.sim.add_node("n1", gpus=0)
    core.create_namespaced_pod(NS, pod("plain"))
    core.create_namespaced_pod(NS, pod("tolerant", tolerations=[
        {"key": "drain", "operator": "Exists", "effect": "NoExecute"}]))
    core.create_namespaced_pod(NS, pod("for-a-while", tolerations=[
        {"key": "drain", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3}]))
    bound(core, "plain"), bound(core, "tolerant"), bound(core, "for-a-while")
    core.patch_node("n1", {"spec": {"taints": [{"key": "drain", "effect": "NoExecute"}]}})

    def names() -> set[str]:
        return {p.metadata.name for p in core.list_namespaced_pod(NS).items}
    eventually(lambda: "plain" not in names(), timeout=60)
    assert "for-a-while" in names()  # tolerated for 3 s
    eventually(lambda: "for-a-while" not in names(), timeout=60)
    assert node_of(core, "tolerant") == "n1"


@pytest.mark.parametrize("term, where", [
    ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}, "nb"),
    ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, "nb"),
    ({"matchExpressions": [{"key": "big", "operator": "Exists"}]}, "nb"),
    ({"matchExpressions": [{"key": "big", "operator": "DoesNotExist"}]}, "na"),
    ({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]}, "nb"),
    ({"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["3"]}]}, "na"),
    ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["na"]}]}, "na"),
])
def test_required_node_affinity(cluster: FakeCluster, core: client.CoreV1Api,
                                term: dict[str, Any], where: str) -> None:
    cluster.sim.add_node("na", gpus=0, labels={"zone": "a", "gen": "2"})
    cluster.sim.add_node("nb", gpus=0, labels={"zone": "b", "gen": "4", "big": "yes"})
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}
    core.create_namespaced_pod(NS, pod("p", affinity=affinity))
    assert bound(core, "p") == where


def test_a_node_selector_matching_nothing_and_a_cordon_are_refused_by_name(
        cluster: FakeCluster, core: client.CoreV1Api) -> None:
    cluster.sim.add_node("n1", gpus=0, labels={"zone": "a"})
    cluster.sim.add_node("n2", gpus=0, labels={"zone": "b"})
    cluster.sim.cordon("n2")
    core.create_namespaced_pod(NS, pod("p", nodeSelector={"zone": "c"}))
    assert refused(core, "p").startswith(
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) were unschedulable.")


def test_a_pod_recreated_under_the_same_name_is_marked_again(
        cluster: FakeCluster, core: client.CoreV1Api) -> None:
    cluster.sim.add_node("n1", gpus=1)
    for _ in range(2):
        core.create_namespaced_pod(NS, pod("w", limits={GPU: "2"}))
        assert "1 Insufficient nvidia.com/gpu." in refused(core, "w")
        core.delete_namespaced_pod("w", NS)
        eventually(lambda: not core.list_namespaced_pod(NS).items)


def test_a_gated_pod_is_marked_scheduling_gated_then_placed_once_ungated(
        cluster: FakeCluster, core: client.CoreV1Api) -> None:
    cluster.sim.add_node("n1", gpus=0)
    core.create_namespaced_pod(NS, pod("g", schedulingGates=[{"name": "voda.io/placement"}]))
    condition = scheduled(core, "g")
    assert (condition.status, condition.reason, condition.message) == (
        "False", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")
    core.patch_namespaced_pod("g", NS, {"spec": {"schedulingGates": None}})
    assert bound(core, "g") == "n1"


def test_a_node_that_is_not_ready_takes_no_pod_even_with_the_default_no_execute_tolerations(
        cluster: FakeCluster, core: client.CoreV1Api) -> None:
    cluster.sim.add_node("n1", gpus=0)
    cluster.sim.set_ready("n1", False)  # Ready=Unknown: the node is unreachable
    default_tolerations = [  # what DefaultTolerationSeconds gives every pod
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]
    core.create_namespaced_pod(NS, pod("p", tolerations=default_tolerations))
    assert refused(core, "p").startswith(
        "0/1 nodes are available: 1 node(s) had untolerated taint "
        "{node.kubernetes.io/unreachable: }.")
    cluster.sim.set_ready("n1", True)
    assert bound(core, "p") == "n1"
