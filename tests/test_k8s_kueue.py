"""Kueue-managed namespaces: Kueue suspends a job it has not admitted
(`spec.runPolicy.suspend`); Voda shows it suspended by Kueue, says it created the
object in a namespace Kueue manages, and runs it where it placed it once admitted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from voda.backends.kubernetes.adapters import KUEUE_QUEUE, MPIJobAdapter, PyTorchJobAdapter
from voda.backends.kubernetes.backend import KubernetesBackend
from voda.core.model import Job
from voda_testing.kube.cluster import WORK_ANNOTATION
from voda_testing.kube.cluster.kueue import Kueue
from voda_testing.kube.harness import FakeCluster, eventually

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    with FakeCluster.running(tmp_path, nodes=2) as c:
        yield c


def queued(kind: str, queue: str | None = "team-a") -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / f"{kind}.yaml").read_text())
    doc["metadata"].setdefault("annotations", {})[WORK_ANNOTATION] = "1000"
    if queue:
        doc["metadata"].setdefault("labels", {})[KUEUE_QUEUE] = queue
    return doc


def pods_of(cluster: FakeCluster, job: str) -> list[dict[str, Any]]:
    return cluster.server.store.list("pods", "default", f"voda.io/job={job}")[0]


def running_workers(cluster: FakeCluster, job: str) -> list[str]:
    return sorted(p["spec"].get("nodeName", "") for p in pods_of(cluster, job)
                  if p["status"].get("phase") == "Running" and "worker" in p["metadata"]["name"]
                  and not p["metadata"].get("deletionTimestamp"))


def suspended_condition(cluster: FakeCluster, plural: str, name: str) -> bool:
    obj = cluster.server.store.try_get(plural, "default", name) or {}
    return any(c.get("type") == "Suspended" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


@pytest.mark.parametrize("kind,plural,kind_name", [
    ("mpijob", "mpijobs", "MPIJob"), ("pytorchjob", "pytorchjobs", "PyTorchJob")])
def test_a_job_kueue_suspends_is_shown_so_and_runs_once_admitted(
        cluster: FakeCluster, kind: str, plural: str, kind_name: str) -> None:
    kueue = Kueue().install(cluster.sim)
    backend: KubernetesBackend = cluster.backend()
    backend.specs["q"] = queued(kind)
    backend.start(Job("q", 1, 4), (("n0", 2),))
    why = eventually(lambda: backend.suspended().get("q"))
    assert why.startswith("suspended by Kueue (LocalQueue 'team-a'): not admitted yet")
    assert f"Voda created this {kind_name} in namespace 'default', which Kueue manages" in why
    assert "holds the 2 GPUs" in why and KUEUE_QUEUE in why
    assert kueue.suspensions == 1
    name = backend.objects["q"]["metadata"]["name"]
    eventually(lambda: suspended_condition(cluster, plural, name))  # the operator's word
    assert not pods_of(cluster, "q")  # none run while suspended
    kueue.admit(cluster.sim, f"{plural}.kubeflow.org", "default", name)
    eventually(lambda: running_workers(cluster, "q") == ["n0", "n0"])
    eventually(lambda: "q" not in backend.suspended())  # its informer may lag the pods'


def test_a_job_suspended_in_a_namespace_kueue_manages_without_the_label(
        cluster: FakeCluster) -> None:
    Kueue(managed_namespaces=["default"]).install(cluster.sim)
    backend = cluster.backend()
    backend.specs["m"] = queued("mpijob", queue=None)
    backend.start(Job("m", 1, 4), (("n1", 1),))
    why = eventually(lambda: backend.suspended().get("m"))
    assert "spec.runPolicy.suspend, set outside Voda" in why
    assert "Run Voda's jobs in a namespace Kueue does not manage." in why
    backend.halt(Job("m", 1, 4))
    assert "m" not in backend.suspended()


@pytest.mark.parametrize("adapter", [MPIJobAdapter(), PyTorchJobAdapter()],
                         ids=["MPIJob", "PyTorchJob"])
@pytest.mark.parametrize("labels,suspend,conditions,by", [
    ({KUEUE_QUEUE: "q"}, True, [], "Kueue (LocalQueue 'q')"),
    ({}, True, [], "spec.runPolicy.suspend, set outside Voda (Kueue sets it in the "
                   "namespaces it manages)"),
    ({KUEUE_QUEUE: "q"}, False, [{"type": "Suspended", "status": "False"},
                                 {"type": "Running", "status": "True"}], ""),
    ({KUEUE_QUEUE: "q"}, False, [], ""),
], ids=["suspended by Kueue for its LocalQueue", "suspended in a namespace Kueue manages",
        "resumed and running", "admitted, not yet running"])
def test_what_the_adapters_read_of_a_suspension(adapter: Any, labels: dict, suspend: bool,
                                                 conditions: list, by: str) -> None:
    obj = {"metadata": {"labels": labels}, "spec": {"runPolicy": {"suspend": suspend}},
           "status": {"conditions": conditions}}
    state = adapter.observe(obj)
    assert state.suspended_by == by
    assert state.phase == ("Running" if conditions else "Pending")
