"""A change of a job's reason shows on its MPIJob or PyTorchJob object, on the fake
cluster (CRD schemas and RBAC enforced): an Event (Warning for the codes that need
someone to act) and the VodaAtMax condition through the status subresource; written only
on a change, and a failure to write disturbs nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from voda.backends.kubernetes.backend import KubernetesBackend
from voda.backends.kubernetes.reasons import CONDITION
from voda.backends.kubernetes.settings import KubernetesSettings
from voda.core.model import Job
from voda.engine.backend import SupportsReasons
from voda_testing.kube.cluster import WORK_ANNOTATION
from voda_testing.kube.harness import FakeCluster, eventually
from voda_testing.kube.patches import MERGE
from voda_testing.kube.server import Fault

ROOT = Path(__file__).resolve().parent.parent
NS = "default"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    c = FakeCluster.start(tmp_path)
    for i in range(2):
        c.sim.add_node(f"n{i}", 4)
    yield c
    c.stop()


def start(cluster: FakeCluster, kind: str, name: str) -> tuple[KubernetesBackend, Job]:
    backend = cluster.backend(KubernetesSettings(namespace=NS, unschedulable_seconds=2.0))
    doc = yaml.safe_load((ROOT / "examples" / f"{kind}.yaml").read_text())
    doc["metadata"].setdefault("annotations", {})[WORK_ANNOTATION] = "100000"
    job = Job(name, 1, 8)
    backend.specs[name] = doc
    backend.start(job, (("n0", 1),))
    eventually(lambda: running(cluster, name) == 1)
    return backend, job


def running(cluster: FakeCluster, job: str) -> int:
    pods, _ = cluster.server.store.list("pods", NS, f"voda.io/job={job}")
    return sum(1 for p in pods if "launcher" not in p["metadata"]["name"]
               and (p.get("status") or {}).get("phase") == "Running"
               and not p["metadata"].get("deletionTimestamp"))


def events(cluster: FakeCluster, job: str) -> list[dict[str, Any]]:
    items, _ = cluster.server.store.list("events", NS)
    return [e for e in items if e["involvedObject"]["name"] == job
            and e["source"]["component"] == "voda"]


def condition(cluster: FakeCluster, plural: str, job: str) -> dict[str, Any] | None:
    obj = cluster.server.store.get(plural, NS, job)
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == CONDITION), None)


@pytest.mark.parametrize("kind,plural", [("mpijob", "mpijobs"), ("pytorchjob", "pytorchjobs")])
def test_a_change_of_reason_is_an_event_and_a_condition_on_the_job_object(
        cluster: FakeCluster, kind: str, plural: str) -> None:
    backend, _ = start(cluster, kind, "j")
    assert isinstance(backend, SupportsReasons)
    backend.note_reason("j", "Shared", "Holds 1 of its max 8 GPUs: 8 of 8 in use.", 1.0)
    eventually(lambda: (condition(cluster, plural, "j") or {}).get("reason") == "Shared")
    c = condition(cluster, plural, "j")
    assert c is not None and c["status"] == "False"
    assert c["message"] == "Holds 1 of its max 8 GPUs: 8 of 8 in use."
    [event] = events(cluster, "j")
    assert (event["reason"], event["type"]) == ("Shared", "Normal")
    assert event["involvedObject"]["kind"] in ("MPIJob", "PyTorchJob")
    # the operator's own conditions are kept beside it
    obj = cluster.server.store.get(plural, NS, "j")
    assert {"Created", "Running"} <= {x["type"] for x in obj["status"]["conditions"]}
    # back at its max: True, and an AtMax Event
    backend.note_reason("j", None, "Holds its max of 8 GPUs.", 2.0)
    eventually(lambda: (condition(cluster, plural, "j") or {}).get("status") == "True")
    assert condition(cluster, plural, "j")["reason"] == "AtMax"  # type: ignore[index]
    eventually(lambda: [e["reason"] for e in events(cluster, "j")] == ["Shared", "AtMax"])
    assert backend.stats.get("reason_failures", 0) == 0


def test_codes_that_need_someone_to_act_are_warnings(cluster: FakeCluster) -> None:
    backend, _ = start(cluster, "mpijob", "w")
    backend.note_reason("w", "PlanRefused", "The decision for GPU type x was refused.", 1.0)
    eventually(lambda: [e["type"] for e in events(cluster, "w")] == ["Warning"])
    eventually(lambda: (condition(cluster, "mpijobs", "w") or {}).get("reason") ==
               "PlanRefused")


def test_nothing_is_written_for_a_job_without_an_object_or_at_its_max(
        cluster: FakeCluster) -> None:
    backend, _ = start(cluster, "mpijob", "m")
    backend.note_reason("queued", "Queued", "Queued: 2nd of 2.", 1.0)
    assert "queued" not in backend.reasons
    before = len(cluster.server.requests)
    backend.note_reason("m", None, "Holds its max of 8 GPUs.", 1.0)  # nothing said before
    eventually(lambda: "m" not in backend.reasons)
    assert condition(cluster, "mpijobs", "m") is None and events(cluster, "m") == []
    assert not [r for r in list(cluster.server.requests)[before:]
                if r.verb in ("create", "patch") and ("events" in r.resource
                                                      or "status" in r.resource)]


def test_a_preempted_job_gets_the_event_on_its_object_as_it_goes(cluster: FakeCluster) -> None:
    backend, job = start(cluster, "pytorchjob", "p")
    backend.halt(job)
    backend.note_reason("p", "Preempted", "Preempted: its 1 GPU went to q (+1 GPU).", 1.0)
    eventually(lambda: [e["reason"] for e in events(cluster, "p")] == ["Preempted"])
    eventually(lambda: running(cluster, "p") == 0)


def test_a_failure_to_write_is_logged_and_disturbs_nothing(cluster: FakeCluster) -> None:
    cluster.allow_denied = True
    backend, job = start(cluster, "mpijob", "f")
    cluster.server.add_fault(Fault(500, verb="create", resource="events", times=None))
    cluster.server.add_fault(Fault(403, verb="patch", resource="mpijobs/status", times=None))
    backend.note_reason("f", "Shrunk", "Shrunk from 2 to 1 GPU.", 1.0)
    eventually(lambda: backend.stats.get("reason_failures", 0) >= 2)
    assert "f" not in backend.reasons  # not retried: the next change writes again
    backend.scale(job, (("n0", 1), ("n1", 1)))
    eventually(lambda: running(cluster, "f") == 2)
    assert condition(cluster, "mpijobs", "f") is None


def test_a_conflict_writes_the_condition_against_the_newer_version(
        cluster: FakeCluster) -> None:
    backend, _ = start(cluster, "mpijob", "c")
    cluster.server.add_fault(Fault(409, verb="patch", resource="mpijobs/status", times=1))
    backend.note_reason("c", "MeasuredCap", "It grows to at most 2 GPUs.", 1.0)
    eventually(lambda: (condition(cluster, "mpijobs", "c") or {}).get("reason") ==
               "MeasuredCap", timeout=15)
    assert [e["reason"] for e in events(cluster, "c")] == ["MeasuredCap"]  # posted once


def test_the_service_has_other_jobs_named_as_people_gave_them(cluster: FakeCluster,
                                                              tmp_path: Path) -> None:
    from voda.api.service import Service
    from voda.config import ServerSettings

    backend, _ = start(cluster, "mpijob", "s")
    service = Service(ServerSettings(db=f"sqlite:///{tmp_path / 'v.db'}",
                                     backend="kubernetes"), backend)
    uid = "resnet-20261128120000-0a1b2c"  # how the engine says a job (job_names.new_uid)
    service.job_names.add("resnet", uid, live=True)
    backend.note_reason("s", "Shrunk", f"Shrunk from 2 to 1 GPU: 1 went to {uid}.", 1.0)
    eventually(lambda: (condition(cluster, "mpijobs", "s") or {}).get("reason") == "Shrunk")
    assert condition(cluster, "mpijobs", "s")["message"] == (  # type: ignore[index]
        "Shrunk from 2 to 1 GPU: 1 went to resnet.")
    assert [e["message"] for e in events(cluster, "s")] == [
        "Shrunk from 2 to 1 GPU: 1 went to resnet."]


def test_a_conflict_with_a_stale_informer_reads_the_object_afresh(
        cluster: FakeCluster) -> None:
    """The informer's copy can lag behind the server for as long as its watch is silent
    (60 s before it is taken for dead): a conflict reads the object itself, and the
    condition is written against the operator's newer status, keeping it."""
    backend, _ = start(cluster, "mpijob", "l")
    assert cluster.server.stall_watches() > 0
    written = cluster.server.store.get("mpijobs", NS, "l")["status"]["conditions"]
    probe = {"type": "Probe", "status": "True", "reason": "Probed", "message": "newer"}
    cluster.server.store.patch("mpijobs", NS, "l", {"status": {"conditions": [
        *written, probe]}}, MERGE, subresource="status")
    backend.note_reason("l", "Shared", "Holds 1 of its max 8 GPUs.", 1.0)
    eventually(lambda: (condition(cluster, "mpijobs", "l") or {}).get("reason") == "Shared",
               timeout=15)
    assert backend.stats.get("reason_conflicts", 0) >= 1
    obj = cluster.server.store.get("mpijobs", NS, "l")
    assert {"Created", "Running", "Probe"} <= {c["type"] for c in obj["status"]["conditions"]}
