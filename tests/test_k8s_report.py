"""The report channel on Kubernetes, against the fake API server and the cluster simulator.

The backend alone: each job's Secret is created before its object, owned by it, recreated
when missing, replaced when an earlier run left it, and gone with the job. Then the whole
service (`voda serve --backend kubernetes`, real HTTP on loopback): a test plays the pod,
reads its env and its Secret, reports an epoch and a goodput model with voda.training.report, and
the job's detail shows them; a report token is refused on another job, on every other
route, after the job is deleted, and still holds after the service restarts.
"""

from __future__ import annotations

import base64
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml
from goodput_reports import body as goodput_body

import voda.training.report
from voda.api.report_tokens import ReportKeys
from voda.backends.kubernetes.manifests import object_name, report_secret_name
from voda.backends.kubernetes.settings import KubernetesSettings
from voda.core.model import Job
from voda_testing.kube.cluster import WORK_ANNOTATION
from voda_testing.kube.harness import FakeCluster, eventually

ROOT = Path(__file__).resolve().parent.parent
NS = "default"


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeCluster]:
    with FakeCluster.running(tmp_path, nodes=2) as cluster:
        yield cluster


def document(kind: str, name: str, workers: int = 2, work: float = 3600) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / f"{kind}.yaml").read_text())
    doc["metadata"]["name"] = name
    annotations = doc["metadata"].setdefault("annotations", {})
    annotations.update({WORK_ANNOTATION: str(work), "voda.io/min-workers": str(workers),
                        "voda.io/max-workers": str(workers), "voda.io/gpu-type": "default"})
    annotations.pop("voda.io/category", None)
    if kind == "pytorchjob":
        doc["spec"]["elasticPolicy"].update(minReplicas=workers, maxReplicas=workers)
    return doc


def secret_of(cluster: FakeCluster, job: str) -> dict[str, Any] | None:
    return cluster.server.store.try_get("secrets", NS, report_secret_name(job))


def object_of(cluster: FakeCluster, kind: str, job: str) -> dict[str, Any] | None:
    return cluster.server.store.try_get(kind, NS, object_name(job))


def owned_by_current(cluster: FakeCluster, kind: str, job: str) -> bool:
    secret, obj = secret_of(cluster, job), object_of(cluster, kind, job)
    if secret is None or obj is None or secret["metadata"].get("deletionTimestamp"):
        return False
    owners = [r["uid"] for r in secret["metadata"].get("ownerReferences") or ()]
    return owners == [obj["metadata"]["uid"]]


def token_in(secret: dict[str, Any]) -> str:
    return base64.b64decode(secret["data"]["token"]).decode()


# ----- the backend ---------------------------------------------------------------------------
def test_the_backend_keeps_each_jobs_secret_beside_its_object(fake: FakeCluster) -> None:
    settings = KubernetesSettings(namespace=NS, unschedulable_seconds=2.0,
                                  report_url="http://voda.voda.svc:8470",
                                  report_secret_check_seconds=0.3)
    backend = fake.backend(settings)
    backend.running()
    jobs = {"mpi-a": ("mpijobs", "mpijob"), "torch-b": ("pytorchjobs", "pytorchjob")}
    # A Secret an earlier run left (owned by an object long gone) is replaced.
    fake.server.store.create("secrets", NS, {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": report_secret_name("mpi-a"), "ownerReferences": [{
            "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "mpi-a",
            "uid": "00000000-0000-0000-0000-000000000001"}]},
        "data": {"token": base64.b64encode(b"stale").decode()}})
    for job, (_, example) in jobs.items():
        backend.specs[job] = document(example, job, work=600)
        backend.report_tokens[job] = f"vr1.token-of-{job}"  # type: ignore[index]
        backend.start(Job(job, 2, 2), (("n0", 1), ("n1", 1)))
    for job, (plural, _) in jobs.items():
        eventually(lambda j=job, p=plural: owned_by_current(fake, p, j))
        secret = secret_of(fake, job)
        assert secret is not None and token_in(secret) == f"vr1.token-of-{job}"
        kubernetes_validate.validate({k: v for k, v in secret.items() if k != "metadata"} | {
            "metadata": {"name": secret["metadata"]["name"],
                         "ownerReferences": secret["metadata"]["ownerReferences"]}},
            desired_version="1.32", strict=True)
        obj = object_of(fake, plural, job)
        assert obj is not None and "token-of" not in yaml.safe_dump(obj)  # never in the CR
        specs = obj["spec"].get("mpiReplicaSpecs") or obj["spec"]["pytorchReplicaSpecs"]
        for role, spec in specs.items():
            for container in spec["template"]["spec"]["containers"]:
                names = {e["name"]: e for e in container.get("env", [])}
                assert names["VODA_JOB"]["value"] == job, role
                assert names["VODA_TOKEN"]["valueFrom"]["secretKeyRef"] == {
                    "name": report_secret_name(job), "key": "token"}
        # the pods the operator made from the templates carry it too
        pods = eventually(lambda j=job: fake.server.store.list("pods", NS,
                                                               f"voda.io/job={j}")[0])
        assert all("VODA_TOKEN" in [e["name"] for e in c.get("env", [])]
                   for p in pods for c in p["spec"]["containers"])
    # Deleted by someone: recreated, owned again.
    fake.server.store.delete("secrets", NS, report_secret_name("torch-b"))
    eventually(lambda: owned_by_current(fake, "pytorchjobs", "torch-b"))
    # A new run (an evicted worker failed the MPIJob): its new object owns a Secret again.
    first = object_of(fake, "mpijobs", "mpi-a")
    assert first is not None
    worker = eventually(lambda: [p for p in fake.server.store.list(
        "pods", NS, "voda.io/job=mpi-a")[0] if (p["spec"].get("nodeName"))])[0]
    fake.sim.evict(NS, worker["metadata"]["name"])
    eventually(lambda: (object_of(fake, "mpijobs", "mpi-a") or first)["metadata"]["uid"]
               != first["metadata"]["uid"] and owned_by_current(fake, "mpijobs", "mpi-a"))
    # Halted: the object goes, and its Secret with it.
    for job in jobs:
        backend.halt(Job(job, 2, 2))
    eventually(lambda: all(secret_of(fake, j) is None for j in jobs))
    assert backend.stats.get("errors", 0) == 0


def test_without_a_report_url_no_secret_is_made(fake: FakeCluster) -> None:
    backend = fake.backend()
    backend.running()
    assert backend.report_tokens is None
    backend.specs["plain"] = document("pytorchjob", "plain", work=600)
    backend.start(Job("plain", 2, 2), (("n0", 2),))
    obj = eventually(lambda: object_of(fake, "pytorchjobs", "plain"))
    assert "VODA_TOKEN" not in yaml.safe_dump(obj)
    assert fake.server.store.list("secrets", NS)[0] == []


# ----- the whole service -------------------------------------------------------------------
class Service:
    """`voda serve --backend kubernetes` on the fake cluster, with report_url set to its
    own loopback address (which a pod would reach through the cluster's Service)."""

    def __init__(self, tmp_path: Path, fake: FakeCluster) -> None:
        from conftest import TOKENS_ENV, free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp_path / "config.toml"
        config.write_text("[kubernetes]\nlease_seconds = 3.0\nrenew_deadline_seconds = 2.0\n"
                          f"retry_seconds = 0.5\nreport_url = \"{self.url}\"\n"
                          'voda_namespace = "voda"\n[pod_scheduler]\n'
                          f'kubeconfig = "{fake.kubeconfig_of("pod-scheduler")}"\n')
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
        self.env.update(VODA_CONFIG=str(config), VODA_TOKENS=TOKENS_ENV)
        self.args = [sys.executable, "-m", "voda.cli.main", "serve", "--backend",
                     "kubernetes", "--kubeconfig", str(fake.kubeconfig), "--namespace", NS,
                     "--db", f"sqlite:///{tmp_path / 'voda.db'}", "--port", str(self.port),
                     "--rate-limit", "0.3", "--step-interval", "0.2"]
        self.log = tmp_path / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        self.proc = subprocess.Popen(self.args, cwd=ROOT, env=self.env,
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        eventually(lambda: self._up() or self.proc.poll() is not None,  # type: ignore[union-attr]
                   timeout=60)
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        return self

    def _up(self) -> bool:
        try:
            health = httpx.get(f"{self.url}/healthz", timeout=1.0)
            # A standby answers /healthz too (its readiness), as a standby.
            return health.status_code == 200 and health.json().get("role") != "standby"
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def service(tmp_path: Path, fake: FakeCluster) -> Iterator[Service]:
    server = Service(tmp_path, fake).start()
    yield server
    server.stop()


def stored_values(db: Path) -> list[str]:
    with sqlite3.connect(db) as connection:
        return [str(v) for (v,) in connection.execute("SELECT value FROM service_state")]


def submit(client: httpx.Client, doc: dict[str, Any]) -> str:
    response = client.post("/v1/jobs", content=yaml.safe_dump(doc),
                           headers={"Content-Type": "application/yaml"})
    assert response.status_code == 201, response.text
    return str(response.json()["uid"])  # the key of the job's objects and Secret


def pod_env(fake: FakeCluster, job: str) -> dict[str, str]:
    """What the kubelet gives a worker of `job`: its env, VODA_TOKEN read from the Secret."""
    pods = eventually(lambda: fake.server.store.list("pods", NS, f"voda.io/job={job}")[0])
    out = {}
    for entry in pods[0]["spec"]["containers"][0]["env"]:
        if "value" in entry:
            out[entry["name"]] = entry["value"]
        elif "secretKeyRef" in entry.get("valueFrom", {}):
            ref = entry["valueFrom"]["secretKeyRef"]
            secret = fake.server.store.get("secrets", NS, ref["name"])
            out[entry["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
    return out


def as_the_pod(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    report = voda.training.report
    for name in (report.REPORT_ENV, report.JOB_ENV, report.TOKEN_ENV):
        monkeypatch.setenv(name, env[name])
    monkeypatch.delenv("RANK", raising=False)


def report_goodput() -> bool:
    report = goodput_body()
    return voda.training.report.goodput(report["observations"], report["grad_sqr"],
                               report["grad_var"], report["limits"],
                               report["epoch_samples"])


def test_a_pod_reports_to_the_service_with_its_own_token_and_nothing_else(
        tmp_path: Path, fake: FakeCluster, service: Service,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import TOKENS

    alice, bob = service.client(TOKENS["alice"]), service.client(TOKENS["bob"])
    job_a = submit(alice, document("mpijob", "rep-a"))
    job_b = submit(alice, document("pytorchjob", "rep-b"))
    job_c = submit(bob, document("pytorchjob", "rep-c", workers=1))
    running = {job_a, job_b}
    eventually(lambda: all(alice.get(f"/v1/jobs/{j}").json()["status"] == "Running"
                           for j in running), timeout=60)
    env = pod_env(fake, job_a)
    assert env["VODA_REPORT"] == service.url and env["VODA_JOB"] == job_a
    token = env["VODA_TOKEN"]
    assert token.startswith("vr1.") and token not in yaml.safe_dump(
        object_of(fake, "mpijobs", job_a))

    # The pod reports with voda.training.report, as a training script does.
    as_the_pod(monkeypatch, env)
    assert voda.training.report.epoch(epoch=2, seconds=41.5, workers=2)
    assert report_goodput()
    detail = alice.get(f"/v1/jobs/{job_a}").json()
    assert detail["epoch_time_by_workers"] == {"2": 41.5}
    assert detail["completed_epochs"] == 2.0
    assert detail["goodput"]["reported"] is True and detail["goodput"]["measured_gpus"] == 2

    # Refused: another job (alice's own and bob's), every other route, a forged token.
    pod = service.client(token)
    epoch = {"epoch": 3, "epoch_seconds": 40.0, "workers": 2}
    for other in (job_b, job_c, "no-such-job"):
        refused = pod.post(f"/v1/jobs/{other}/metrics", json=epoch)
        assert refused.status_code == 403, refused.text
        assert "only for the job it was issued to" in refused.json()["error"]
        assert pod.post(f"/v1/jobs/{other}/goodput", json=goodput_body()).status_code == 403
    for method, path, body in [
            ("GET", "/v1/jobs", None), ("GET", f"/v1/jobs/{job_a}", None),
            ("GET", f"/v1/jobs/{job_a}/history", None), ("DELETE", f"/v1/jobs/{job_a}", None),
            ("PATCH", f"/v1/jobs/{job_a}", {"priority": 0}), ("GET", "/v1/cluster", None),
            ("GET", "/v1/schedulers/default", None),
            ("PUT", "/v1/schedulers/default", {"algorithm": "FIFO"}),
            ("POST", "/v1/nodes", {"name": "x", "gpus": 1}),
            ("DELETE", "/v1/nodes/n0", None)]:
        refused = pod.request(method, path, json=body)
        assert refused.status_code == 403, (method, path, refused.text)
        assert "report token may only report" in refused.json()["error"]
    submitted = pod.post("/v1/jobs", content=yaml.safe_dump(document("mpijob", "x")),
                         headers={"Content-Type": "application/yaml"})
    assert submitted.status_code == 403
    login = httpx.post(f"{service.url}/ui/login", data={"token": token}, timeout=10,
                       headers={"Origin": service.url})
    assert login.status_code == 403 and "report token" in login.text and not login.cookies
    forged = token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")
    refused = service.client(forged).post(f"/v1/jobs/{job_a}/metrics", json=epoch)
    assert refused.status_code == 401 and "unknown token" in refused.json()["error"]
    assert alice.get(f"/v1/jobs/{job_a}").json()["completed_epochs"] == 2.0  # nothing taken
    # A token of an earlier submission under the same owner and name (another incarnation).
    keys = ReportKeys((tmp_path / "report-key").read_text().strip())
    assert keys.verify(token) is not None  # the key file's key is the one that signs
    for value in stored_values(tmp_path / "voda.db"):  # the store holds nothing that signs
        assert len(value) < 16 or ReportKeys(value).verify(token) is None
    earlier = keys.mint("alice", job_a, "1.0")
    refused = service.client(earlier).post(f"/v1/jobs/{job_a}/metrics", json=epoch)
    assert refused.status_code == 403, refused.text
    # The owner's own token still reports, as before.
    assert alice.post(f"/v1/jobs/{job_a}/metrics", json=epoch).status_code == 200

    # A restart keeps the token valid (the signing key is in its file).
    service.stop()
    service.start()
    eventually(lambda: alice.get(f"/v1/jobs/{job_a}").json()["status"] == "Running",
               timeout=60)
    assert pod_env(fake, job_a)["VODA_TOKEN"] == token
    assert voda.training.report.epoch(epoch=4, seconds=40.5, workers=2)
    assert alice.get(f"/v1/jobs/{job_a}").json()["completed_epochs"] == 4.0

    # Deleted: the token is refused; the Secret goes with the job's object.
    assert alice.delete(f"/v1/jobs/{job_a}").status_code == 200
    refused = pod.post(f"/v1/jobs/{job_a}/metrics", json={**epoch, "epoch": 5})
    assert refused.status_code == 403 and "no longer valid" in refused.json()["error"]
    eventually(lambda: secret_of(fake, job_a) is None)
