"""The pod scheduler as operators expect kube-scheduler to behave, over the fake API server
and the cluster simulator: the PodScheduled condition of pods it cannot place, volumes,
NotReady tolerations, preemption, and the constraints it leaves to kube-scheduler."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.podsched_harness import GPU, SCHEDULER, running_cluster
from voda.backends.kubernetes.api import PODS, STRATEGIC_PATCH
from voda.backends.kubernetes.api import ApiError as KubeApiError
from voda_testing.kube.harness import eventually

Obj = dict[str, Any]


def scheduled_condition(c: Any, name: str) -> Obj | None:
    pod = c.store.try_get("pods", c.namespace, name)
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if condition["type"] == "PodScheduled":
            return condition
    return None


def condition_saying(c: Any, name: str, start: str) -> Obj | None:
    """The pod's PodScheduled condition once its message starts so (the scheduler may have
    seen fewer nodes at first)."""
    condition = scheduled_condition(c, name)
    return condition if condition and condition["message"].startswith(start) else None


def bare_pod(name: str, gpus: int, **spec: Any) -> Obj:
    return {"metadata": {"name": name, "labels": {"app": name}}, "spec": {
        "schedulerName": SCHEDULER, "containers": [{"name": "c", "image": "i", "resources": {
            "limits": {GPU: str(gpus)}}}], **spec}}


def test_a_pod_that_fits_nowhere_says_so_in_its_pod_scheduled_condition(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        c.grid(spines=1, leaves=1, per_leaf=2)
        c.store.create("pods", c.namespace, bare_pod("big", 16))
        first = eventually(lambda: condition_saying(c, "big", "0/2 nodes are available: 2 "
                                                    "Insufficient nvidia.com/gpu."))
        assert first["status"] == "False" and first["reason"] == "Unschedulable"
        assert first["lastTransitionTime"]
        # The reason changes: the condition follows (its transition time stays).
        c.sim.cordon("s0-l0-n1")
        changed = eventually(lambda: (scheduled_condition(c, "big") or {}).get("message") != (
            first["message"]) and scheduled_condition(c, "big"))
        assert changed["message"].startswith(
            "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) were "
            "unschedulable."), changed["message"]
        assert changed["lastTransitionTime"] == first["lastTransitionTime"]
        # A pod recreated under the same name (another uid) gets its own.
        c.store.delete("pods", c.namespace, "big")
        eventually(lambda: c.store.try_get("pods", c.namespace, "big") is None)
        c.store.create("pods", c.namespace, bare_pod("big", 16))
        again = eventually(lambda: scheduled_condition(c, "big"))
        assert again["reason"] == "Unschedulable" and again["message"] == changed["message"]
        # A gang still waiting for its pods says why too (as kube-scheduler's coscheduling).
        c.job("part", pods=1, gpus=4, annotations={"voda.io/gpu-count": "8"})
        pod = eventually(lambda: c.pods("part-"))[0]["metadata"]["name"]
        waiting = eventually(lambda: scheduled_condition(c, pod))
        assert waiting["reason"] == "Unschedulable"
        assert waiting["message"].startswith("0/2 nodes are available: gang of 8 GPUs")
        # Once placed, the Binding makes it True.
        c.sim.cordon("s0-l0-n1", False)
        c.store.create("pods", c.namespace, bare_pod("small", 2))
        eventually(lambda: (scheduled_condition(c, "small") or {}).get("status") == "True")


def test_a_status_patch_for_an_earlier_pod_of_the_same_name_is_refused(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        api = c.fake.api("admin")  # over HTTP, through the official client
        old = api.create(PODS, c.namespace, bare_pod("p", 1))
        api.delete(PODS, c.namespace, "p")
        api.create(PODS, c.namespace, bare_pod("p", 1))
        with pytest.raises(KubeApiError) as refused:
            api.patch(PODS, c.namespace, "p", {
                "metadata": {"uid": old["metadata"]["uid"]},
                "status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}},
                STRATEGIC_PATCH, sub="status")
        assert refused.value.status == 422 and "metadata.uid" in refused.value.message


# ----- volumes ---------------------------------------------------------------------------------
ZONE = "topology.kubernetes.io/zone"


def zoned_nodes(c: Any) -> None:
    """n-a0, n-a1 in zone a; n-b0, n-b1 in zone b; 8 GPUs each."""
    for zone in ("a", "b"):
        for k in range(2):
            c.sim.add_node(f"n-{zone}{k}", 8, {ZONE: zone, "voda.io/leaf": f"leaf-{zone}",
                                               "voda.io/spine": "s0"})


def claim(c: Any, name: str, storage_class: str | None = None, volume: str | None = None
          ) -> Obj:
    spec: Obj = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume is not None:
        spec["volumeName"] = volume
    return c.store.create("persistentvolumeclaims", c.namespace,
                          {"metadata": {"name": name}, "spec": spec})


def zonal_volume(c: Any, name: str, zone: str) -> Obj:
    return c.store.create("persistentvolumes", "", {"metadata": {"name": name}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": ZONE, "operator": "In", "values": [zone]}]}]}}}})


def storage_class(c: Any, name: str, mode: str, zones: list[str] | None = None) -> Obj:
    body: Obj = {"metadata": {"name": name}, "provisioner": "disk.csi.example",
                 "volumeBindingMode": mode}
    if zones:
        body["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE, "values": zones}]}]
    return c.store.create("storageclasses", "", body)


def with_claim(name: str, gpus: int, claim_name: str) -> Obj:
    return bare_pod(name, gpus, volumes=[{"name": "data", "persistentVolumeClaim": {
        "claimName": claim_name}}])


def test_a_pod_goes_where_its_volumes_can_be(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        zoned_nodes(c)
        # A claim bound to a zonal disk: only that zone's nodes.
        zonal_volume(c, "disk-b", "b")
        claim(c, "data", volume="disk-b")
        c.store.create("pods", c.namespace, with_claim("reader", 8, "data"))
        assert eventually(lambda: c.bound_nodes("reader"))[0].startswith("n-b")
        # The zone is full: the pod waits, and says why in kube-scheduler's words.
        c.store.create("pods", c.namespace, with_claim("reader-2", 8, "data"))
        eventually(lambda: c.bound_nodes("reader-2"))
        c.store.create("pods", c.namespace, with_claim("reader-3", 8, "data"))
        eventually(lambda: condition_saying(
            c, "reader-3", "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) "
            "had volume node affinity conflict."))
        assert c.bound_nodes("reader-3") == []
        # WaitForFirstConsumer: provisioned where the pod goes (a zone the class allows),
        # the claim annotated with the node before the pod is bound.
        storage_class(c, "late", "WaitForFirstConsumer", zones=["a"])
        claim(c, "scratch", storage_class="late")
        c.store.create("pods", c.namespace, with_claim("writer", 2, "scratch"))
        (node,) = eventually(lambda: c.bound_nodes("writer"))
        assert node.startswith("n-a")
        annotations = c.store.get("persistentvolumeclaims", c.namespace, "scratch")[
            "metadata"]["annotations"]
        assert annotations == {"volume.kubernetes.io/selected-node": node}


def test_a_pod_with_an_unbound_immediate_claim_waits_for_it(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        zoned_nodes(c)
        storage_class(c, "now", "Immediate")
        claim(c, "later", storage_class="now")
        c.store.create("pods", c.namespace, with_claim("waiter", 1, "later"))
        c.store.create("pods", c.namespace, with_claim("lost", 1, "nope"))
        eventually(lambda: condition_saying(c, "waiter", "0/4 nodes are available: pod has "
                                            "unbound immediate PersistentVolumeClaims."))
        missing = eventually(lambda: scheduled_condition(c, "lost"))
        assert 'persistentvolumeclaim "nope" not found' in missing["message"]
        eventually(lambda: any("unbound immediate" in e["message"]
                               for e in c.events("waiter", "FailedScheduling")))
        assert c.bound_nodes("waiter") == []
        # The PV controller binds it (to a zone-a disk): the pod follows the disk.
        zonal_volume(c, "disk-a", "a")
        c.store.patch("persistentvolumeclaims", c.namespace, "later",
                      {"spec": {"volumeName": "disk-a"}}, "application/merge-patch+json")
        assert eventually(lambda: c.bound_nodes("waiter"))[0].startswith("n-a")


# ----- preemption ------------------------------------------------------------------------------
def priority_class(c: Any, name: str, value: int, policy: str | None = None) -> None:
    body: Obj = {"metadata": {"name": name}, "value": value}
    if policy:
        body["preemptionPolicy"] = policy
    c.store.create("priorityclasses", "", body)


def test_a_higher_priority_pod_preempts_lower_priority_pods_on_one_node(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        priority_class(c, "low", 100)
        priority_class(c, "high", 1000)
        priority_class(c, "polite", 1000, "Never")
        c.grid(spines=1, leaves=1, per_leaf=2)
        c.deployment("filler", replicas=2, gpus=8, priorityClassName="low")
        fillers = eventually(lambda: len(c.pods("filler-", bound=True)) == 2
                             and c.pods("filler-", bound=True))
        # preemptionPolicy: Never: it waits, nothing is evicted for it.
        c.store.create("pods", c.namespace, bare_pod("polite", 8, priorityClassName="polite"))
        eventually(lambda: condition_saying(c, "polite", "0/2 nodes are available: 2 "
                                                         "Insufficient nvidia.com/gpu."))
        c.store.create("pods", c.namespace, bare_pod("vip", 8, priorityClassName="high"))
        vip = eventually(lambda: c.store.get("pods", c.namespace, "vip")["status"].get(
            "nominatedNodeName") and c.store.get("pods", c.namespace, "vip"))
        node = vip["status"]["nominatedNodeName"]
        (victim,) = [p for p in fillers if p["spec"]["nodeName"] == node]
        assert eventually(lambda: c.bound_nodes("vip")) == [node]
        (event,) = eventually(lambda: c.events(victim["metadata"]["name"], "Preempted"))
        assert event["message"] == f"Preempted by {c.namespace}/vip on node {node}"
        # One victim only; the polite pod never preempted; the ReplicaSet's replacement
        # (lower priority) waits without preempting anyone.
        survivors = [p["metadata"]["name"] for p in c.pods("filler-", bound=True)]
        assert survivors == [p["metadata"]["name"] for p in fillers if p is not victim]
        assert c.bound_nodes("polite") == []
        replacement = eventually(lambda: [p for p in c.pods("filler-", bound=False)])
        assert eventually(lambda: scheduled_condition(c, replacement[0]["metadata"]["name"]))
        assert [p["metadata"]["name"] for p in c.pods("filler-", bound=True)] == survivors
        assert c.bound_nodes("vip") == [node]


def test_preemption_spares_a_pod_its_disruption_budget_protects(tmp_path: Path) -> None:
    """kube-scheduler's DefaultPreemption weighs PodDisruptionBudgets: the node whose victim
    breaks no budget is chosen, though its victim has the higher priority; the protected
    pod stays bound (the victim is deleted, not evicted)."""
    with running_cluster(tmp_path) as c:
        priority_class(c, "low", 100)
        priority_class(c, "mid", 200)
        priority_class(c, "high", 1000)
        c.grid(spines=1, leaves=1, per_leaf=2)
        c.store.create("poddisruptionbudgets.policy", c.namespace, {
            "metadata": {"name": "db"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}})
        c.store.create("pods", c.namespace, bare_pod("db", 8, priorityClassName="low"))
        c.store.create("pods", c.namespace, bare_pod("web", 8, priorityClassName="mid"))
        (db_node,) = eventually(lambda: c.bound_nodes("db"))
        (web_node,) = eventually(lambda: c.bound_nodes("web"))
        # The disruption controller counts db healthy; the scheduler's watch has seen it.
        budget = eventually(lambda: [b for b in c.scheduler._budgets()
                                     if b.name == "db" and b.selector is not None
                                     and c.store.get("poddisruptionbudgets.policy",
                                                     c.namespace, "db")["status"].get(
                                         "currentHealthy") == 1])[0]
        assert budget.allowed == 0
        c.store.create("pods", c.namespace, bare_pod("vip", 8, priorityClassName="high"))
        assert eventually(lambda: c.bound_nodes("vip")) == [web_node]
        assert eventually(lambda: c.events("web", "Preempted"))
        assert c.bound_nodes("db") == [db_node] and not c.events("db", "Preempted")
        assert c.store.get("pods", c.namespace, "db")["metadata"].get(
            "deletionTimestamp") is None


def test_priority_comes_from_the_priority_class(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        api = c.fake.api("admin")
        priority_class(c, "high", 1000, "Never")
        pod = api.create(PODS, c.namespace, bare_pod("p", 1, priorityClassName="high"))
        assert pod["spec"]["priority"] == 1000 and pod["spec"]["preemptionPolicy"] == "Never"
        plain = api.create(PODS, c.namespace, bare_pod("plain", 1))
        assert plain["spec"]["priority"] == 0
        with pytest.raises(KubeApiError) as refused:
            api.create(PODS, c.namespace, bare_pod("q", 1, priorityClassName="nope"))
        assert refused.value.status == 403
        assert "no PriorityClass with name nope was found" in refused.value.message
        with pytest.raises(KubeApiError) as refused:
            api.create(PODS, c.namespace, bare_pod("r", 1, priority=5))
        assert refused.value.status == 403
        assert "must not be provided in pod spec" in refused.value.message
        priority_class(c, "everyone", 7)
        c.store.patch("priorityclasses", "", "everyone", {"globalDefault": True},
                      "application/merge-patch+json")
        default = api.create(PODS, c.namespace, bare_pod("s", 1))
        assert default["spec"]["priority"] == 7
        assert default["spec"]["priorityClassName"] == "everyone"


# ----- host ports, anti-affinity, and what is left to kube-scheduler ---------------------------
def with_host_port(name: str, port: int, **spec: Any) -> Obj:
    pod = bare_pod(name, 1, **spec)
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": port}]
    return pod


def anti(app: str) -> Obj:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"app": app}},
        "topologyKey": "kubernetes.io/hostname"}]}}


def test_host_ports_are_not_handed_out_twice(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        c.grid(spines=1, leaves=1, per_leaf=2)
        # Taken on s0-l0-n0 by a pod of another scheduler.
        other = with_host_port("other", 9090, nodeName="s0-l0-n0")
        other["spec"].pop("schedulerName")
        c.store.create("pods", c.namespace, other)
        c.store.create("pods", c.namespace, with_host_port("web", 9090))
        assert eventually(lambda: c.bound_nodes("web")) == ["s0-l0-n1"]
        for name in ("edge-0", "edge-1", "edge-2"):
            c.store.create("pods", c.namespace, with_host_port(name, 8080))
        eventually(lambda: len(c.bound_nodes("edge-")) == 2)
        assert len(set(c.bound_nodes("edge-"))) == 2
        (waiting,) = c.pods("edge-", bound=False)
        eventually(lambda: condition_saying(
            c, waiting["metadata"]["name"], "0/2 nodes are available: 2 node(s) didn't have "
            "free ports for the requested pod ports."))


def test_required_anti_affinity_by_hostname_is_honoured(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        c.grid(spines=1, leaves=1, per_leaf=3)
        c.deployment("spread", replicas=4, gpus=1, affinity=anti("spread"))
        eventually(lambda: len(c.bound_nodes("spread-")) == 3)
        assert len(set(c.bound_nodes("spread-"))) == 3
        (waiting,) = c.pods("spread-", bound=False)
        eventually(lambda: condition_saying(
            c, waiting["metadata"]["name"], "0/3 nodes are available: 3 node(s) didn't match "
            "pod anti-affinity rules."))
        # Symmetric: a pod the bound ones' anti-affinity selects stays off their nodes.
        c.store.delete("deployments.apps", c.namespace, "spread")
        eventually(lambda: c.pods("spread-") == [])
        c.store.create("pods", c.namespace, bare_pod("loner", 1, affinity=anti("noisy")))
        (lonely,) = eventually(lambda: c.bound_nodes("loner"))
        for k in range(2):
            c.store.create("pods", c.namespace, {**bare_pod(f"noisy-{k}", 1), "metadata": {
                "name": f"noisy-{k}", "labels": {"app": "noisy"}}})
        eventually(lambda: len(c.bound_nodes("noisy-")) == 2)
        assert lonely not in c.bound_nodes("noisy-")


def test_constraints_left_to_kube_scheduler_are_said_so(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        c.grid(spines=1, leaves=1, per_leaf=2)
        zonal = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}]}}
        c.store.create("pods", c.namespace, bare_pod("near-db", 1, affinity=zonal))
        c.store.create("pods", c.namespace, bare_pod("dra", 1, resourceClaims=[
            {"name": "gpu", "resourceClaimName": "a100"}]))
        c.store.create("pods", c.namespace, bare_pod("spread", 1, topologySpreadConstraints=[
            {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": {"app": "spread"}}}]))
        for name, what in (("near-db", "required pod affinity (topologyKey "
                                       "topology.kubernetes.io/zone)"),
                           ("dra", "dynamic resource allocation claims")):
            (event,) = eventually(lambda name=name: c.events(name, "FailedScheduling"))
            assert event["type"] == "Warning" and what in event["message"]
            assert "use the default scheduler" in event["message"]
            assert eventually(lambda name=name: scheduled_condition(c, name))["reason"] == (
                "Unschedulable")
        # A preference is not a reason to wait: placed, with a Warning that it was ignored.
        assert eventually(lambda: c.bound_nodes("spread"))
        (event,) = eventually(lambda: c.events("spread", "ConstraintsNotEvaluated"))
        assert event["type"] == "Warning" and "ScheduleAnyway" in event["message"]
        assert c.bound_nodes("near-db") == [] and c.bound_nodes("dra") == []
