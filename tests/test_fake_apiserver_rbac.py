"""Conformance of the fake API server's authentication and RBAC (voda_testing/kube/authz.py)
with kube-apiserver's, through the official `kubernetes` client and `kubectl` 1.32: bearer
tokens (401 without one), 403 with the upstream wording, resourceNames, subresources
(pods/binding, */scale, */status), list and watch apart from get, namespaced Roles and
ClusterRoles bound in one namespace or cluster-wide."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from voda_testing.kube import FakeApiServer
from voda_testing.kube.authz import (
    load_rbac,
    request_attributes,
    rule_allows,
    service_account_user,
)

SA = "system:serviceaccount:team:worker"
RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
     "resourceNames": ["mine"], "verbs": ["get", "update", "list", "watch"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["*/scale"], "verbs": ["patch", "get"]},
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeApiServer]:
    """RBAC on: ServiceAccount team/worker holds RULES in namespace `team` (a Role) and
    `get nodes` cluster-wide (a ClusterRole); the ClusterRole `pod-reader` is bound to it
    in namespace `other` only."""
    server = FakeApiServer(bookmark_interval=0.2, tls=True).start()
    authz = server.enforce_rbac()
    load_rbac(server.store, [
        {"kind": "Namespace", "metadata": {"name": "team"}},
        {"kind": "Namespace", "metadata": {"name": "other"}},
        {"kind": "Role", "metadata": {"name": "worker", "namespace": "team"}, "rules": RULES},
        {"kind": "RoleBinding", "metadata": {"name": "worker", "namespace": "team"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "worker"},
         "subjects": [{"kind": "ServiceAccount", "name": "worker", "namespace": "team"}]},
        {"kind": "ClusterRole", "metadata": {"name": "node-reader"},
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]},
        {"kind": "ClusterRoleBinding", "metadata": {"name": "node-reader"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "node-reader"},
         "subjects": [{"kind": "Group", "name": "system:serviceaccounts:team"}]},
        {"kind": "ClusterRole", "metadata": {"name": "pod-reader"},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["watch"]}]},
        {"kind": "RoleBinding", "metadata": {"name": "pod-reader", "namespace": "other"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "pod-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "worker", "namespace": "team"}]},
    ])
    folder = tmp_path_factory.mktemp("rbac")
    server.kubeconfigs = {  # type: ignore[attr-defined]
        "worker": server.write_kubeconfig(folder / "worker", "team",
                                          authz.service_account_token("team", "worker")),
        "admin": server.write_kubeconfig(folder / "admin", "team", authz.admin_token()),
        "nobody": server.write_kubeconfig(folder / "nobody", "team"),
        "stranger": server.write_kubeconfig(folder / "stranger", "team", "not-a-token"),
    }
    store = server.store
    store.create("pods", "team", {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "c", "image": "i"}]}})
    store.create("leases.coordination.k8s.io", "team", {"metadata": {"name": "mine"}})
    store.create("leases.coordination.k8s.io", "team", {"metadata": {"name": "theirs"}})
    yield server
    server.stop()


def core(server: FakeApiServer, who: str) -> client.CoreV1Api:
    configuration = client.Configuration()
    config.load_kube_config(str(server.kubeconfigs[who]),  # type: ignore[attr-defined]
                            client_configuration=configuration)
    configuration.retries = 0
    return client.CoreV1Api(client.ApiClient(configuration))


def refused(call: Any, *args: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(client.ApiException) as caught:
        call(*args, **kwargs)
    return caught.value.status, json.loads(caught.value.body)


def kubectl(server: FakeApiServer, who: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "--kubeconfig",
                           str(server.kubeconfigs[who]), *args],  # type: ignore[attr-defined]
                          capture_output=True, text=True, timeout=60)


def test_requests_without_a_known_token_are_unauthorized(server: FakeApiServer) -> None:
    for who in ("nobody", "stranger"):
        status, body = refused(core(server, who).list_namespaced_pod, "team")
        assert status == 401
        assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "message": "Unauthorized",
                        "reason": "Unauthorized", "code": 401}
    done = kubectl(server, "stranger", "get", "pods")
    assert done.returncode == 1
    assert ("error: You must be logged in to the server (the server has asked for the "
            "client to provide credentials)") in done.stderr


def test_a_refusal_names_the_user_verb_resource_group_and_namespace(
        server: FakeApiServer) -> None:
    api = core(server, "worker")
    status, body = refused(api.patch_namespaced_pod, "p", "team", {"metadata": {}})
    assert status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == (
        f'pods "p" is forbidden: User "{SA}" cannot patch resource "pods" in API group "" '
        'in the namespace "team"')
    assert body["details"] == {"name": "p", "group": "", "kind": "pods"}
    status, body = refused(api.list_pod_for_all_namespaces)
    assert body["message"] == (f'pods is forbidden: User "{SA}" cannot list resource "pods" '
                               'in API group "" at the cluster scope')
    done = kubectl(server, "worker", "delete", "pod", "p", "-n", "team", "--wait=false")
    assert done.returncode == 1
    assert (f'Error from server (Forbidden): pods "p" is forbidden: User "{SA}" cannot '
            'delete resource "pods" in API group "" in the namespace "team"') in done.stderr


def test_granted_verbs_pass_and_list_watch_get_are_apart(server: FakeApiServer) -> None:
    api = core(server, "worker")
    assert api.read_namespaced_pod("p", "team").metadata.name == "p"
    assert [p.metadata.name for p in api.list_namespaced_pod("team").items] == ["p"]
    status, body = refused(api.list_namespaced_pod, "team", watch=True, timeout_seconds=1,
                           _preload_content=False)
    assert status == 403 and 'cannot watch resource "pods"' in body["message"]
    assert kubectl(server, "worker", "get", "pods", "-n", "team", "-o", "name"
                   ).stdout.split() == ["pod/p"]
    status, _ = refused(api.read_node, "absent")  # cluster-wide through a Group: not 403
    assert status == 404
    status, body = refused(api.list_node)
    assert status == 403 and "at the cluster scope" in body["message"]


def test_resource_names_limit_get_update_and_name_selected_lists(
        server: FakeApiServer) -> None:
    leases = client.CoordinationV1Api(core(server, "worker").api_client)
    assert leases.read_namespaced_lease("mine", "team").metadata.name == "mine"
    status, body = refused(leases.read_namespaced_lease, "theirs", "team")
    assert status == 403 and body["message"].startswith(
        'leases.coordination.k8s.io "theirs" is forbidden: ')
    assert 'cannot get resource "leases" in API group "coordination.k8s.io"' in body[
        "message"]
    status, _ = refused(leases.list_namespaced_lease, "team")  # no name: not granted
    assert status == 403
    named = leases.list_namespaced_lease("team", field_selector="metadata.name=mine")
    assert [item.metadata.name for item in named.items] == ["mine"]
    status, _ = refused(leases.list_namespaced_lease, "team",
                        field_selector="metadata.name=theirs")
    assert status == 403
    status, _ = refused(leases.create_namespaced_lease, "team",
                        {"metadata": {"name": "mine"}})  # create has no name to match
    assert status == 403


def test_subresources_are_granted_apart_from_their_resource(server: FakeApiServer) -> None:
    api = core(server, "worker")
    server.store.create("nodes", "", {"metadata": {"name": "n1"}})
    api.create_namespaced_pod_binding("p", "team", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}},
        _preload_content=False)  # the answer is a Status, not the Binding the model expects
    assert server.store.get("pods", "team", "p")["spec"]["nodeName"] == "n1"
    status, body = refused(api.create_namespaced_pod_eviction, "p", "team", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}})
    assert status == 403 and 'cannot create resource "pods/eviction"' in body["message"]
    status, body = refused(api.patch_namespaced_pod_status, "p", "team", {"status": {}})
    assert status == 403 and 'cannot patch resource "pods/status"' in body["message"]


def test_wildcard_subresources_and_status_rules(server: FakeApiServer) -> None:
    allowed = [{"apiGroups": ["kubeflow.org"], "resources": ["*/scale"], "verbs": ["patch"]}]
    scale = request_attributes("PATCH", "kubeflow.org",
                               ["namespaces", "team", "pytorchjobs", "j", "scale"], {})
    assert scale.combined == "pytorchjobs/scale" and rule_allows(allowed[0], scale)
    whole = request_attributes("PATCH", "kubeflow.org",
                               ["namespaces", "team", "pytorchjobs", "j"], {})
    assert not rule_allows(allowed[0], whole)
    status = request_attributes("GET", "batch", ["namespaces", "team", "jobs", "j", "status"],
                                {})
    assert rule_allows(RULES[4], status)
    assert not rule_allows(RULES[4], request_attributes(
        "GET", "batch", ["namespaces", "team", "jobs", "j"], {}))
    assert request_attributes("DELETE", "", ["namespaces", "team", "pods"], {}
                              ).verb == "deletecollection"
    assert request_attributes("GET", "", ["namespaces", "team"], {}).namespace == "team"


def test_a_cluster_role_bound_in_one_namespace_grants_only_there(
        server: FakeApiServer) -> None:
    authz = server.authorizer
    assert authz is not None
    user = service_account_user("team", "worker")
    assert authz.can(user, "watch", "", "pods", "other")
    assert not authz.can(user, "watch", "", "pods", "team")
    assert not authz.can(user, "watch", "", "pods")


def test_the_administrator_and_discovery(server: FakeApiServer) -> None:
    admin = core(server, "admin")
    assert {p.metadata.name for p in admin.list_pod_for_all_namespaces().items} >= {"p"}
    admin.patch_namespaced_pod("p", "team", {"metadata": {"labels": {"a": "b"}}})
    done = kubectl(server, "worker", "api-resources", "--api-group=coordination.k8s.io",
                   "-o", "name")
    assert done.returncode == 0 and "leases.coordination.k8s.io" in done.stdout


def test_roles_are_read_live(server: FakeApiServer) -> None:
    api = core(server, "worker")
    status, _ = refused(api.list_namespaced_config_map, "team")
    assert status == 403
    role = server.store.get("roles.rbac.authorization.k8s.io", "team", "worker")
    role["rules"] = [*RULES, {"apiGroups": [""], "resources": ["configmaps"],
                              "verbs": ["list"]}]
    server.store.update("roles.rbac.authorization.k8s.io", "team", "worker", role)
    try:
        assert api.list_namespaced_config_map("team").items == []
    finally:
        role = server.store.get("roles.rbac.authorization.k8s.io", "team", "worker")
        role["rules"] = RULES
        server.store.update("roles.rbac.authorization.k8s.io", "team", "worker", role)
