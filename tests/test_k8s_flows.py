"""Whole flows through `voda serve --backend kubernetes` (real processes, real HTTP):
a workload through nodes added, cordoned and removed; the leader killed and the
standby adopting its jobs; API faults and outages.

By default they run against the fake API server with the cluster simulator. With
VODA_E2E_KUBECONFIG set they run against that cluster instead (namespace
VODA_E2E_NAMESPACE, default "voda-e2e", for the jobs and VODA_E2E_VODA_NAMESPACE, default
"voda-e2e-own", for Voda's Lease, both existing; worker image VODA_E2E_IMAGE; the nodes named
in VODA_E2E_SPARE_NODES are cordoned first and "added" by uncordoning them; a
"removed" node is cordoned). Fault injection needs the fake server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from voda.backends.kubernetes.adapters import KUEUE_QUEUE
from voda.backends.kubernetes.api import LEASES, NODES, PODS, KubeApi
from voda.backends.kubernetes.cluster_view import holds, pod_gpus, quantity
from voda.backends.kubernetes.informer import Informer
from voda.backends.kubernetes.manifests import object_name
from voda.cli.main import app
from voda_testing.kube import Fault
from voda_testing.kube.cluster import WORK_ANNOTATION
from voda_testing.kube.cluster.kueue import Kueue
from voda_testing.kube.harness import FakeCluster, eventually
from voda_testing.serve import dashboard_login

ROOT = Path(__file__).resolve().parent.parent
E2E_KUBECONFIG = os.environ.get("VODA_E2E_KUBECONFIG")
# Short enough for a quick take-over, with seconds to spare for a busy machine: an outage
# of half the renew deadline must not stop a leader whose renewals the load delays.
LEASE = {"lease_seconds": 6.0, "renew_deadline_seconds": 4.0, "retry_seconds": 0.5}

pytestmark = pytest.mark.slow


# ----- the cluster the flows run on -------------------------------------------------------
@dataclass
class Control:
    """What a flow does to the cluster: the fake one (simulated controllers) or a real one."""

    kubeconfig: Path  # the test's own view (an administrator's)
    namespace: str  # the jobs'
    fake: FakeCluster | None = None
    spare: list[str] = field(default_factory=list)
    voda_kubeconfig: Path | None = None  # what `voda serve` connects with (default: kubeconfig)
    voda_namespace: str = "voda"  # Voda's own, with its Lease

    def add_node(self, name: str, gpus: int = 4) -> None:
        if self.fake is not None:
            self.fake.sim.add_node(name, gpus)
        else:
            self._cordon(self.spare.pop(0), False)

    def cordon(self, name: str) -> None:
        if self.fake is not None:
            self.fake.sim.cordon(name)
        else:
            self._cordon(name, True)

    def remove_node(self, name: str) -> None:
        if self.fake is not None:
            self.fake.sim.remove_node(name)
        else:
            self._cordon(name, True)

    def _cordon(self, name: str, on: bool) -> None:
        KubeApi.connect(str(self.kubeconfig)).patch(NODES, None, name, {
            "spec": {"unschedulable": True if on else None}})

    def document(self, kind: str, name: str, work: float, low: int, high: int
                 ) -> dict[str, Any]:
        doc = yaml.safe_load((ROOT / "examples" / f"{kind}.yaml").read_text())
        doc["metadata"]["name"] = name
        annotations = doc["metadata"].setdefault("annotations", {})
        annotations.update({WORK_ANNOTATION: str(work), "voda.io/min-workers": str(low),
                            "voda.io/max-workers": str(high)})
        annotations.pop("voda.io/category", None)
        if kind == "pytorchjob":
            doc["spec"]["elasticPolicy"].update(minReplicas=low, maxReplicas=high)
        if self.fake is None:  # a real cluster runs a real container for `work` seconds
            image = os.environ.get("VODA_E2E_IMAGE", "docker.io/horovod/horovod:0.28.1")
            specs = doc["spec"].get("mpiReplicaSpecs") or doc["spec"]["pytorchReplicaSpecs"]
            for role, spec in specs.items():
                container = spec["template"]["spec"]["containers"][0]
                container["image"] = image
                container["resources"]["limits"].pop("memory", None)
                if role == "Launcher":
                    container["command"] = ["horovodrun", "sleep", str(int(work))]
                elif kind == "pytorchjob":
                    container["command"] = ["sleep", str(int(work))]
        return doc


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Control]:
    if E2E_KUBECONFIG:
        spare = [n for n in os.environ.get("VODA_E2E_SPARE_NODES", "").split(",") if n]
        control = Control(Path(E2E_KUBECONFIG), os.environ.get("VODA_E2E_NAMESPACE",
                                                                "voda-e2e"), spare=spare,
                          voda_namespace=os.environ.get("VODA_E2E_VODA_NAMESPACE",
                                                        "voda-e2e-own"))
        for name in spare:
            control._cordon(name, True)
        yield control
        return
    fake = FakeCluster.start(tmp_path)
    for i in range(4):
        fake.sim.add_node(f"n{i}", 4, labels={"voda.io/leaf": f"l{i // 2}"})
    yield Control(fake.admin_kubeconfig, "default", fake, voda_kubeconfig=fake.kubeconfig)
    fake.stop()


class GpuAudit:
    """Through the API (so it works on a real cluster too): on every pod or node event,
    no node holds more GPUs than it has."""

    def __init__(self, kubeconfig: Path) -> None:
        api = KubeApi.connect(str(kubeconfig))
        self.pods: dict[tuple[str, str], tuple[str, int]] = {}
        self.gpus: dict[str, int] = {}
        self.violations: list[str] = []
        self.lock = threading.Lock()
        self.informers = [Informer(api, NODES, self._node, watch_seconds=30),
                          Informer(api, PODS, self._pod, watch_seconds=30)]
        for informer in self.informers:
            informer.start()
        assert all(i.synced.wait(20) for i in self.informers)

    def _node(self, kind: str, node: dict[str, Any], old: Any) -> None:
        with self.lock:
            name = node["metadata"]["name"]
            if kind == "DELETED":
                self.gpus.pop(name, None)
            else:
                self.gpus[name] = quantity(node.get("status", {}).get("allocatable", {}).get(
                    "nvidia.com/gpu"))

    def _pod(self, kind: str, pod: dict[str, Any], old: Any) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        with self.lock:
            self.pods.pop(key, None)
            if kind != "DELETED" and holds(pod):
                self.pods[key] = (pod["spec"]["nodeName"], pod_gpus(pod, "nvidia.com/gpu"))
            node = self.pods.get(key, ("", 0))[0]
            used = sum(g for n, g in self.pods.values() if n == node)
            if node and used > self.gpus.get(node, used):
                self.violations.append(f"{node}: {used} GPUs of {self.gpus[node]}")

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()


# ----- voda serve processes ----------------------------------------------------------------
@dataclass
class Serve:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    token_file: Path  # the token `voda serve` generated

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token_file.read_text().strip()}"}

    def up(self) -> bool:
        try:
            health = httpx.get(f"{self.url}/healthz", timeout=1.0)
            # A standby answers /healthz too (its readiness), as a standby.
            return health.status_code == 200 and health.json().get("role") != "standby"
        except httpx.HTTPError:
            return False

    def jobs(self) -> list[dict[str, Any]]:
        return httpx.get(f"{self.url}/v1/jobs", params={"limit": 1000}, timeout=10,
                         headers=self.auth).json()["items"]

    def submit(self, doc: dict[str, Any]) -> str:
        response = httpx.post(f"{self.url}/v1/jobs", content=yaml.safe_dump(doc), timeout=30,
                              headers={"Content-Type": "application/yaml", **self.auth})
        assert response.status_code == 201, response.text
        return str(response.json()["uid"])  # the key of the job's objects and pods

    def standing_by(self) -> bool:
        return "is a standby until" in self.log.read_text()

    def describe(self, name: str) -> dict[str, Any]:
        return httpx.get(f"{self.url}/v1/jobs/{name}", timeout=10, headers=self.auth).json()


@pytest.fixture
def serve(tmp_path: Path, cluster: Control) -> Iterator[Any]:
    started: list[Serve] = []
    config = tmp_path / "config.toml"
    own = (f'[pod_scheduler]\nkubeconfig = "{cluster.fake.kubeconfig_of("pod-scheduler")}"\n'
           if cluster.fake is not None else "")
    config.write_text("[kubernetes]\n" + "".join(f"{k} = {v}\n" for k, v in LEASE.items())
                      + "unschedulable_seconds = 5.0\n"
                      + f'voda_namespace = "{cluster.voda_namespace}"\n' + own)
    db = f"sqlite:///{tmp_path / 'voda.db'}"

    def start(wait: bool = True) -> Serve:
        from conftest import free_port

        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
        env["VODA_CONFIG"] = str(config)
        log = tmp_path / f"serve-{port}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "voda.cli.main", "serve", "--backend", "kubernetes",
             "--kubeconfig", str(cluster.voda_kubeconfig or cluster.kubeconfig),
             "--namespace", cluster.namespace,
             "--db", db, "--port", str(port), "--rate-limit", "0.3", "--step-interval", "0.2"],
            cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        process = Serve(proc, f"http://127.0.0.1:{port}", log, tmp_path / "token")
        started.append(process)
        if wait:
            eventually(lambda: process.up() or proc.poll() is not None, timeout=60)
            assert proc.poll() is None, log.read_text()[-3000:]
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait(10)


def all_done(server: Serve, names: list[str]) -> bool:
    statuses = {j["uid"]: j["status"] for j in server.jobs()}
    assert not [n for n in names if statuses.get(n) == "Failed"], statuses
    return all(statuses.get(n) == "Completed" for n in names)


def worker_pods(control: Control, namespace: str | None = None) -> list[dict[str, Any]]:
    api = KubeApi.connect(str(control.kubeconfig))
    return api.list(PODS, namespace or control.namespace, "voda.io/job")["items"]


# ----- the flows --------------------------------------------------------------------------------
def test_a_workload_completes_while_nodes_are_added_cordoned_and_removed(
        cluster: Control, serve: Any) -> None:
    audit = GpuAudit(cluster.kubeconfig)
    server = serve()
    names = [server.submit(cluster.document("mpijob" if i % 2 else "pytorchjob", f"w{i}",
                                            work=8 + 2 * i, low=1, high=2 + i % 3))
             for i in range(8)]
    eventually(lambda: sum(j["status"] == "Running" for j in server.jobs()) >= 4)
    cluster.add_node("n4")
    cluster.cordon("n0")
    time.sleep(1.0)
    cluster.remove_node("n1")
    eventually(lambda: not [p for p in worker_pods(cluster)
                            if p["spec"].get("nodeName") in ("n0", "n1")
                            and (p.get("status") or {}).get("phase") == "Running"], timeout=60)
    eventually(lambda: all_done(server, names), timeout=120)
    assert not [p for p in worker_pods(cluster) if p["spec"].get("nodeName") == "n1"]
    audit.stop()
    assert audit.violations == []
    if cluster.fake is not None:
        assert cluster.fake.sim.ledger.violations == []
        assert cluster.fake.sim.errors == []
    changes = sum(server.describe(n)["rescales"] + server.describe(n)["migrations"]
                  for n in names)
    assert changes > 0  # jobs were resized or moved on the way
    assert server.proc.poll() is None


def test_the_standby_takes_over_from_a_killed_leader_and_adopts_its_jobs(
        cluster: Control, serve: Any) -> None:
    leader = serve()
    standby = serve(wait=False)
    names = [leader.submit(cluster.document(kind, f"a-{kind}", work=10_000, low=1, high=2))
             for kind in ("mpijob", "pytorchjob")]
    eventually(lambda: all(j["status"] == "Running" for j in leader.jobs()), timeout=60)
    eventually(lambda: sum((p.get("status") or {}).get("phase") == "Running"
                           for p in worker_pods(cluster)) >= 4, timeout=60)
    time.sleep(1.0)  # a scheduling step or two with everything in place
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in worker_pods(cluster)}
    placements = {n: leader.describe(n)["placement"] for n in names}
    eventually(standby.standing_by, timeout=60)
    assert not standby.up()
    leader.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    eventually(standby.up, timeout=60)
    took_over = time.monotonic() - killed
    assert took_over < LEASE["lease_seconds"] + 15
    assert {n: standby.describe(n)["placement"] for n in names} == placements
    assert all(standby.describe(n)["status"] == "Running" for n in names)
    time.sleep(2.0)  # the new leader's first decisions
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in worker_pods(cluster)}
    assert after == before  # adopted: no pod restarted


def test_api_faults_and_outages_lose_no_job_and_never_make_two_leaders(
        cluster: Control, serve: Any) -> None:
    if cluster.fake is None:
        pytest.skip("fault injection needs the fake API server")
    api = cluster.fake.server
    first = serve()
    second = serve(wait=False)
    eventually(second.standing_by, timeout=60)
    for fault in (Fault(500, verb="patch", resource="pods", times=5),
                  Fault(429, verb="create", resource="mpijobs", times=3, retry_after=1),
                  Fault(409, verb="patch", resource="pods", times=3),
                  Fault(503, verb="patch", resource="mpijobs", times=3)):
        api.add_fault(fault)
    names = [first.submit(cluster.document("mpijob" if i % 2 else "pytorchjob", f"f{i}",
                                           work=30 + 5 * i, low=1, high=3)) for i in range(4)]
    eventually(lambda: any(j["status"] == "Running" for j in first.jobs()), timeout=60)
    first_agent = f"pid {first.proc.pid})"

    def writes_by_first() -> list[float]:
        return [r.time for r in list(api.requests) if r.method != "GET"
                and r.resource != "leases" and first_agent in r.user_agent]

    # A job shows Running once it is decided; its objects are written after that. The
    # leader must have written before the outage, or there is nothing to check below.
    eventually(writes_by_first, timeout=60)
    with api.outage("refuse"):
        time.sleep(LEASE["renew_deadline_seconds"] / 2)  # shorter than the renew deadline
    assert first.proc.poll() is None  # survived it
    with api.outage("refuse"):
        time.sleep(LEASE["lease_seconds"] + 1.0)  # longer: the leader must stop
        assert first.proc.wait(30) == 1  # failed closed and exited
    eventually(second.up, timeout=60)
    eventually(lambda: all_done(second, names), timeout=180)
    writers = [(r.time, r.user_agent) for r in api.requests
               if r.method != "GET" and r.resource != "leases" and "voda/" in r.user_agent]
    last_of_first = max(writes_by_first())
    first_of_second = min(t for t, agent in writers if first_agent not in agent)
    assert last_of_first < first_of_second  # never two leaders writing
    assert len({n for n in names}) == len(names)
    assert cluster.fake.sim.ledger.violations == []


def test_a_leader_stopped_with_sigterm_releases_the_lease_at_once(
        cluster: Control, serve: Any) -> None:
    leader = serve()
    standby = serve(wait=False)
    name = leader.submit(cluster.document("pytorchjob", "s", work=10_000, low=1, high=2))
    eventually(lambda: leader.describe(name)["status"] == "Running", timeout=60)
    eventually(standby.standing_by, timeout=60)
    time.sleep(1.0)  # the standby has seen the leader renew
    leader.proc.send_signal(signal.SIGTERM)
    stopped = time.time()
    assert leader.proc.wait(30) == 0
    eventually(standby.up, timeout=60)
    lease = KubeApi.connect(str(cluster.kubeconfig)).get(LEASES, cluster.voda_namespace,
                                                         "voda-leader")
    acquired = datetime.strptime(lease["spec"]["acquireTime"], "%Y-%m-%dT%H:%M:%S.%fZ")
    taken = acquired.replace(tzinfo=UTC).timestamp() - stopped
    assert taken < LEASE["lease_seconds"]  # released: no wait for the lease to expire
    assert standby.describe(name)["status"] == "Running"


def test_a_job_kueue_suspends_is_shown_suspended_by_kueue_until_admitted(
        cluster: Control, serve: Any) -> None:
    if cluster.fake is None:
        pytest.skip("Kueue is played by the fake cluster's stand-in")
    kueue = Kueue().install(cluster.fake.sim)
    server = serve()
    doc = cluster.document("mpijob", "kq", work=10_000, low=1, high=2)
    doc["metadata"].setdefault("labels", {})[KUEUE_QUEUE] = "team-a"
    name = server.submit(doc)
    why = eventually(lambda: server.describe(name).get("suspended"), timeout=60)
    assert why.startswith("suspended by Kueue (LocalQueue 'team-a'): not admitted yet")
    assert "Voda created this MPIJob in namespace 'default', which Kueue manages" in why
    assert not [p for p in worker_pods(cluster) if p["metadata"]["labels"].get(
        "voda.io/job") == name]
    token = server.token_file.read_text().strip()
    described = CliRunner().invoke(app, ["describe", name], env={
        "VODA_CONFIG": "/nonexistent/config.toml", "VODA_URL": server.url,
        "VODA_TOKEN": token, "COLUMNS": "400"})
    assert described.exit_code == 0, described.output
    assert "Suspended" in described.output and "LocalQueue 'team-a'" in described.output
    page = httpx.get(f"{server.url}/ui/jobs/{name}", cookies=dashboard_login(server.url, token),
                     timeout=10)
    assert page.status_code == 200 and 'id="job-suspended"' in page.text
    assert "Kueue (LocalQueue &#39;team-a&#39;)" in page.text
    kueue.admit(cluster.fake.sim, "mpijobs.kubeflow.org", "default", object_name(name))
    eventually(lambda: server.describe(name).get("suspended") is None, timeout=60)
    events = [(e["new"], e["message"]) for e in server.describe(name)["events"]]
    assert ("Suspended", why) in events and "Admitted" in [new for new, _ in events]
    eventually(lambda: any((p.get("status") or {}).get("phase") == "Running"
                           and p["metadata"]["labels"].get("voda.io/job") == name
                           for p in worker_pods(cluster)), timeout=60)


def test_a_spec_that_borrows_vodas_identity_is_refused_naming_the_field(
        cluster: Control, serve: Any) -> None:
    """Isolation, through the service: a job that would run as Voda's ServiceAccount or
    mount one of its Secrets never reaches the cluster."""
    server = serve()
    for key, borrow in (("serviceAccountName", "voda"),
                        ("volumes", [{"name": "db", "secret": {"secretName": "voda-db"}}])):
        doc = cluster.document("pytorchjob", f"borrow-{key.lower()}", work=10, low=1,
                               high=2)
        doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][key] = borrow
        response = httpx.post(f"{server.url}/v1/jobs", content=yaml.safe_dump(doc),
                              timeout=30, headers={"Content-Type": "application/yaml",
                                                   **server.auth})
        assert response.status_code == 422, response.text
        assert "spec.pytorchReplicaSpecs.Worker.template.spec." + key in response.text
    assert not worker_pods(cluster)


def test_a_compact_job_passes_the_training_operators_webhook_and_runs(
        cluster: Control, serve: Any) -> None:
    """The compact form renders a PyTorchJob the operator accepts (a container named
    `pytorch`, launched with torchrun) and its workers run."""
    server = serve()
    image = "img" if cluster.fake is not None else os.environ.get(
        "VODA_E2E_IMAGE", "docker.io/horovod/horovod:0.28.1")  # has torchrun
    name = server.submit({"name": "compact-e2e", "image": image,
                          "command": "python train.py", "min": 1, "max": 2})
    eventually(lambda: server.describe(name)["status"] == "Running", timeout=120)

    def running() -> list[dict[str, Any]]:
        return [p for p in worker_pods(cluster) if p["metadata"]["labels"].get(
            "voda.io/job") == name and (p.get("status") or {}).get("phase") == "Running"]

    eventually(lambda: len(running()) >= 1, timeout=120)
    container = running()[0]["spec"]["containers"][0]
    assert container["name"] == "pytorch" and container["command"][0] == "torchrun"
    assert server.describe(name)["status"] != "Failed"


def test_a_job_accepting_several_gpu_types_runs_only_on_nodes_of_the_one_chosen(
        cluster: Control, serve: Any) -> None:
    """`voda.io/gpu-types` on an MPIJob and a PyTorchJob: each job is given one of the types
    it names, and every worker pod it runs lands on a node labelled with that type."""
    if cluster.fake is None:
        pytest.skip("needs nodes of a second GPU type; the fake cluster adds them")
    for i in range(2):
        cluster.fake.sim.add_node(f"fast{i}", 4, labels={"voda.io/gpu-type": "a100",
                                                         "voda.io/leaf": "l-fast"})
    server = serve()
    names = []
    for i, kind in enumerate(("mpijob", "pytorchjob")):
        doc = cluster.document(kind, f"typed-{i}", work=10_000, low=1, high=4)
        annotations = doc["metadata"]["annotations"]
        annotations.pop("voda.io/gpu-type", None)  # one type, or several: not both
        annotations["voda.io/gpu-types"] = "default,a100"
        names.append(server.submit(doc))
    node_type = {f"n{i}": "default" for i in range(4)} | {"fast0": "a100", "fast1": "a100"}

    def placed() -> dict[str, tuple[str, set[str]]]:
        jobs = {n: server.describe(n) for n in names}
        on: dict[str, set[str]] = {n: set() for n in names}
        for pod in worker_pods(cluster):
            job = pod["metadata"]["labels"].get("voda.io/job")
            if job in on and (pod.get("status") or {}).get("phase") == "Running":
                on[job].add(node_type[pod["spec"]["nodeName"]])
        return {n: (jobs[n]["gpu_type"], on[n]) for n in names}

    eventually(lambda: all(types for _, types in placed().values()), timeout=120)
    for name, (chosen, types) in placed().items():
        assert chosen in ("default", "a100")
        assert server.describe(name)["gpu_types"] == ["default", "a100"]
        assert types <= {chosen}, (name, chosen, types)
    assert cluster.fake.sim.errors == []
