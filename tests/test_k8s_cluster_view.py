"""The cluster view: nodes, GPU capacity, type and topology, and the GPUs that pods
Voda does not manage hold; claims shared by two schedulers; informers that survive
outages and compaction."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voda.backends.kubernetes.api import KubeApi
from voda.backends.kubernetes.cluster_view import ClusterView, watch_cluster
from voda.backends.kubernetes.settings import KubernetesSettings
from voda_testing.kube import FakeApiServer
from voda_testing.kube.cluster import GPU, ClusterSimulator, SimSettings, make_node
from voda_testing.kube.harness import eventually


def node(name: str, gpus: int = 4, **labels: str) -> dict[str, Any]:
    return make_node(name, gpus, labels)


def bound_pod(name: str, node_name: str, gpus: int, owner: str | None = None,
              phase: str = "Running") -> dict[str, Any]:
    labels = {"voda.io/job": owner} if owner else {}
    return {"metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {GPU: str(gpus)}}}]},
            "status": {"phase": phase}}


def test_nodes_carry_gpus_type_and_topology_from_labels() -> None:
    view = ClusterView()
    view.on_node("ADDED", node("a", 8, **{"voda.io/gpu-type": "a100", "voda.io/spine": "s1",
                                          "voda.io/leaf": "l1"}))
    view.on_node("ADDED", node("b", 4))
    (a, b) = view.capacity()
    assert (a.name, a.gpus, a.gpu_type, a.leaf, a.spine) == ("a", 8, "a100", "s1/l1", "s1")
    assert (b.gpus, b.gpu_type, b.leaf) == (4, "default", None)


def test_topology_levels_and_gpu_type_label_are_settings() -> None:
    settings = KubernetesSettings(gpu_type_label="gpu", topology_labels=(
        "zone", "rack", "kubernetes.io/hostname"))
    view = ClusterView(settings)
    view.on_node("ADDED", node("a", 2, gpu="h100", zone="z", rack="r"))
    (a,) = view.capacity()
    assert (a.gpu_type, a.leaf, a.spine) == ("h100", "z/r", "z")


def test_cordoned_and_not_ready_nodes_stop_counting() -> None:
    view = ClusterView()
    cordoned = node("a")
    cordoned["spec"]["unschedulable"] = True
    down = node("b")
    down["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    for obj in (cordoned, down, node("c")):
        view.on_node("ADDED", obj)
    assert [n.name for n in view.capacity()] == ["c"]
    assert view.free("a") == 0 and view.free("b") == 0


def test_gpus_held_by_pods_voda_does_not_manage_are_subtracted() -> None:
    view = ClusterView()
    view.on_node("ADDED", node("a", 8))
    view.on_pod("ADDED", bound_pod("other", "a", 3))
    view.on_pod("ADDED", bound_pod("mine", "a", 2, owner="job-1"))
    view.on_pod("ADDED", bound_pod("done", "a", 2, phase="Succeeded"))
    (a,) = view.capacity(owners=lambda owner: owner.startswith("job-"))
    assert a.gpus == 5  # 8 - 3 held by the unmanaged pod; job-1's own pods are its business
    assert view.free("a") == 3
    view.on_pod("DELETED", bound_pod("other", "a", 3))
    assert view.capacity(owners=lambda o: True)[0].gpus == 8


def test_two_schedulers_sharing_the_view_never_claim_the_same_gpu() -> None:
    view = ClusterView()
    view.on_node("ADDED", node("a", 4))
    assert view.set_claims("elastic/job-1", {"a": 3}) == []
    assert not view.claim("pod/x", "a", 2)  # only 1 left
    assert view.claim("pod/x", "a", 1)
    assert view.free("a") == 0
    assert view.set_claims("elastic/job-2", {"a": 1}) == ["a"]  # does not fit: flagged
    assert not view.fits("elastic/job-2", "a", 1)
    view.release("pod/x")
    assert view.fits("elastic/job-2", "a", 1)
    (a,) = view.capacity(owners=lambda o: o.startswith("elastic/"))
    assert a.gpus == 4  # what the elastic owners may share among themselves


@given(st.lists(st.tuples(st.sampled_from(["x", "y", "z"]), st.sampled_from(["a", "b"]),
                          st.integers(0, 5)), max_size=30))
def test_claims_never_exceed_a_nodes_gpus(requests: list[tuple[str, str, int]]) -> None:
    view = ClusterView()
    view.on_node("ADDED", node("a", 4))
    view.on_node("ADDED", node("b", 2))
    view.on_pod("ADDED", bound_pod("p", "b", 1))
    for owner, node_name, gpus in requests:
        view.claim(owner, node_name, gpus)
    for name, gpus in (("a", 4), ("b", 2)):
        claimed = sum(c.get(name, 0) for c in view.claims.values())
        held = sum(view.held(name).values())
        assert claimed + held <= gpus


# ----- informers on the fake API server ------------------------------------------------------
@pytest.fixture
def cluster(fake_api: FakeApiServer) -> Iterator[tuple[ClusterSimulator, ClusterView, Any]]:
    for name in [n["metadata"]["name"] for n in fake_api.store.list("nodes")[0]]:
        fake_api.store.delete("nodes", "", name)
    sim = ClusterSimulator(fake_api.store, SimSettings(tick_seconds=0.01, start_seconds=0.01,
                                                       terminate_seconds=0.01)).start()
    api = KubeApi.connect(str(fake_api.kubeconfig), backoff=0.05, max_backoff=0.2)
    view = ClusterView()
    informers = watch_cluster(api, view, watch_seconds=2)
    for informer in informers:
        informer.backoff, informer.max_backoff = 0.05, 0.2
        informer.start()
    assert all(i.synced.wait(10) for i in informers)
    yield sim, view, informers
    for informer in informers:
        informer.stop()
    sim.stop()


def test_the_view_follows_nodes_added_cordoned_not_ready_and_removed(
        cluster: tuple[ClusterSimulator, ClusterView, Any]) -> None:
    sim, view, _ = cluster
    for name in ("a", "b", "c"):
        sim.add_node(name, 4)
    eventually(lambda: [n.name for n in view.capacity()] == ["a", "b", "c"])
    sim.cordon("a")
    sim.set_ready("b", False)
    sim.remove_node("c")
    eventually(lambda: view.capacity() == [])
    sim.cordon("a", False)
    eventually(lambda: [n.name for n in view.capacity()] == ["a"])


def test_the_view_sees_gpus_of_pods_bound_by_the_cluster(
        cluster: tuple[ClusterSimulator, ClusterView, Any], namespace: str) -> None:
    sim, view, _ = cluster
    sim.add_node("a", 4)
    sim.store.create("pods", namespace, {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "i", "resources": {"limits": {GPU: "3"}}}]}})
    eventually(lambda: view.capacity() and view.capacity()[0].gpus == 1)
    sim.store.delete("pods", namespace, "p")
    eventually(lambda: view.capacity()[0].gpus == 4)


def test_informers_survive_an_outage_and_relist_after_compaction(
        cluster: tuple[ClusterSimulator, ClusterView, Any], fake_api: FakeApiServer) -> None:
    sim, view, informers = cluster
    sim.add_node("a", 4)
    eventually(lambda: len(view.capacity()) == 1)
    relists = [i.relists for i in informers]
    with fake_api.outage("refuse"):
        sim.add_node("b", 4)
        sim.remove_node("a")
        fake_api.store.compact()  # the history the watches would resume from is gone
        time.sleep(0.5)
    eventually(lambda: [n.name for n in view.capacity()] == ["b"])
    eventually(lambda: all(i.relists > r for i, r in zip(informers, relists, strict=True)))
    assert all(i.errors > 0 for i in informers)
