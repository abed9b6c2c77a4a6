"""Elastic jobs and plain pods on one cluster: Voda's engine and Kubernetes backend place
elastic MPIJobs and PyTorchJobs while the pod scheduler binds batch Job gangs and
Deployments, both on one cluster view. A seeded random mix of submissions, deletions,
pod kills and node changes; the GPU ledger audits every write to the API server: no
node is ever over its GPUs."""

from __future__ import annotations

import random
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from voda.core.model import Job, JobStatus
from voda.engine.scheduler import Scheduler, SchedulerSettings
from voda.podsched.controller import PodScheduler, PodSchedulerSettings
from voda_testing.kube.cluster import WORK_ANNOTATION
from voda_testing.kube.cluster.workloads import RUN_ANNOTATION, WorkloadControllers
from voda_testing.kube.harness import FakeCluster, eventually

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


class Engine:
    """Voda's scheduler loop over the Kubernetes backend, stepping in a thread."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.errors: list[str] = []

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                with self.lock:
                    self.scheduler.step(time.time())
            except Exception:  # reported by the test
                self.errors.append(traceback.format_exc())
            self.stop.wait(0.05)


def elastic_document(kind: str, name: str, work: float) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / f"{kind}.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["metadata"].setdefault("annotations", {})[WORK_ANNOTATION] = str(work)
    return doc


def batch_job(name: str, pods: int, gpus: int, seconds: float, gang: bool) -> dict[str, Any]:
    annotations = {"voda.io/gpu-count": str(pods * gpus)} if gang else {}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 50,
                     "template": {"metadata": {"annotations": {RUN_ANNOTATION: str(seconds)}},
                                  "spec": {"schedulerName": "voda-scheduler",
                                           "restartPolicy": "Never", "containers": [
                                               {"name": "m", "image": "i", "resources": {
                                                   "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}


def deployment(name: str, replicas: int, gpus: int, strategy: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name,
                         "annotations": {"voda.io/placement-strategy": strategy}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"schedulerName": "voda-scheduler", "containers": [
                                      {"name": "m", "image": "i", "resources": {
                                          "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    c = FakeCluster.start(tmp_path)
    yield c
    c.stop()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_random_mix_never_puts_a_node_over_its_gpus(cluster: FakeCluster, seed: int) -> None:
    rng = random.Random(seed)
    store = cluster.server.store
    for leaf in range(2):
        for k in range(3):
            cluster.sim.add_node(f"l{leaf}-n{k}", 4, {"voda.io/leaf": f"l{leaf}"})
    workloads = WorkloadControllers(store).start()
    backend = cluster.backend()
    pods = PodScheduler(cluster.api("pod-scheduler", backoff=0.05, max_backoff=0.5), backend.view,
                        PodSchedulerSettings(retry_seconds=0.5)).start()
    engine = Engine(Scheduler(backend, SchedulerSettings(rate_limit_seconds=0.2)))
    engine.thread.start()
    elastic: list[str] = []
    plain: list[tuple[str, str]] = []
    try:
        assert pods.wait_synced(10)
        for step in range(60):
            action = rng.choice(["elastic", "elastic", "gang", "gang", "pods", "deployment",
                                 "kill", "delete", "node"])
            if action == "elastic":
                name = f"e{step}"
                backend.specs[name] = elastic_document(rng.choice(["mpijob", "pytorchjob"]),
                                                       name, rng.uniform(2, 8))
                with engine.lock:
                    engine.scheduler.submit(Job(name, 1, rng.randint(1, 6),
                                                submit_time=time.time()))
                elastic.append(name)
            elif action in ("gang", "pods"):
                name = f"b{step}"
                store.create("jobs.batch", "default", batch_job(
                    name, rng.randint(1, 3), rng.choice([1, 2, 4]), rng.uniform(0.5, 3),
                    gang=action == "gang"))
                plain.append(("jobs.batch", name))
            elif action == "deployment":
                name = f"d{step}"
                store.create("deployments.apps", "default", deployment(
                    name, rng.randint(1, 3), rng.choice([1, 2]),
                    rng.choice(["consolidated", "distributed", "balanced"])))
                plain.append(("deployments.apps", name))
            elif action == "kill":
                bound = [p for p in store.list("pods", "default")[0]
                         if p["spec"].get("nodeName") and not p["metadata"].get(
                             "deletionTimestamp")]
                if bound:
                    victim = rng.choice(bound)["metadata"]["name"]
                    store.delete("pods", "default", victim)
            elif action == "delete":
                if plain and rng.random() < 0.5:
                    resource, name = plain.pop(rng.randrange(len(plain)))
                    store.delete(resource, "default", name)
                elif elastic:
                    name = elastic.pop(rng.randrange(len(elastic)))
                    with engine.lock:
                        engine.scheduler.delete(name, time.time())
            elif action == "node":
                name = f"l{rng.randint(0, 1)}-x{step}"
                cluster.sim.add_node(name, 4, {"voda.io/leaf": name.split("-")[0]})
            time.sleep(rng.uniform(0.02, 0.25))
        # Let the mix run out: elastic jobs finish their work, batch pods their runs.
        def elastic_completed() -> bool:
            with engine.lock:
                return any(r.status is JobStatus.COMPLETED
                           for r in engine.scheduler.jobs.values())

        def batch_completed() -> bool:
            return any(any(c["type"] == "Complete" for c in j.get("status", {}).get(
                "conditions") or []) for j in store.list("jobs.batch", "default")[0])

        eventually(elastic_completed, timeout=120)
        eventually(batch_completed, timeout=120)
        eventually(lambda: not pods.view.claims or all(
            not owner.startswith("pod/") for owner in pods.view.claims), timeout=60)
    finally:
        engine.stop.set()
        engine.thread.join(10)
        pods.stop()
        workloads.stop()
    assert not cluster.sim.ledger.violations, cluster.sim.ledger.violations[:5]
    assert not engine.errors, engine.errors[:3]
    assert not cluster.sim.errors and not workloads.errors


def test_a_halted_jobs_workers_keep_their_gpus_claimed_until_they_are_gone(
        cluster: FakeCluster) -> None:
    """The pod scheduler shares the view: GPUs an elastic job's workers hold (or were
    pinned to, before any watch shows them bound) stay claimed after the plan drops
    them, until the pods end, so no other pod is bound into them meanwhile."""
    cluster.sim.add_node("n0", 4)
    backend = cluster.backend()
    backend.specs["h"] = elastic_document("pytorchjob", "h", 10_000)
    job = Job("h", 1, 4)
    backend.start(job, (("n0", 3),))

    def bound() -> int:
        return sum(1 for p in cluster.server.store.list("pods", "default")[0]
                   if p["metadata"]["name"].startswith("h-worker")
                   and p["spec"].get("nodeName") and p["status"].get("phase") == "Running")

    eventually(lambda: bound() == 3)
    eventually(lambda: backend.view.claimed("h") == {"n0": 3})
    backend.halt(job)
    assert backend.view.claimed("h") == {"n0": 3}
    eventually(lambda: bound() == 0 and not backend.view.claimed("h"))
