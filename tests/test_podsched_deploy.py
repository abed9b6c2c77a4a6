"""The pod scheduler's RBAC (deploy/base/pod-scheduler-rbac.yaml): every request a whole
pod-scheduling flow sends is granted by Voda's roles, and every grant of the pod
scheduler's own roles is used by it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.podsched_harness import config_text, not_ready_tolerations, running_cluster
from voda_testing.kube.harness import eventually
from voda_testing.kube.rbac import Attributes, granted, made_by, unused

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None,
                                reason="kubectl renders the kustomization (on the image)")
POD_SCHEDULER = "voda-pod-scheduler"


def rendered() -> list[dict[str, Any]]:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "deploy")], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def roles(docs: list[dict[str, Any]], kind: str) -> dict[str, list[dict[str, Any]]]:
    return {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == kind}


def flow_requests(tmp_path: Path) -> list[Attributes]:
    """What the pod scheduler sends while it places a gang, a Deployment and a
    StatefulSet's pod, explains, reads its ConfigMap, evicts from a NotReady node,
    provisions a WaitForFirstConsumer claim, says a pod cannot be placed and preempts."""
    with running_cluster(tmp_path, config=config_text(notReadyGraceSeconds=0.2)) as c:
        c.grid(spines=1, leaves=2, per_leaf=2)
        c.store.create("priorityclasses", "", {"metadata": {"name": "high"}, "value": 1000})
        c.store.create("storageclasses", "", {"metadata": {"name": "local"},
                                              "provisioner": "x", "volumeBindingMode":
                                              "WaitForFirstConsumer"})
        c.store.create("persistentvolumeclaims", c.namespace, {
            "metadata": {"name": "scratch"}, "spec": {"storageClassName": "local"}})
        c.job("gang", pods=2, gpus=8, annotations={"voda.io/gpu-count": "16"})
        c.deployment("svc", replicas=1, gpus=4, tolerations=not_ready_tolerations(0), volumes=[
            {"name": "s", "persistentVolumeClaim": {"claimName": "scratch"}}])
        sts = c.store.create("statefulsets.apps", c.namespace, {
            "metadata": {"name": "db"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
                                                 "serviceName": "db", "template": {}}})
        c.store.create("pods", c.namespace, {"metadata": {"name": "db-0", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
             "uid": sts["metadata"]["uid"], "controller": True}]}, "spec": {
            "schedulerName": "voda-scheduler", "containers": [{"name": "c", "image": "i"}]}})
        eventually(lambda: len(c.bound_nodes("gang-")) == 2 and c.bound_nodes("svc-")
                 and c.bound_nodes("db-0"))
        (node,) = c.bound_nodes("svc-")
        c.sim.set_ready(node, False)
        eventually(lambda: c.events(reason="NodeNotReady"))
        c.deployment("vip", replicas=1, gpus=8, priorityClassName="high")
        eventually(lambda: c.events(reason="Preempted"))
        requests = list(c.api.requests)
    return made_by(requests, "voda/")


def test_the_pod_schedulers_rbac_is_exactly_what_it_uses(tmp_path: Path) -> None:
    docs = rendered()
    cluster_roles, namespaced_roles = roles(docs, "ClusterRole"), roles(docs, "Role")
    assert POD_SCHEDULER in cluster_roles and POD_SCHEDULER in namespaced_roles
    everything = [rule for rules in cluster_roles.values() for rule in rules]
    in_voda = [rule for rules in namespaced_roles.values() for rule in rules]
    requests = flow_requests(tmp_path)
    for group, resource, verb, name, namespaced in requests:
        rules = everything + (in_voda if namespaced else [])
        assert granted(rules, group, resource, verb, name), (group, resource, verb, name)
    assert unused(cluster_roles[POD_SCHEDULER] + namespaced_roles[POD_SCHEDULER], requests) == []
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
                and d["roleRef"]["name"] == POD_SCHEDULER]
    assert {b["subjects"][0]["name"] for b in bindings} == {"voda"}
