"""What Voda deploys and what it creates: the kustomization renders and its core kinds
validate against Kubernetes 1.32 (kubernetes-validate), its RBAC grants exactly the
requests a whole flow makes, and `voda render` prints CRD-valid jobs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from voda.backends.kubernetes.elector import LeaseElector
from voda.backends.kubernetes.settings import ElectorSettings, KubernetesSettings
from voda.core.model import Job
from voda.spec import crd, parse_document
from voda_testing.kube import Fault
from voda_testing.kube.cluster import WORK_ANNOTATION
from voda_testing.kube.harness import FakeCluster, eventually
from voda_testing.kube.rbac import granted, made_by, unused

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def deployed() -> list[dict[str, Any]]:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "deploy")], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_the_kustomization_renders_two_replicas_with_rbac_service_and_monitor(
        deployed: list[dict[str, Any]]) -> None:
    kinds = sorted({d["kind"] for d in deployed})
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Deployment", "Namespace", "Role",
                     "RoleBinding", "Secret", "Service", "ServiceAccount", "ServiceMonitor",
                     "StatefulSet"]
    (deployment,) = of_kind(deployed, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--backend=kubernetes" in args
    assert all(d["metadata"].get("namespace") in (None, "voda") for d in deployed)


def test_core_kinds_validate_against_kubernetes_1_32(deployed: list[dict[str, Any]]) -> None:
    checked = 0
    for doc in deployed:
        if doc["kind"] == "ServiceMonitor":  # a Prometheus Operator CRD: no schema here
            continue
        kubernetes_validate.validate(doc, desired_version="1.32", strict=True)
        checked += 1
    assert checked == len(deployed) - 1


def on_nodes(cluster: FakeCluster, job: str) -> list[str]:
    pods, _ = cluster.server.store.list("pods", "default", f"voda.io/job={job}")
    return sorted(p["spec"].get("nodeName") or "" for p in pods
                  if (p.get("status") or {}).get("phase") == "Running"
                  and not p["metadata"].get("deletionTimestamp"))


@pytest.fixture
def flow_requests(tmp_path: Path) -> Iterator[list[tuple[str, str, str, str | None, bool]]]:
    """(group, resource, verb, name, namespaced) of every request a flow sends: the leader
    elects, runs an MPIJob and a PyTorchJob (with their report Secrets), pins, resizes,
    migrates and halts them."""
    cluster = FakeCluster.start(tmp_path)
    for i in range(3):
        cluster.sim.add_node(f"n{i}", 4)
    elector = LeaseElector(cluster.api(), "default", ElectorSettings(
        lease_seconds=3, renew_deadline_seconds=2, retry_seconds=0.5))
    assert elector.acquire()
    elector.start_renewing()
    backend = cluster.backend(KubernetesSettings(
        unschedulable_seconds=2.0, report_url="http://voda.voda.svc:8470"),
        fence=elector.may_act)
    backend.running()
    cluster.server.add_fault(Fault(409, verb="patch", resource="pods", times=1))
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
        backend.halt(job)
    # a create the server refuses for good: the job fails and its object gets an Event
    cluster.server.add_fault(Fault(422, verb="create", resource="mpijobs", times=1))
    backend.specs["refused"] = yaml.safe_load((ROOT / "examples" / "mpijob.yaml").read_text())
    backend.start(Job("refused", 1, 4), (("n0", 1),))
    eventually(lambda: cluster.server.store.list("events", "default")[0])
    eventually(lambda: not cluster.server.store.list("pods", "default", "voda.io/job")[0])
    elector.release()
    cluster.stop()
    yield made_by(cluster.server.requests, "voda/")


def test_rbac_grants_exactly_the_requests_voda_makes(
        deployed: list[dict[str, Any]], flow_requests: list[Any]) -> None:
    (cluster_role,) = [d for d in of_kind(deployed, "ClusterRole")
                       if d["metadata"]["name"] == "voda-cluster-view"]
    (role,) = [d for d in of_kind(deployed, "Role") if d["metadata"]["name"] == "voda"]
    for group, resource, verb, name, namespaced in flow_requests:
        rules = cluster_role["rules"] + (role["rules"] if namespaced else [])
        assert granted(rules, group, resource, verb, name), (group, resource, verb, name)
    assert unused(cluster_role["rules"] + role["rules"], flow_requests) == []


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
