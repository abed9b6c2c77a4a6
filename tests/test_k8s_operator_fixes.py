"""What the Kubernetes backend does about the operators as they really are: jobs the
operators accept, either CRD alone, Horovod keeping a moved worker, failed MPIJob
workers replaced, PyTorchJob resizes that neither crash-loop torchrun nor take two
writes, and a CRD that prunes the placement gate failing the job instead of a loop.
Each case failed against the stricter stand-in before the backend was changed."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from voda.backends.kubernetes.backend import KubernetesBackend
from voda.backends.kubernetes.settings import KubernetesSettings
from voda.core.model import Job
from voda.engine.events import EventKind
from voda.spec import SpecError, parse_document, parse_submission
from voda_testing.kube.cluster import WORK_ANNOTATION
from voda_testing.kube.harness import FakeCluster, eventually

ROOT = Path(__file__).resolve().parent.parent
NS = "default"


def start_cluster(tmp_path: Path, crds: str = "all") -> FakeCluster:
    c = FakeCluster.start(tmp_path, crds=crds)
    for i in range(4):
        c.sim.add_node(f"n{i}", 4)
    return c


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    c = start_cluster(tmp_path)
    yield c
    c.stop()


def backend_of(cluster: FakeCluster, **settings: Any) -> KubernetesBackend:
    return cluster.backend(KubernetesSettings(namespace=NS, unschedulable_seconds=2.0,
                                              **settings))


def document(kind: str, work: float = 10_000.0) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / f"{kind}.yaml").read_text())
    doc["metadata"].setdefault("annotations", {})[WORK_ANNOTATION] = str(work)
    return doc


def run(backend: KubernetesBackend, name: str, doc: dict[str, Any], placement: tuple) -> Job:
    j = Job(name=name, min_workers=1, max_workers=8)
    backend.specs[name] = doc
    backend.start(j, placement)
    return j


def workers(cluster: FakeCluster, job: str) -> dict[str, dict[str, Any]]:
    items, _ = cluster.server.store.list("pods", NS, label_selector=f"voda.io/job={job}")
    return {p["metadata"]["name"]: p for p in items
            if "launcher" not in p["metadata"]["name"]}


def running(cluster: FakeCluster, job: str) -> dict[str, str]:
    return {n: p["spec"]["nodeName"] for n, p in workers(cluster, job).items()
            if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")}


def failures(backend: KubernetesBackend, seen: list[Any]) -> list[str]:
    seen.extend(backend.events())
    return [str(e.data.get("reason")) for e in seen if e.kind is EventKind.JOB_FAILED]


# ----- 5: specs the operators accept ----------------------------------------------------------
def test_a_compact_job_passes_the_training_operators_webhook_and_runs_torchrun(
        cluster: FakeCluster) -> None:
    backend = backend_of(cluster)
    run(backend, "compact", {"name": "compact", "image": "img", "command": "python t.py",
                             "max": 4}, (("n0", 2),))
    eventually(lambda: len(running(cluster, "compact")) == 2)
    container = workers(cluster, "compact")["compact-worker-0"]["spec"]["containers"][0]
    assert container["name"] == "pytorch"
    assert container["command"] == ["torchrun", "t.py"]


@pytest.mark.parametrize("submitted,field,reason", [
    ({"name": "9lives", "image": "img", "command": "python t.py", "max": 2}, "name",
     "DNS-1035"),
    ("mpijob-always", "spec.mpiReplicaSpecs.Worker.restartPolicy", "Never and OnFailure"),
    ("pytorchjob-main", "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
     "named 'pytorch'"),
], ids=["a name starting with a digit", "MPIJob worker restartPolicy Always",
        "PyTorchJob without a container pytorch"])
def test_what_either_operator_would_refuse_is_refused_at_submission(
        cluster: FakeCluster, submitted: Any, field: str, reason: str) -> None:
    backend = backend_of(cluster)
    if submitted == "mpijob-always":
        doc = document("mpijob")
        doc["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "Always"
        spec = parse_document(doc)
    elif submitted == "pytorchjob-main":
        doc = document("pytorchjob")
        doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
            "name"] = "main"
        spec = parse_document(doc)
    else:
        spec = parse_submission(yaml.safe_dump(submitted).encode())
    with pytest.raises(SpecError) as refused:
        backend.check_spec(spec)
    assert refused.value.status == 422
    assert [e.field for e in refused.value.errors] == [field]
    assert reason in refused.value.errors[0].reason


# ----- 6: Horovod keeps a moved worker --------------------------------------------------------
def test_horovod_takes_a_moved_worker_back_after_the_blacklist_cooldown(
        cluster: FakeCluster) -> None:
    backend = backend_of(cluster, horovod_blacklist_cooldown=(1, 2))
    j = run(backend, "hv", document("mpijob"), (("n0", 1), ("n1", 1)))
    operator = cluster.sim.operators["mpijobs.kubeflow.org"]

    def hosts() -> set[str]:
        job = cluster.server.store.try_get("mpijobs", NS, "hv")
        launcher = operator.launchers.get(job["metadata"]["uid"]) if job else None
        return set(launcher.active) if launcher else set()

    both = {"hv-worker-0.hv.default.svc", "hv-worker-1.hv.default.svc"}
    eventually(lambda: hosts() == both)
    backend.scale(j, (("n0", 1), ("n2", 1)))
    eventually(lambda: running(cluster, "hv") == {"hv-worker-0": "n0", "hv-worker-1": "n2"})
    eventually(lambda: hosts() == both, timeout=60)
    command = cluster.server.store.get("mpijobs", NS, "hv")["spec"]["mpiReplicaSpecs"][
        "Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--blacklist-cooldown-range") + 1:][:2] == ["1", "2"]


# ----- 7: either CRD is enough ------------------------------------------------------------------
def test_with_mpi_operator_alone_mpijobs_run_and_pytorchjobs_are_refused(
        tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path, crds="mpi-operator")
    try:
        backend = backend_of(cluster)
        compact = {"name": "c", "image": "img", "command": "python t.py", "max": 2}
        with pytest.raises(SpecError) as refused:
            backend.check_spec(parse_submission(yaml.safe_dump(compact).encode()))
        assert refused.value.status == 422 and refused.value.errors[0].field == "kind"
        assert "serves no PyTorchJob" in refused.value.errors[0].reason
        run(backend, "m", document("mpijob"), (("n0", 2),))
        eventually(lambda: len(running(cluster, "m")) == 2)
    finally:
        cluster.stop()


def test_the_training_operators_own_mpijob_crd_is_named_when_an_mpijob_is_refused(
        tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path, crds="training-operator-with-mpijob-v1")
    try:
        backend = backend_of(cluster)
        with pytest.raises(SpecError) as refused:
            backend.check_spec(parse_document(document("mpijob")))
        assert "only as kubeflow.org/v1" in refused.value.errors[0].reason
        assert "mpi-operator v0.8" in refused.value.errors[0].reason
        run(backend, "p", document("pytorchjob"), (("n0", 2),))
        eventually(lambda: len(running(cluster, "p")) == 2)
    finally:
        cluster.stop()


# ----- 11: failed workers and PyTorchJob resizes ---------------------------------------------
def test_a_failed_mpijob_worker_is_replaced(cluster: FakeCluster) -> None:
    backend = backend_of(cluster)
    run(backend, "f", document("mpijob"), (("n0", 1), ("n1", 1)))
    eventually(lambda: len(running(cluster, "f")) == 2)
    failed = workers(cluster, "f")["f-worker-1"]
    cluster.sim.set_phase(failed, "Failed", "Error", "exit code 1")
    eventually(lambda: running(cluster, "f").get("f-worker-1") == "n1" and workers(
        cluster, "f")["f-worker-1"]["metadata"]["uid"] != failed["metadata"]["uid"])
    assert backend.stats["replaced_failed"] == 1
    assert not failures(backend, [])


def test_a_pytorchjob_scale_down_restarts_no_torchrun_container(cluster: FakeCluster) -> None:
    backend = backend_of(cluster)
    doc = document("pytorchjob")
    del doc["spec"]["elasticPolicy"]["maxRestarts"]  # the user set none
    j = run(backend, "t", doc, (("n0", 3),))
    eventually(lambda: len(running(cluster, "t")) == 3)
    backend.scale(j, (("n0", 2),))
    eventually(lambda: set(workers(cluster, "t")) == {"t-worker-0", "t-worker-1"})
    cluster.sim.wait_idle()
    for pod in workers(cluster, "t").values():
        assert not (pod["status"].get("containerStatuses") or [{}])[0].get("restartCount")


def test_a_pytorchjob_with_autoscaling_metrics_is_refused(cluster: FakeCluster) -> None:
    backend = backend_of(cluster)
    doc = document("pytorchjob")
    doc["spec"]["elasticPolicy"]["metrics"] = [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
    with pytest.raises(SpecError) as refused:
        backend.check_spec(parse_document(doc))
    assert refused.value.errors[0].field == "spec.elasticPolicy.metrics"


def test_a_pytorchjob_resize_is_one_write(cluster: FakeCluster) -> None:
    backend = backend_of(cluster)
    j = run(backend, "r", document("pytorchjob"), (("n0", 1),))
    eventually(lambda: len(running(cluster, "r")) == 1)

    def writes() -> int:
        return sum(1 for r in list(cluster.server.requests)
                   if r.resource.startswith("pytorchjobs") and r.verb in ("patch", "update"))

    before = writes()
    backend.scale(j, (("n0", 2),))
    eventually(lambda: len(running(cluster, "r")) == 2)
    assert writes() - before == 1


def test_a_watch_event_older_than_the_resize_does_not_resize_again(
        cluster: FakeCluster) -> None:
    """The patch's answer can come before the watch delivers the job's earlier states
    (the operator's status writes): those must not undo what the backend knows it wrote."""
    backend = backend_of(cluster)
    j = run(backend, "s", document("pytorchjob"), (("n0", 1),))
    eventually(lambda: len(running(cluster, "s")) == 1)
    stale = cluster.server.store.get("pytorchjobs", NS, "s")
    backend.scale(j, (("n0", 2),))
    eventually(lambda: len(running(cluster, "s")) == 2)
    resizes = backend.stats.get("resizes")
    backend._job_handler("PyTorchJob")("MODIFIED", stale, None)
    for _ in range(5):
        cluster.sim.wait_idle()
    assert backend.stats.get("resizes") == resizes
    assert len(running(cluster, "s")) == 2


# ----- 12: a pruned gate ----------------------------------------------------------------------
def test_a_crd_that_prunes_the_gate_fails_the_job_instead_of_a_delete_loop(
        tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path, crds="mpi-operator-v0.4")
    try:
        backend = backend_of(cluster)
        run(backend, "old", copy.deepcopy(document("mpijob")), (("n0", 2),))
        seen: list[Any] = []
        reasons = eventually(lambda: failures(backend, seen))
        assert "schedulingGates" in reasons[0] and "mpi-operator" in reasons[0]
        eventually(lambda: not cluster.server.store.list("mpijobs", NS)[0])
        for _ in range(10):
            cluster.sim.wait_idle()
        assert backend.stats.get("creates") == 1
        assert not backend.stats.get("moves") and not backend.stats.get("repins")
        assert not cluster.server.store.list("mpijobs", NS)[0]
    finally:
        cluster.stop()
