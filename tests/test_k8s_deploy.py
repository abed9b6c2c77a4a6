"""What Voda deploys and what it creates: the kustomization renders (with generated
Secrets, no shipped password, the ServiceMonitor optional) and its kinds validate against
Kubernetes 1.32 (kubernetes-validate); every pod passes Pod Security `restricted`; the
Dockerfile builds a pinned, non-root image; its RBAC grants exactly the requests a whole
flow makes (under RBAC); and `voda render` prints CRD-valid jobs."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from voda.backends.kubernetes import leader_service
from voda.backends.kubernetes.elector import LeaseElector
from voda.backends.kubernetes.manifests import report_secret_name
from voda.backends.kubernetes.settings import ElectorSettings, KubernetesSettings
from voda.core.model import Job
from voda.spec import crd, parse_document
from voda_testing.kube import Fault
from voda_testing.kube.authz import Attributes as AuthzAttributes
from voda_testing.kube.authz import service_account_user
from voda_testing.kube.cluster import WORK_ANNOTATION
from voda_testing.kube.harness import FakeCluster, eventually
from voda_testing.kube.rbac import seen, unused_in

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """`kubectl kustomize deploy/` after deploy/postgres/generate-secrets.sh, as the README
    says, in a copy of deploy/ (the generated files stay out of the tree)."""
    return render_with_secrets(tmp_path_factory.mktemp("deploy"))


def render_with_secrets(folder: Path, *components: str) -> list[dict[str, Any]]:
    copy = folder / "deploy"
    shutil.copytree(ROOT / "deploy", copy, dirs_exist_ok=True)
    for name in ("postgres.env", "db.env", "tokens.env"):
        (copy / "postgres" / name).unlink(missing_ok=True)
    subprocess.run(["sh", str(copy / "postgres" / "generate-secrets.sh")], check=True,
                   capture_output=True, timeout=30)
    if components:
        kustomization = copy / "kustomization.yaml"
        doc = yaml.safe_load(kustomization.read_text())
        doc["components"] = [*doc.get("components", []), *components]
        kustomization.write_text(yaml.safe_dump(doc))
    out = subprocess.run(["kubectl", "kustomize", str(copy)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_the_kustomization_renders_two_replicas_with_rbac_and_services(
        deployed: list[dict[str, Any]]) -> None:
    kinds = sorted({d["kind"] for d in deployed})
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment",
                     "Endpoints", "Namespace", "Role", "RoleBinding", "Secret", "Service",
                     "ServiceAccount", "StatefulSet"]
    (deployment,) = of_kind(deployed, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--backend=kubernetes" in args and "--namespace=voda-jobs" in args
    assert all(d["metadata"].get("namespace") in (None, "voda", "voda-jobs") for d in deployed)


def test_core_kinds_validate_against_kubernetes_1_32(deployed: list[dict[str, Any]]) -> None:
    for doc in deployed:
        kubernetes_validate.validate(doc, desired_version="1.32", strict=True)


def test_the_service_monitor_is_an_optional_component(tmp_path: Path) -> None:
    """Without the Prometheus Operator's CRDs `kubectl apply` refuses a ServiceMonitor:
    the default renders none, the `monitoring` component adds it."""
    with_monitor = render_with_secrets(tmp_path, "monitoring")
    (monitor,) = of_kind(with_monitor, "ServiceMonitor")
    assert monitor["metadata"]["namespace"] == "voda"
    assert monitor["spec"]["endpoints"][0]["port"] == "http"


def test_no_password_is_shipped_and_each_install_generates_its_own(tmp_path: Path) -> None:
    for name in ("postgres.env", "db.env", "tokens.env"):
        assert not (ROOT / "deploy" / "postgres" / name).exists() or subprocess.run(
            ["git", "check-ignore", "-q", f"deploy/postgres/{name}"], cwd=ROOT).returncode == 0
    shipped = subprocess.run(["git", "grep", "-il", "change-me", "--", "deploy"], cwd=ROOT,
                             capture_output=True, text=True).stdout
    assert shipped == ""
    bare = tmp_path / "bare"
    shutil.copytree(ROOT / "deploy", bare)
    for name in ("postgres.env", "db.env", "tokens.env"):
        (bare / "postgres" / name).unlink(missing_ok=True)
    refused = subprocess.run(["kubectl", "kustomize", str(bare)], capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode != 0 and "postgres.env" in refused.stderr

    def secrets(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
        return {d["metadata"]["name"].rsplit("-", 1)[0]: {
            k: base64.b64decode(v).decode() for k, v in (d.get("data") or {}).items()}
            for d in of_kind(docs, "Secret") if d.get("data")}

    first = secrets(render_with_secrets(tmp_path / "a"))
    second = secrets(render_with_secrets(tmp_path / "b"))
    password = first["voda-postgres"]["POSTGRES_PASSWORD"]
    assert len(password) >= 32 and password != second["voda-postgres"]["POSTGRES_PASSWORD"]
    assert f"voda:{password}@" in first["voda-db"]["url"]
    assert first["voda-tokens"]["tokens"] != second["voda-tokens"]["tokens"]
    again = subprocess.run(["sh", str(tmp_path / "a" / "deploy" / "postgres" /
                                      "generate-secrets.sh")], capture_output=True, text=True)
    assert again.returncode == 1 and "not overwritten" in again.stderr


def pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in docs
            if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")]


def restricted_violations(name: str, pod: dict[str, Any]) -> list[str]:
    """Pod Security Standards `restricted` (v1.32), the checks a pod template can fail."""
    out = []
    pod_context = pod.get("securityContext") or {}
    if (pod_context.get("seccompProfile") or {}).get("type") not in (
            "RuntimeDefault", "Localhost"):
        out.append(f"{name}: securityContext.seccompProfile.type must be RuntimeDefault")
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(f"{name}: {key}")
    for volume in pod.get("volumes") or ():
        if set(volume) - {"name", "configMap", "csi", "downwardAPI", "emptyDir",
                          "ephemeral", "persistentVolumeClaim", "projected", "secret"}:
            out.append(f"{name}: volume {volume['name']} of a kind restricted forbids")
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        where = f"{name}/{container['name']}"
        context = container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where}: allowPrivilegeEscalation must be false")
        if context.get("privileged"):
            out.append(f"{where}: privileged")
        if (context.get("capabilities") or {}).get("drop") != ["ALL"]:
            out.append(f"{where}: capabilities.drop must be [ALL]")
        if set((context.get("capabilities") or {}).get("add") or ()) - {"NET_BIND_SERVICE"}:
            out.append(f"{where}: capabilities.add beyond NET_BIND_SERVICE")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            out.append(f"{where}: runAsNonRoot must be true")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            out.append(f"{where}: runAsUser 0")
        if context.get("seccompProfile", {}).get("type") == "Unconfined":
            out.append(f"{where}: seccompProfile Unconfined")
        for port in container.get("ports") or ():
            if port.get("hostPort"):
                out.append(f"{where}: hostPort")
    return out


def test_every_pod_passes_pod_security_restricted(deployed: list[dict[str, Any]]) -> None:
    pods = pod_specs(deployed)
    assert {name for name, _ in pods} == {"voda", "voda-postgres"}
    assert [v for name, pod in pods for v in restricted_violations(name, pod)] == []
    (namespace,) = [d for d in of_kind(deployed, "Namespace")
                    if d["metadata"]["name"] == "voda"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_restricted_check_catches_what_it_should() -> None:
    pod = {"containers": [{"name": "c", "securityContext": {}}]}
    found = restricted_violations("p", pod)
    assert len(found) == 4 and any("seccompProfile" in v for v in found)


def test_the_dockerfile_builds_a_pinned_non_root_image_without_secrets() -> None:
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    bases = [line.split()[1] for line in lines if line.upper().startswith("FROM ")]
    # Both stages on one full Python and Debian release (no floating `3.11` or `latest`).
    assert len(bases) == 2 and len(set(bases)) == 1
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", bases[0])
    users = [line.split()[1] for line in lines if line.upper().startswith("USER ")]
    assert users and users[-1].split(":")[0] == "10001"  # the Deployment's runAsUser
    assert lines.index(next(x for x in lines if x.startswith("USER "))) > lines.index(
        next(x for x in lines if x.startswith("FROM ") and " AS " not in x))
    assert any(line.startswith("RUN pip install") and line.endswith(" .") for line in lines)
    copies = [line.split()[1:-1] for line in lines if line.upper().startswith(("ADD ", "COPY "))]
    assert copies and not [s for sources in copies for s in sources if s == "." or any(
        w in s for w in (".env", "secret", "token", "kubeconfig"))]  # no whole context
    assert not [line for line in lines if line.upper().startswith(("ENV ", "ARG "))
                and any(s in line.upper() for s in ("PASSWORD", "TOKEN", "SECRET", "KEY="))]
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", "deploy/postgres/*.env"} <= set(ignored)


def on_nodes(cluster: FakeCluster, job: str) -> list[str]:
    pods, _ = cluster.server.store.list("pods", "default", f"voda.io/job={job}")
    return sorted(p["spec"].get("nodeName") or "" for p in pods
                  if (p.get("status") or {}).get("phase") == "Running"
                  and not p["metadata"].get("deletionTimestamp"))


VODA = "system:serviceaccount:voda:voda"


@pytest.fixture
def flow_requests(tmp_path: Path) -> Iterator[tuple[FakeCluster, list[AuthzAttributes]]]:
    """What the authorizer checked of every request Voda's ServiceAccount sends while the
    leader elects, routes its Service to itself, runs an MPIJob and a PyTorchJob (with
    their report Secrets, one left by an earlier leader), pins, resizes, migrates and
    halts them, shows a change of their reason on them, and steps down; under RBAC, so a
    missing grant fails it."""
    cluster = FakeCluster.start(tmp_path)
    for i in range(3):
        cluster.sim.add_node(f"n{i}", 4)
    elector = LeaseElector(cluster.api(), cluster.voda_namespace, ElectorSettings(
        lease_seconds=3, renew_deadline_seconds=2, retry_seconds=0.5))
    assert elector.acquire()
    elector.start_renewing()
    os.environ["POD_IP"] = "10.0.0.7"
    try:
        assert leader_service.publish(elector.api, cluster.voda_namespace, "voda", 8470)
    finally:
        del os.environ["POD_IP"]
    backend = cluster.backend(KubernetesSettings(
        unschedulable_seconds=2.0, report_url="http://voda.voda.svc:8470"),
        fence=elector.may_act)
    backend.running()
    cluster.server.add_fault(Fault(409, verb="patch", resource="pods", times=1))
    # Report Secrets an earlier leader left, owned by objects of an earlier run.
    for name, kind in (("mpijob", "MPIJob"), ("pytorchjob", "PyTorchJob")):
        cluster.server.store.create("secrets", "default", {
            "metadata": {"name": report_secret_name(name), "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": kind, "name": name,
                 "uid": f"uid-of-an-earlier-{name}"}]}, "data": {}})
    for kind in ("mpijob", "pytorchjob"):
        doc = yaml.safe_load((ROOT / "examples" / f"{kind}.yaml").read_text())
        doc["metadata"]["annotations"][WORK_ANNOTATION] = "1000"
        backend.specs[kind] = doc
        backend.report_tokens[kind] = f"vr1.report-token-of-{kind}"  # type: ignore[index]
        job = Job(kind, 1, 4)
        backend.start(job, (("n0", 1),))
        eventually(lambda k=kind: on_nodes(cluster, k) == ["n0"])
        backend.scale(job, (("n1", 1), ("n2", 1)))
        eventually(lambda k=kind: on_nodes(cluster, k) == ["n1", "n2"])
        # a change of its reason: an Event and the VodaAtMax condition (status subresource)
        backend.note_reason(kind, "Shared", "Holds 2 of its max 4 GPUs.", 0.0)
        eventually(lambda k=kind: any(
            c["type"] == "VodaAtMax" for c in (cluster.server.store.get(
                f"{k}s", "default", k).get("status") or {}).get("conditions") or []))
        backend.halt(job)
    # a create the server refuses for good: the job fails and its object gets an Event
    cluster.server.add_fault(Fault(422, verb="create", resource="mpijobs", times=1))
    backend.specs["refused"] = yaml.safe_load((ROOT / "examples" / "mpijob.yaml").read_text())
    backend.start(Job("refused", 1, 4), (("n0", 1),))
    eventually(lambda: cluster.server.store.list("events", "default")[0])
    eventually(lambda: not cluster.server.store.list("pods", "default", "voda.io/job")[0])
    assert leader_service.withdraw(elector.api, cluster.voda_namespace, "voda")
    elector.release()
    cluster.stop()  # fails on any request RBAC refused
    yield cluster, seen(cluster.server.requests, VODA)


def test_rbac_grants_exactly_the_requests_voda_makes(
        deployed: list[dict[str, Any]], flow_requests: Any) -> None:
    cluster, requests = flow_requests
    assert {(a.group, a.combined, a.verb) for a in requests} >= {
        ("kubeflow.org", "mpijobs", "get"), ("kubeflow.org", "pytorchjobs", "get"),
        ("", "endpoints", "patch"),
        ("coordination.k8s.io", "leases", "update")}
    roles = {(d["metadata"].get("namespace"), d["metadata"]["name"]): d["rules"]
             for d in deployed if d["kind"] in ("Role", "ClusterRole")}
    bound = [(d["metadata"].get("namespace"), d["roleRef"]["name"]) for d in deployed
             if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
             and {"kind": "ServiceAccount", "name": "voda", "namespace": "voda"}
             in d["subjects"]]
    assert sorted(bound, key=str) == sorted(
        [(None, "voda-cluster-view"), ("voda", "voda"), ("voda-jobs", "voda")], key=str)
    jobs = {"voda-jobs": cluster.namespace}
    for namespace, name in bound:
        rules = roles[(namespace, name)]
        assert unused_in(rules, requests, jobs.get(namespace, namespace)) == [], name


def test_the_roles_refuse_what_voda_never_needs(tmp_path: Path) -> None:
    """Conformance of the RBAC itself: Voda's ServiceAccount cannot read Secrets outside
    the jobs' namespace, nor touch another Lease, nor bind pods (the pod scheduler's)."""
    cluster = FakeCluster.start(tmp_path)
    cluster.allow_denied = True
    try:
        authz = cluster.server.authorizer
        assert authz is not None
        voda = service_account_user("voda", "voda")
        scheduler = service_account_user("voda", "voda-pod-scheduler")
        assert authz.can(voda, "get", "", "secrets", "default", "x-voda-report")
        assert not authz.can(voda, "get", "", "secrets", "voda", "voda-db")
        assert not authz.can(voda, "list", "", "secrets", "default")
        assert authz.can(voda, "update", "coordination.k8s.io", "leases", "voda",
                         "voda-leader")
        assert not authz.can(voda, "update", "coordination.k8s.io", "leases", "voda",
                             "someone-elses")
        assert not authz.can(voda, "create", "", "pods", "default", "p", "binding")
        assert authz.can(scheduler, "create", "", "pods", "default", "p", "binding")
        assert not authz.can(scheduler, "get", "", "secrets", "voda", "voda-db")
        assert not authz.can(scheduler, "patch", "kubeflow.org", "mpijobs", "default", "j")
    finally:
        cluster.stop()


# ----- voda render -------------------------------------------------------------------------------
def render(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "voda.cli.main", "render", *args],
                          capture_output=True, text=True, input=stdin, timeout=60, cwd=ROOT)


@pytest.mark.parametrize("example", ["mpijob.yaml", "pytorchjob.yaml"])
def test_examples_render_into_objects_valid_against_their_crd(example: str) -> None:
    done = render("-f", f"examples/{example}", "--workers", "3", "--nodes", "n1:2,n2",
                  "-o", "json")
    assert done.returncode == 0, done.stderr
    obj = json.loads(done.stdout)
    assert crd.schema_errors(obj) == []
    assert parse_document(obj).max_workers >= 3  # still a submittable job
    annotations = obj["metadata"]["annotations"]
    assert json.loads(annotations["voda.io/plan"]) == {"0": "n1", "1": "n1", "2": "n2"}
    specs = obj["spec"].get("mpiReplicaSpecs") or obj["spec"]["pytorchReplicaSpecs"]
    assert specs["Worker"]["replicas"] == 3
    assert {"name": "voda.io/placement"} in specs["Worker"]["template"]["spec"][
        "schedulingGates"]
    if "mpiReplicaSpecs" in obj["spec"]:
        command = specs["Launcher"]["template"]["spec"]["containers"][0]["command"]
        assert command[:11] == ["horovodrun", "-np", "3", "--min-np", "1", "--max-np", "4",
                                "--host-discovery-script", "/etc/mpi/discover_hosts.sh",
                                "--slots-per-host", "1"]
    else:
        assert obj["spec"]["elasticPolicy"]["minReplicas"] == 1


def test_a_compact_spec_with_an_image_renders_as_an_elastic_pytorchjob() -> None:
    done = render("-f", "-", "--workers", "2", stdin=yaml.safe_dump(
        {"name": "tiny", "image": "busybox", "command": "sleep 60", "min": 1, "max": 2}))
    assert done.returncode == 0, done.stderr
    obj = yaml.safe_load(done.stdout)
    assert obj["kind"] == "PyTorchJob" and obj["spec"]["elasticPolicy"]["maxReplicas"] == 2
    assert crd.schema_errors(obj) == []


@pytest.mark.parametrize("example", ["mpijob.yaml", "pytorchjob.yaml"])
def test_render_with_a_report_url_shows_the_report_channel_in_every_container(
        example: str) -> None:
    done = render("-f", f"examples/{example}", "--workers", "2", "-o", "json",
                  "--report-url", "http://voda.team.svc:8470")
    assert done.returncode == 0, done.stderr
    obj = json.loads(done.stdout)
    assert crd.schema_errors(obj) == []
    specs = obj["spec"].get("mpiReplicaSpecs") or obj["spec"]["pytorchReplicaSpecs"]
    containers = [c for replica in specs.values()
                  for c in replica["template"]["spec"]["containers"]]
    assert containers
    job = obj["metadata"]["labels"]["voda.io/job"]
    for container in containers:
        env = {e["name"]: e for e in container["env"]}
        assert env["VODA_REPORT"]["value"] == "http://voda.team.svc:8470"
        assert env["VODA_JOB"]["value"] == job
        ref = env["VODA_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert ref["name"].endswith("-voda-report") and "value" not in env["VODA_TOKEN"]
    without = json.loads(render("-f", f"examples/{example}", "--workers", "2",
                                "-o", "json").stdout)
    assert "VODA_REPORT" not in json.dumps(without)


@pytest.mark.parametrize("args,code,message", [
    (["--workers", "2", "--report-url", "ftp://x"], 2,
     "report-url: expected an http(s) URL with a host, got 'ftp://x'"),
    (["--workers", "9"], 2, "workers: must lie in [min, max] = [1, 4], got 9"),
    (["--workers", "2", "--nodes", "n1"], 2, "nodes: place 2 workers, got 1"),
    (["--workers", "2", "--nodes", "n1:x"], 2, "nodes: expected NODE or NODE:WORKERS"),
    (["--workers", "2", "-o", "xml"], 2, "output: expected yaml or json"),
], ids=["a report URL that is no http URL", "more workers than max",
        "fewer nodes than workers", "a count that is no number", "an unknown output format"])
def test_render_refuses_bad_input_naming_the_field(args: list[str], code: int,
                                                   message: str) -> None:
    done = render("-f", "examples/mpijob.yaml", *args)
    assert done.returncode == code and message in done.stderr


def test_render_refuses_what_the_backend_could_never_create() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "mpijob.yaml").read_text())
    doc["spec"]["slotsPerWorker"] = 2
    done = render("-f", "-", "--workers", "2", stdin=yaml.safe_dump(doc))
    assert done.returncode == 1 and "spec.slotsPerWorker" in done.stderr
