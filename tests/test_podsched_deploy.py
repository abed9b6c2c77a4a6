"""The pod scheduler's RBAC (deploy/base/pod-scheduler-rbac.yaml): every request a whole
pod-scheduling flow sends is granted by Voda's roles, and every grant of the pod
scheduler's own roles is used by it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
import yaml

from tests.podsched_harness import config_text, running_cluster, wait_for

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


def granted(rules: list[dict[str, Any]], group: str, resource: str, verb: str,
            name: str | None) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
               and ("resourceNames" not in r or name in r["resourceNames"]) for r in rules)


def flow_requests(tmp_path: Path) -> list[tuple[str, str, str, str | None, bool]]:
    """What the pod scheduler sends while it places a gang, a Deployment and a
    StatefulSet's pod, explains, reads its ConfigMap and evicts from a NotReady node."""
    with running_cluster(tmp_path, config=config_text(notReadyGraceSeconds=0.2)) as c:
        c.grid(spines=1, leaves=2, per_leaf=2)
        c.job("gang", pods=2, gpus=8, annotations={"voda.io/gpu-count": "16"})
        c.deployment("svc", replicas=1, gpus=4)
        sts = c.store.create("statefulsets.apps", c.namespace, {
            "metadata": {"name": "db"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
                                                 "serviceName": "db", "template": {}}})
        c.store.create("pods", c.namespace, {"metadata": {"name": "db-0", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
             "uid": sts["metadata"]["uid"], "controller": True}]}, "spec": {
            "schedulerName": "voda-scheduler", "containers": [{"name": "c", "image": "i"}]}})
        wait_for(lambda: len(c.bound_nodes("gang-")) == 2 and c.bound_nodes("svc-")
                 and c.bound_nodes("db-0"), what="everything bound")
        (node,) = c.bound_nodes("svc-")
        c.sim.set_ready(node, False)
        wait_for(lambda: c.events(reason="NodeNotReady"), what="the eviction")
        requests = list(c.api.requests)
    out = []
    for r in requests:
        if "voda/" not in r.user_agent:
            continue
        parts = r.path.strip("/").split("/")
        group = "" if parts[0] == "api" else parts[1]
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        namespaced = rest[0] == "namespaces"
        if namespaced:
            rest = rest[2:]
        resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
        name = rest[1] if len(rest) > 1 else None
        selector = parse_qs(r.query).get("fieldSelector", [""])[0]
        if name is None and selector.startswith("metadata.name="):
            name = selector.removeprefix("metadata.name=")  # list/watch of one object
        out.append((group, resource, r.verb, name, namespaced))
    return out


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
    used = {(g, r, v) for g, r, v, _, _ in requests}
    for rule in cluster_roles[POD_SCHEDULER] + namespaced_roles[POD_SCHEDULER]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert (group, resource, verb) in used, f"unused grant {resource} {verb}"
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
                and d["roleRef"]["name"] == POD_SCHEDULER]
    assert {b["subjects"][0]["name"] for b in bindings} == {"voda"}
