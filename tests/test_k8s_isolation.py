"""Training jobs are kept apart from Voda: they run in the jobs' namespace, never in Voda's
own (its Secrets, ServiceAccounts and Lease), and a submitted spec that names Voda's
ServiceAccount or refers to one of its Secrets is refused with a 422 naming the field."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from voda.backends.kubernetes.config import _own_namespace, kubernetes_settings
from voda.backends.kubernetes.manifests import check_document
from voda.backends.kubernetes.settings import KubernetesSettings
from voda.spec.errors import SpecError
from voda_testing.kube.cluster import WORK_ANNOTATION
from voda_testing.kube.harness import FakeCluster, eventually
from voda_testing.kube.replica import Replica

ROOT = Path(__file__).resolve().parent.parent
Doc = dict[str, Any]


def example(kind: str) -> Doc:
    return yaml.safe_load((ROOT / "examples" / f"{kind}.yaml").read_text())


def specs(doc: Doc) -> Doc:
    return doc["spec"].get("mpiReplicaSpecs") or doc["spec"]["pytorchReplicaSpecs"]


def pod(doc: Doc, role: str = "Worker") -> Doc:
    return specs(doc)[role]["template"]["spec"]


def container(doc: Doc, role: str = "Worker") -> Doc:
    return pod(doc, role)["containers"][0]


CASES: list[tuple[str, str, Callable[[Doc], None], str]] = [
    ("mpijob", "a launcher running as Voda's ServiceAccount",
     lambda d: pod(d, "Launcher").update(serviceAccountName="voda"),
     "spec.mpiReplicaSpecs.Launcher.template.spec.serviceAccountName"),
    ("pytorchjob", "workers as the pod scheduler's ServiceAccount (deprecated field)",
     lambda d: pod(d).update(serviceAccount="voda-pod-scheduler"),
     "spec.pytorchReplicaSpecs.Worker.template.spec.serviceAccount"),
    ("pytorchjob", "Voda's database URL mounted",
     lambda d: pod(d).setdefault("volumes", []).append(
         {"name": "db", "secret": {"secretName": "voda-db"}}),
     "spec.pytorchReplicaSpecs.Worker.template.spec.volumes[0].secret.secretName"),
    ("mpijob", "Voda's API tokens in a projected volume",
     lambda d: pod(d).setdefault("volumes", []).append(
         {"name": "t", "projected": {"sources": [{"secret": {"name": "voda-tokens"}}]}}),
     "spec.mpiReplicaSpecs.Worker.template.spec.volumes[0].projected.sources[0].secret.name"),
    ("pytorchjob", "the database password as environment",
     lambda d: container(d).setdefault("envFrom", []).append(
         {"secretRef": {"name": "voda-postgres"}}),
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].envFrom[0].secretRef.name"),
    ("mpijob", "another job's report token",
     lambda d: container(d, "Launcher").setdefault("env", []).append(
         {"name": "T", "valueFrom": {"secretKeyRef": {"name": "other-voda-report",
                                                      "key": "token"}}}),
     "spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].env[0].valueFrom"
     ".secretKeyRef.name"),
    ("pytorchjob", "the pod scheduler's token as an image pull secret",
     lambda d: pod(d).update(imagePullSecrets=[{"name": "voda-pod-scheduler-token"}]),
     "spec.pytorchReplicaSpecs.Worker.template.spec.imagePullSecrets[0].name"),
    ("mpijob", "an init container reading Voda's tokens",
     lambda d: pod(d).update(initContainers=[{"name": "i", "image": "busybox", "envFrom": [
         {"secretRef": {"name": "voda-tokens"}}]}]),
     "spec.mpiReplicaSpecs.Worker.template.spec.initContainers[0].envFrom[0].secretRef.name"),
]


@pytest.mark.parametrize("kind,_,change,field", CASES, ids=[c[1] for c in CASES])
def test_a_spec_reaching_for_vodas_credentials_is_refused_naming_the_field(
        kind: str, _: str, change: Callable[[Doc], None], field: str) -> None:
    doc = example(kind)
    check_document(copy.deepcopy(doc), 1, 4, KubernetesSettings())  # as shipped: accepted
    change(doc)
    with pytest.raises(SpecError) as refused:
        check_document(doc, 1, 4, KubernetesSettings())
    assert [e.field for e in refused.value.errors] == [field]


def test_a_job_may_use_secrets_and_service_accounts_of_its_own() -> None:
    doc = example("pytorchjob")
    pod(doc).update(serviceAccountName="trainer", imagePullSecrets=[{"name": "registry"}],
                    volumes=[{"name": "data", "secret": {"secretName": "dataset-creds"}}])
    check_document(doc, 1, 4, KubernetesSettings())


def test_the_jobs_never_share_vodas_namespace() -> None:
    base = KubernetesSettings(namespace="voda-jobs")
    assert _own_namespace(base, in_pod="voda").voda_namespace == "voda"
    with pytest.raises(ValueError, match=r"kubernetes\.namespace: the jobs must run apart"):
        _own_namespace(KubernetesSettings(namespace="voda"), in_pod="voda")
    with pytest.raises(ValueError, match=r"kubernetes\.namespace: the jobs must run apart"):
        _own_namespace(KubernetesSettings(namespace="x", voda_namespace="x"), in_pod="")
    # Outside a pod (a developer's kubeconfig) and unset: one namespace for both.
    assert _own_namespace(KubernetesSettings(namespace="dev"), in_pod="").voda_namespace == (
        "dev")

    class Server:
        kubernetes_settings = {"voda_namespace": "voda"}
        namespace = "voda"

    with pytest.raises(ValueError, match=r"kubernetes\.namespace"):
        kubernetes_settings(Server())


def test_in_a_pod_vodas_namespace_is_the_pods(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from voda.backends.kubernetes import config

    file = tmp_path / "namespace"
    file.write_text("voda\n")
    assert config.pod_namespace(str(file)) == "voda"
    assert config.pod_namespace(str(tmp_path / "absent")) == ""
    monkeypatch.setattr(config.pod_namespace, "__defaults__", (str(file),))
    jobs = KubernetesSettings(namespace="voda-jobs")
    assert _own_namespace(jobs).voda_namespace == "voda"
    with pytest.raises(ValueError, match=r"kubernetes\.namespace"):
        _own_namespace(KubernetesSettings(namespace="voda"))
    # With a kubeconfig (maybe another cluster's), the pod's namespace does not count.
    assert _own_namespace(KubernetesSettings(namespace="voda", kubeconfig="kc")
                          ).voda_namespace == "voda"


def test_voda_serve_refuses_to_run_jobs_in_its_own_namespace(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[kubernetes]\nvoda_namespace = "voda"\n')
    done = subprocess.run(
        [sys.executable, "-m", "voda.cli.main", "serve", "--backend", "kubernetes",
         "--kubeconfig", str(tmp_path / "absent"), "--namespace", "voda",
         "--db", f"sqlite:///{tmp_path / 'v.db'}"], cwd=ROOT, capture_output=True, text=True,
        timeout=60, env={"VODA_CONFIG": str(config), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert "kubernetes.namespace: the jobs must run apart from Voda's own namespace" in (
        done.stderr)


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeCluster]:
    with FakeCluster.running(tmp_path, nodes=1) as cluster:
        yield cluster


@pytest.mark.slow
def test_a_submission_naming_vodas_secret_gets_a_422_and_jobs_land_apart(
        tmp_path: Path, fake: FakeCluster) -> None:
    replica = Replica(tmp_path, fake, "voda-a")
    try:
        eventually(replica.leading, timeout=60)
        doc = example("pytorchjob")
        doc["metadata"]["annotations"][WORK_ANNOTATION] = "1000"
        doc["spec"]["elasticPolicy"]["maxReplicas"] = 2
        bad = copy.deepcopy(doc)
        container(bad)["env"].append({"name": "DB", "valueFrom": {"secretKeyRef": {
            "name": "voda-db", "key": "url"}}})
        headers = {"Content-Type": "application/yaml", **replica.auth}
        answer = httpx.post(f"{replica.url}/v1/jobs", content=yaml.safe_dump(bad),
                            headers=headers, timeout=30)
        assert answer.status_code == 422, answer.text
        assert ("spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[1]"
                ".valueFrom.secretKeyRef.name") in answer.text
        answer = httpx.post(f"{replica.url}/v1/jobs", content=yaml.safe_dump(doc),
                            headers=headers, timeout=30)
        assert answer.status_code == 201, answer.text
        store = fake.server.store
        eventually(lambda: store.list("pytorchjobs.kubeflow.org", fake.namespace)[0],
                   timeout=60)
        assert store.list("pytorchjobs.kubeflow.org", "voda")[0] == []
        assert store.list("pods", "voda")[0] == []
    finally:
        replica.stop()
