"""The pod scheduler's RBAC (deploy/base/pod-scheduler-rbac.yaml): it has a ServiceAccount
of its own; every request a whole pod-scheduling flow sends with it is granted (the fake
server enforces RBAC), and every grant of its roles is used by it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.podsched_harness import config_text, not_ready_tolerations, running_cluster
from voda.backends.kubernetes.api import SECRETS, ApiError, Kind, KubeApi
from voda_testing.kube import FakeApiServer
from voda_testing.kube.authz import Attributes as AuthzAttributes
from voda_testing.kube.cluster import SimSettings
from voda_testing.kube.deployed import DEPLOY, install_rbac, rendered
from voda_testing.kube.harness import eventually
from voda_testing.kube.rbac import seen, unused_in

POD_SCHEDULER = "voda-pod-scheduler"
USER = "system:serviceaccount:voda:voda-pod-scheduler"


def flow_requests(tmp_path: Path) -> list[AuthzAttributes]:
    """What the pod scheduler's ServiceAccount sends while it places a gang, a Deployment
    and a StatefulSet's pod, explains, reads its ConfigMap, evicts from a NotReady node,
    provisions a WaitForFirstConsumer claim, says a pod cannot be placed and preempts
    (under RBAC: a request its roles refuse fails the flow)."""
    # The stand-in's taint manager is slowed so that the pod scheduler is the one that
    # evicts from the NotReady node (both at 0 s, either could).
    with running_cluster(tmp_path, config=config_text(notReadyGraceSeconds=0.2),
                         sim=SimSettings(toleration_seconds_scale=100.0)) as c:
        c.grid(spines=1, leaves=2, per_leaf=2)
        c.store.create("priorityclasses", "", {"metadata": {"name": "high"}, "value": 1000})
        c.store.create("storageclasses", "", {"metadata": {"name": "local"},
                                              "provisioner": "x", "volumeBindingMode":
                                              "WaitForFirstConsumer"})
        c.store.create("persistentvolumeclaims", c.namespace, {
            "metadata": {"name": "scratch"}, "spec": {"storageClassName": "local"}})
        c.job("gang", pods=2, gpus=8, annotations={"voda.io/gpu-count": "16"})
        c.deployment("svc", replicas=1, gpus=4, tolerations=not_ready_tolerations(1), volumes=[
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
    return seen(requests, USER)


def test_the_pod_schedulers_rbac_is_exactly_what_it_uses(tmp_path: Path) -> None:
    docs = rendered(DEPLOY / "base")
    cluster_roles = {d["metadata"]["name"]: d["rules"] for d in docs
                     if d["kind"] == "ClusterRole"}
    (role,) = [d["rules"] for d in docs if d["kind"] == "Role"
               and d["metadata"]["name"] == POD_SCHEDULER]
    requests = flow_requests(tmp_path)
    assert {(a.combined, a.verb) for a in requests} >= {("pods/binding", "create"),
                                                        ("events", "create")}
    assert unused_in(cluster_roles[POD_SCHEDULER], requests) == []
    assert unused_in(role, requests, "voda") == []
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
                and d["roleRef"]["name"] == POD_SCHEDULER]
    assert [b["subjects"] for b in bindings] == [
        [{"kind": "ServiceAccount", "name": POD_SCHEDULER, "namespace": "voda"}]] * 2
    # Its own ServiceAccount, apart from Voda's: neither holds the other's grants.
    others = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
              and d["roleRef"]["name"] != POD_SCHEDULER]
    assert all(s["name"] != POD_SCHEDULER for b in others for s in b["subjects"])


def test_voda_serve_gives_the_pod_scheduler_its_own_credentials() -> None:
    from voda.podsched.service import pod_scheduler_settings

    class Server:
        kubernetes_settings = {"voda_namespace": "voda", "namespace": "voda-jobs"}
        pod_scheduler_settings = {"token_dir": "/var/run/secrets/voda-pod-scheduler"}

    settings = pod_scheduler_settings(Server())
    assert settings is not None
    assert settings.token_dir == "/var/run/secrets/voda-pod-scheduler"
    assert settings.config_map == "voda/voda-scheduler-config"
    (deployment,) = [d for d in rendered(DEPLOY / "base") if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["pod-scheduler-token"] == settings.token_dir
    secret = volumes["pod-scheduler-token"]["secret"]["secretName"]
    (token,) = [d for d in rendered(DEPLOY / "base") if d["kind"] == "Secret"
                and d["metadata"]["name"] == secret]
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"]["kubernetes.io/service-account.name"] == (
        POD_SCHEDULER)


def test_in_a_pod_the_pod_scheduler_sends_with_its_mounted_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """KubeApi.connect_token_dir as `[pod_scheduler] token_dir` uses it: the in-cluster
    address (KUBERNETES_SERVICE_HOST/PORT) and CA, the pod scheduler's token."""
    server = FakeApiServer(tls=True).start()
    try:
        tokens = install_rbac(server)
        folder = tmp_path / "voda-pod-scheduler"
        folder.mkdir()
        (folder / "token").write_text(tokens["pod-scheduler"])
        (folder / "ca.crt").write_bytes(server.ca_certificate or b"")
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", server.host)
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))
        api = KubeApi.connect_token_dir(str(folder), attempts=1)
        assert api.try_get(Kind("batch", "v1", "jobs"), "voda-jobs", "absent") is None
        with pytest.raises(ApiError) as refused:
            api.get(SECRETS, "voda", "voda-db")
        assert refused.value.status == 403 and (
            f'User "{USER}" cannot get resource "secrets"') in refused.value.message
    finally:
        server.stop()
