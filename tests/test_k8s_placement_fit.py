"""The Kubernetes backend places what kube-scheduler would bind: the engine sees only the
nodes a job's worker template may use (taints, nodeSelector, affinity) and no more GPUs
on a node than its CPU, memory and pods leave room for; a node that keeps refusing a
pinned worker is left out for that job and the engine plans again, with no pod deleted
and re-pinned in a loop. Checked against the simulator's kube-scheduler, which refuses
what the real one refuses."""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_k8s_backend import document, running_on
from voda.backends.kubernetes.backend import KubernetesBackend
from voda.core.model import Job
from voda.engine.scheduler import Scheduler, SchedulerSettings
from voda_testing.kube.harness import FakeCluster, eventually
from voda_testing.kube.patches import MERGE


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    c = FakeCluster.start(tmp_path)
    c.sim.add_node("n0", 4, resources={"cpu": "40"})
    c.sim.add_node("n1", 4, resources={"cpu": "40"},
                   taints=[{"key": "team", "value": "vision", "effect": "NoSchedule"}])
    yield c
    c.stop()


@pytest.fixture
def backend(cluster: FakeCluster) -> KubernetesBackend:
    return cluster.backend()


def worker_spec(doc: dict[str, Any]) -> dict[str, Any]:
    specs = doc["spec"].get("mpiReplicaSpecs") or doc["spec"]["pytorchReplicaSpecs"]
    return specs["Worker"]["template"]["spec"]


def with_worker(doc: dict[str, Any], cpu: str | None = None, **spec: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    worker = worker_spec(doc)
    worker.update(spec)
    if cpu is not None:
        worker["containers"][0].setdefault("resources", {}).setdefault("requests", {})[
            "cpu"] = cpu
    return doc


def gpus(backend: KubernetesBackend) -> dict[str, int]:
    return {n.name: n.gpus for n in backend.nodes()}


def test_a_job_is_confined_to_the_nodes_its_template_tolerates_and_selects(
        cluster: FakeCluster, backend: KubernetesBackend) -> None:
    cluster.sim.add_node("n2", 4, labels={"disk": "ssd"})
    eventually(lambda: "n2" in gpus(backend))
    backend.specs["plain"] = document("mpijob")
    backend.specs["tolerant"] = with_worker(document("mpijob"), tolerations=[
        {"key": "team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"}])
    backend.specs["ssd"] = with_worker(document("mpijob"), nodeSelector={"disk": "ssd"})
    assert backend.job_nodes(["plain", "tolerant", "ssd"]) == {
        "plain": frozenset({"n0", "n2"}), "ssd": frozenset({"n2"})}  # tolerant: anywhere
    # A GPU taint is tolerated as the ExtendedResourceToleration admission plugin does
    cluster.sim.add_node("n3", 4, taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    eventually(lambda: "n3" in backend.job_nodes(["ssd"])["ssd"] or "n3" in gpus(backend))
    assert backend.job_nodes(["plain"]) == {"plain": frozenset({"n0", "n2", "n3"})}


def test_a_node_whose_cpu_others_took_offers_only_the_workers_it_still_holds(
        cluster: FakeCluster, backend: KubernetesBackend) -> None:
    backend.specs["w"] = with_worker(document("mpijob"), cpu="4")
    assert gpus(backend)["n0"] == 4
    cluster.server.store.create("pods", "default", {"metadata": {"name": "hog"}, "spec": {
        "nodeName": "n0", "containers": [{"name": "c", "image": "i", "resources": {
            "requests": {"cpu": "33"}}}]}})
    eventually(lambda: gpus(backend)["n0"] == 1)  # 40 - 33 = 7 CPUs: one 4-CPU worker


def engine(backend: KubernetesBackend) -> Scheduler:
    return Scheduler(backend, SchedulerSettings(algorithm="FIFO", rate_limit_seconds=0.0),
                     now=time.monotonic())


def test_the_engine_never_places_a_job_on_a_node_its_template_cannot_use(
        cluster: FakeCluster, backend: KubernetesBackend) -> None:
    sched = engine(backend)
    backend.specs["big"] = document("mpijob")
    sched.submit(Job("big", 6, 6, submit_time=time.monotonic()))
    backend.specs["small"] = document("mpijob")
    sched.submit(Job("small", 2, 2, submit_time=time.monotonic()))

    def settled() -> bool:
        sched.step(time.monotonic())
        return running_on(cluster, "small") == {0: "n0", 1: "n0"}
    eventually(settled, timeout=60)
    assert sched.jobs["big"].placement == ()  # 6 never fit on n0, and n1 is tainted
    assert not running_on(cluster, "big")


def test_a_node_that_keeps_refusing_a_worker_is_left_out_and_the_engine_plans_again(
        cluster: FakeCluster, backend: KubernetesBackend) -> None:
    cluster.sim.add_node("n2", 4)
    eventually(lambda: "n2" in gpus(backend))
    sched = engine(backend)
    backend.specs["r"] = document("mpijob")
    sched.submit(Job("r", 2, 2, submit_time=time.monotonic()))

    def placed() -> dict[int, str]:
        sched.step(time.monotonic())
        return running_on(cluster, "r")
    first = eventually(lambda: len(placed()) == 2 and placed(), timeout=60)
    refusing = first[0]
    good = ({"n0", "n2"} - {refusing}).pop()
    # What kube-scheduler refuses though the submitted template did not say so (a mutating
    # webhook or a LimitRange changed the pods): new workers need a label only `good` has.
    store = cluster.server.store
    store.patch("nodes", "", good, {"metadata": {"labels": {"rack": "ok"}}}, MERGE)
    store.patch("mpijobs", "default", "r", {"spec": {"mpiReplicaSpecs": {"Worker": {
        "template": {"spec": {"nodeSelector": {"rack": "ok"}}}}}}}, MERGE)
    store.delete("pods", "default", "r-worker-0")  # lost: recreated and pinned again

    def replanned() -> bool:
        sched.step(time.monotonic())
        return running_on(cluster, "r") == {0: good, 1: good}
    eventually(replanned, timeout=60)
    assert set(backend.excluded["r"]) == {refusing}
    assert backend.stats.get("refused_nodes") == 1
    assert sched.jobs["r"].placement == ((good, 2),)
    deleted = [r for r in cluster.server.requests if r.verb == "delete" and r.resource == "pods"]
    assert len(deleted) == 2  # each worker moved once; none deleted to be pinned again
    assert refusing not in backend.job_nodes(["r"]).get("r", {refusing})
    # The refusing node changes (it gets the label): the job may use it again.
    store.patch("nodes", "", refusing, {"metadata": {"labels": {"rack": "ok"}}}, MERGE)
    eventually(lambda: not backend._refusing("r"))


def test_a_refused_node_is_offered_again_after_refused_node_seconds(
        cluster: FakeCluster, backend: KubernetesBackend) -> None:
    backend.settings = dataclasses.replace(backend.settings, refused_node_seconds=0.3)
    pod = {"metadata": {"name": "x-worker-0"}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "message": "0/2 nodes are available"}]}}
    backend._refused("x", "n0", pod)
    backend._refused("x", "n0", pod)  # once per job and node while it lasts
    assert backend._refusing("x") == {"n0"} and backend.stats.get("refused_nodes") == 1
    assert "n0" not in backend.job_nodes(["x"])["x"]
    eventually(lambda: not backend._refusing("x"), timeout=60)
    assert "x" not in backend.job_nodes(["x"])  # every usable node again
