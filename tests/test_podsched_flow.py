"""The pod scheduler against the fake API server and the cluster simulator: batch Job
gangs and inference Deployments placed, explained, recovered; configuration reloaded."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.podsched_harness import config_text, not_ready_tolerations, running_cluster
from voda.backends.kubernetes.cluster_view import ClusterView, watch_cluster
from voda.podsched.controller import PodScheduler, PodSchedulerSettings
from voda_testing.kube.cluster import SimSettings
from voda_testing.kube.harness import FakeCluster, eventually

pytestmark = pytest.mark.timeout(120)


def leaf_of(node: str) -> str:
    return node.rsplit("-", 1)[0]


def test_a_four_pod_gang_lands_in_one_leaf(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        c.grid(spines=1, leaves=3, per_leaf=4)
        # Leaf l0 is missing a node's worth; a gang of 4 whole nodes must take l1.
        c.job("noise", pods=1, gpus=8)
        eventually(lambda: c.bound_nodes("noise-"))
        c.job("train", pods=4, gpus=8, annotations={"voda.io/gpu-count": "32"})
        nodes = eventually(lambda: len(c.bound_nodes("train-")) == 4 and c.bound_nodes("train-"))
        assert len(set(nodes)) == 4
        assert {leaf_of(n) for n in nodes} == {"s0-l1"}
        pod = c.pods("train-")[0]["metadata"]["name"]
        (event,) = eventually(lambda: c.events(pod, "Scheduled"))
        assert "placed in leaf s0/s0-l1" in event["message"] and "score" in event["message"]
        assert event["source"]["component"] == "voda-scheduler"


def test_a_distributed_inference_deployment_lands_on_four_nodes(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        c.grid(spines=1, leaves=1, per_leaf=4)
        c.deployment("infer", replicas=4, gpus=1,
                     annotations={"topology.scheduler/placement-strategy": "distributed",
                                  "topology.scheduler/latency-sensitive": "true"})
        nodes = eventually(lambda: len(c.bound_nodes("infer-")) == 4 and c.bound_nodes("infer-"))
        assert sorted(nodes) == sorted(c.nodes)


def test_a_gang_that_cannot_fit_stays_pending_holding_nothing_until_room_appears(
        tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        c.grid(spines=1, leaves=2, per_leaf=4)
        c.job("big", pods=5, gpus=8, annotations={"voda.io/gpu-count": "40",
                                                  "voda.io/required-topology": "voda.io/leaf"})
        eventually(lambda: len(c.pods("big-")) == 5)
        pod = c.pods("big-")[0]["metadata"]["name"]
        (event,) = eventually(lambda: c.events(pod, "FailedScheduling"))
        assert "require one voda.io/leaf domain" in event["message"]
        assert "the most is 4" in event["message"]
        assert event["type"] == "Warning"
        assert c.pods("big-", bound=True) == []
        assert c.gpus_held() == {} and c.view.claims == {}
        # Another workload still gets the GPUs the gang waits for.
        c.job("small", pods=1, gpus=8)
        eventually(lambda: c.bound_nodes("small-"))
        # A fifth node in leaf s0-l1 gives the gang a leaf with room.
        c.sim.add_node("s0-l1-n4", 8, {"voda.io/spine": "s0", "voda.io/leaf": "s0-l1"})
        nodes = eventually(lambda: len(c.bound_nodes("big-")) == 5 and c.bound_nodes("big-"))
        assert {leaf_of(n) for n in nodes} == {"s0-l1"}


def test_an_incomplete_gang_waits_and_says_so(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        c.grid(spines=1, leaves=1, per_leaf=2)
        c.job("partial", pods=1, gpus=4, annotations={"voda.io/gpu-count": "8"})
        pod = eventually(lambda: c.pods("partial-"))[0]["metadata"]["name"]
        (event,) = eventually(lambda: c.events(pod, "WaitingForGang"))
        assert "gang of 8 GPUs" in event["message"]
        assert c.gpus_held() == {}


def test_a_deleted_pod_is_replaced_in_the_same_leaf(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        c.grid(spines=1, leaves=2, per_leaf=4)
        c.job("train", pods=3, gpus=8, annotations={"voda.io/gpu-count": "24"})
        nodes = eventually(lambda: len(c.bound_nodes("train-")) == 3 and c.bound_nodes("train-"))
        (leaf,) = {leaf_of(n) for n in nodes}
        first = {p["metadata"]["name"] for p in c.pods("train-")}
        victim = sorted(first)[0]
        c.store.delete("pods", c.namespace, victim)
        (replacement,) = eventually(
            lambda: [p for p in c.pods("train-", bound=True) if p["metadata"]["name"] not in first])
        assert leaf_of(replacement["spec"]["nodeName"]) == leaf
        name = replacement["metadata"]["name"]
        (event,) = eventually(lambda: c.events(name, "Scheduled"))
        assert "recovered in" in event["message"]
        assert c.scheduler.metrics.recovery_seconds._sum.get() > 0


def test_a_node_going_not_ready_moves_its_pods(tmp_path: Path) -> None:
    # The stand-in's taint manager is slowed (as below): with both at 0 s, whichever of it
    # and the pod scheduler looked first deleted the pod, and only the pod scheduler's
    # deletion writes the NodeNotReady Event checked here.
    with running_cluster(tmp_path, sim=SimSettings(toleration_seconds_scale=100.0)) as c:
        c.grid(spines=1, leaves=2, per_leaf=4)
        c.deployment("svc", replicas=2, gpus=4, tolerations=not_ready_tolerations(1))
        before = eventually(lambda: len(c.bound_nodes("svc-")) == 2 and c.bound_nodes("svc-"))
        dead = before[0]
        c.sim.set_ready(dead, False)
        after = eventually(lambda: len(c.bound_nodes("svc-")) == 2
                         and dead not in c.bound_nodes("svc-") and c.bound_nodes("svc-"))
        moved = [n for n in after if n not in before]
        assert moved and leaf_of(moved[0]) == leaf_of(dead)
        eventually(lambda: any("NotReady" in e["message"] for e in c.events(reason="NodeNotReady")))
        replacements = [p["metadata"]["name"] for p in c.pods("svc-", bound=True)
                        if p["spec"]["nodeName"] in moved]
        # A binding is visible before the scheduler records the recovery; the Scheduled
        # Event is written after, so wait for that before reading the metric.
        eventually(lambda: any("recovered in" in e["message"]
                               for name in replacements for e in c.events(name, "Scheduled")))
        assert c.scheduler.metrics.recovery_seconds._sum.get() > 0


def test_a_pod_on_a_not_ready_node_stays_until_its_toleration_expires(tmp_path: Path) -> None:
    # The configured default (0.2 s) is for pods without a toleration: these have 3 s.
    # kube-controller-manager's taint manager evicts such pods too; the stand-in's is slowed
    # here so that what is checked is the pod scheduler's own rule.
    with running_cluster(tmp_path, config=config_text(notReadyGraceSeconds=0.2),
                         sim=SimSettings(toleration_seconds_scale=100.0)) as c:
        c.grid(spines=1, leaves=1, per_leaf=3)
        c.deployment("svc", replicas=1, gpus=8, tolerations=not_ready_tolerations(3))
        c.deployment("pinned", replicas=1, gpus=8, tolerations=not_ready_tolerations(None))
        (first,) = eventually(lambda: c.pods("svc-", bound=True))
        (node,) = c.bound_nodes("svc-")
        (held,) = eventually(lambda: c.bound_nodes("pinned-"))
        c.sim.set_ready(node, False)  # Unknown: the node is unreachable
        c.sim.set_ready(held, False)
        went = time.monotonic()
        eventually(lambda: c.store.get("pods", c.namespace, first["metadata"]["name"])[
            "metadata"].get("deletionTimestamp"), timeout=30)
        assert time.monotonic() - went >= 2.5  # not before its toleration (3 s, seen late)
        (event,) = eventually(lambda: c.events(first["metadata"]["name"], "NodeNotReady"))
        assert "toleration of 3 s for node.kubernetes.io/unreachable" in event["message"]
        # Deleted gracefully: Terminating until the kubelet is back (one copy per pod name,
        # which is what a StatefulSet waits for), while its ReplicaSet's replacement runs.
        (other,) = eventually(lambda: c.bound_nodes("svc-"))
        assert other != node and other != held
        assert c.store.get("pods", c.namespace, first["metadata"]["name"])["spec"][
            "nodeName"] == node
        # A pod that tolerates the taint for good is never deleted.
        assert c.bound_nodes("pinned-") == [held] and c.events(reason="NodeNotReady") == [event]


def test_configuration_is_reloaded_from_the_config_map(tmp_path: Path) -> None:
    with running_cluster(tmp_path, config=config_text()) as c:
        c.grid(spines=1, leaves=2, per_leaf=2)
        c.set_config(config_text(topologyConstraints={"maxNodesPerLeaf": "many"}))
        eventually(lambda: c.scheduler.config_error)
        assert "topologyConstraints.maxNodesPerLeaf" in c.scheduler.config_error
        c.set_config(config_text(scoringWeights={"resourceAvailability": 0.1,
                                                 "topologyAlignment": 0.1,
                                                 "domainUtilization": 0.1,
                                                 "historicalPerformance": 0.7},
                                 domainPerformance={"s0/s0-l1": 1.0}))
        eventually(lambda: c.scheduler.config.placement.history_weight == 0.7)
        assert c.scheduler.config_error is None
        c.job("fast", pods=1, gpus=2)
        (node,) = eventually(lambda: c.bound_nodes("fast-"))
        assert leaf_of(node) == "s0-l1"  # the leaf with the best history


def test_taints_selectors_and_other_schedulers_pods_are_respected(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        c.sim.add_node("plain", 8, {"pool": "a"})
        c.sim.add_node("tainted", 8, {"pool": "b"},
                       taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}])
        # kube-scheduler's pod takes 6 GPUs of "plain": 2 are left there.
        c.store.create("pods", c.namespace, {"metadata": {"name": "other"}, "spec": {
            "containers": [{"name": "c", "image": "i", "resources": {"limits": {
                "nvidia.com/gpu": "6"}}}]}})
        eventually(lambda: c.bound_nodes("other"))
        c.job("needs-four", pods=1, gpus=4)
        pod = eventually(lambda: c.pods("needs-four-"))[0]["metadata"]["name"]
        (event,) = eventually(lambda: c.events(pod, "FailedScheduling"))
        assert "1 Insufficient nvidia.com/gpu" in event["message"]
        assert "1 node(s) had untolerated taint {dedicated: infer}" in event["message"]
        tolerant = {"tolerations": [{"key": "dedicated", "operator": "Exists"}],
                    "nodeSelector": {"pool": "b"}}
        c.store.create("pods", c.namespace, {"metadata": {"name": "tolerant"}, "spec": {
            "schedulerName": "voda-scheduler", **tolerant,
            "containers": [{"name": "c", "image": "i", "resources": {"limits": {
                "nvidia.com/gpu": "2"}}}]}})
        assert eventually(lambda: c.bound_nodes("tolerant")) == ["tainted"]


def test_metrics_are_lint_clean_and_count_decisions(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        c.grid(spines=1, leaves=1, per_leaf=2)
        c.job("ok", pods=2, gpus=8, annotations={"voda.io/gpu-count": "16"})
        c.job("too-big", pods=1, gpus=16)
        eventually(lambda: len(c.bound_nodes("ok-")) == 2)
        eventually(lambda: c.events(reason="FailedScheduling"))
        # The server has the Bindings before the scheduler's thread, back from posting
        # them, times the placement.
        eventually(lambda: _placements_timed(c.scheduler.metrics.registry) >= 1)
        text = generate_latest(c.scheduler.metrics.registry).decode()
    promtool = shutil.which("promtool")
    assert promtool, "promtool is needed (Debian package prometheus)"
    result = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                            capture_output=True, timeout=30)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("voda_pod_placement_decisions_total", (("result", "bound"),))] >= 1
    assert samples[("voda_pod_placement_decisions_total", (("result", "unschedulable"),))] >= 1
    assert samples[("voda_pod_gpu_allocation_ratio", ())] == 1.0
    assert samples[("voda_pod_domain_utilization_ratio",
                    (("domain", "s0/s0-l0"), ("level", "leaf")))] == 1.0
    assert ("voda_pod_fragmentation_ratio", ()) in samples
    assert samples[("voda_pod_placement_duration_seconds_count", ())] >= 1


def _placements_timed(registry: object) -> float:
    text = generate_latest(registry).decode()  # type: ignore[arg-type]
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "voda_pod_placement_duration_seconds_count")


def test_a_node_back_within_the_grace_keeps_its_pods(tmp_path: Path) -> None:
    with running_cluster(tmp_path, config=config_text(notReadyGraceSeconds=2.0)) as c:
        c.grid(spines=1, leaves=1, per_leaf=2)
        c.job("steady", pods=1, gpus=8)
        (node,) = eventually(lambda: c.bound_nodes("steady-"))
        c.sim.set_ready(node, False)
        eventually(lambda: c.scheduler.recovery.not_ready_since(node) is not None)
        c.sim.set_ready(node, True)
        eventually(lambda: c.scheduler.recovery.not_ready_since(node) is None)
        time.sleep(2.5)  # past the grace
        assert c.bound_nodes("steady-") == [node]
        assert c.events(reason="NodeNotReady") == []
        assert not c.scheduler.recovery.recovering("default/Job/steady")


def test_a_gated_pod_waits_for_its_gates_to_go(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        c.grid(spines=1, leaves=1, per_leaf=1)
        c.store.create("pods", c.namespace, {"metadata": {"name": "gated"}, "spec": {
            "schedulerName": "voda-scheduler", "schedulingGates": [{"name": "example.com/x"}],
            "containers": [{"name": "c", "image": "i", "resources": {"limits": {
                "nvidia.com/gpu": "1"}}}]}})
        eventually(lambda: c.scheduler.cycles > 2)
        assert c.bound_nodes("gated") == [] and c.events("gated") == []
        c.store.patch("pods", c.namespace, "gated", [{"op": "remove",
                                                       "path": "/spec/schedulingGates"}],
                      "application/json-patch+json")
        assert eventually(lambda: c.bound_nodes("gated")) == [
            "s0-l0-n0"]


def test_a_scheduler_joining_a_fed_view_takes_what_was_listed_before_it(tmp_path: Path) -> None:
    fake = FakeCluster.start(tmp_path)
    try:
        fake.sim.add_node("n", 8)
        fake.server.store.create("pods", "default", {"metadata": {"name": "early"}, "spec": {
            "containers": [{"name": "c", "image": "i", "resources": {"limits": {
                "nvidia.com/gpu": "6"}}}]}})
        eventually(lambda: fake.server.store.get("pods", "default", "early")["spec"].get(
            "nodeName"))
        view = ClusterView()
        feeding = watch_cluster(fake.api(), view, 30)
        for informer in feeding:
            informer.start()
        eventually(lambda: all(i.synced.is_set() for i in feeding) and view.free("n") == 2)
        late = PodScheduler(fake.api("pod-scheduler"), view,
                            PodSchedulerSettings(retry_seconds=0.5)).start()
        assert late.wait_synced(10)
        assert late.state.pods["default/early"].pod.node == "n"
        assert late.snapshot().requested["n"]["nvidia.com/gpu"] == 6
        late.stop()
        for informer in feeding:
            informer.stop()
        assert view.node_handlers == [] and view.pod_handlers == []
    finally:
        fake.stop()
