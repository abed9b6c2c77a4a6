"""The pod scheduler's parts on their own: the cluster state it keeps from watches, the
recovery bookkeeping, Events and their limiter, owners, and its serve settings."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.pod_builders import make_nodes, make_pod, snapshot_of
from voda.backends.kubernetes.cluster_view import ClusterView
from voda.podsched import filters, preempt, volumes
from voda.podsched.claims import Claims
from voda.podsched.config import SchedulerConfig
from voda.podsched.config_source import ConfigSource
from voda.podsched.events import EventLimiter, event_body
from voda.podsched.model import GPU, PODS, Owner, Toleration
from voda.podsched.owners import Owners
from voda.podsched.recovery import (
    NOT_READY_TAINT,
    UNREACHABLE_TAINT,
    RecoveryTracker,
    toleration_seconds,
)
from voda.podsched.service import pod_scheduler_settings
from voda.podsched.state import ClusterState


def pod_obj(name: str, gpus: int = 1, node: str = "", scheduler: str = "voda-scheduler",
            phase: str = "Pending", deleting: bool = False, gated: bool = False,
            uid: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid or f"u-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [
        {"name": "c", "resources": {"limits": {GPU: str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": "x"}]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def node_obj(name: str, gpus: int = 8, ready: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"voda.io/leaf": "l"}},
            "status": {"allocatable": {GPU: str(gpus), PODS: "110"},
                       "conditions": [{"type": "Ready", "status": str(ready)}]}}


# ----- the state --------------------------------------------------------------------------
def test_bound_pods_of_any_scheduler_hold_their_node_until_they_end() -> None:
    state = ClusterState("voda-scheduler")
    state.node_event("ADDED", node_obj("n"))
    state.pod_event("ADDED", pod_obj("theirs", 3, "n", scheduler="default-scheduler"))
    state.pod_event("ADDED", pod_obj("ours", 2, "n"))
    assert state.snapshot().requested["n"][GPU] == 5
    state.pod_event("MODIFIED", pod_obj("theirs", 3, "n", "default-scheduler", "Succeeded"))
    assert state.snapshot().requested["n"][GPU] == 2
    change = state.pod_event("DELETED", pod_obj("ours", 2, "n", phase="Running"))
    assert change.lost and state.snapshot().requested["n"][GPU] == 0


def test_an_assumed_pod_counts_once_whatever_the_watch_shows_next() -> None:
    state = ClusterState("voda-scheduler")
    state.node_event("ADDED", node_obj("n"))
    state.pod_event("ADDED", pod_obj("p", 4))
    (record,) = state.pending()
    state.assume(record.pod, "n")
    assert state.pending() == [] and state.snapshot().requested["n"][GPU] == 4
    state.pod_event("MODIFIED", pod_obj("p", 4))  # a status change, still unbound
    assert state.snapshot().requested["n"][GPU] == 4
    state.pod_event("MODIFIED", pod_obj("p", 4, "n"))  # the binding seen
    assert state.snapshot().requested["n"][GPU] == 4 and state.assumed_node("ns/p") is None
    state.pod_event("ADDED", pod_obj("q", 2))
    (q,) = state.pending()
    state.assume(q.pod, "n")
    state.forget(q.pod)  # the binding failed
    assert state.snapshot().requested["n"][GPU] == 4 and len(state.pending()) == 1


def test_the_pods_on_a_node_are_those_bound_there_that_hold_it() -> None:
    state = ClusterState("voda-scheduler")
    for name in ("n", "m"):
        state.node_event("ADDED", node_obj(name))
    state.pod_event("ADDED", pod_obj("here", 1, "n"))
    state.pod_event("ADDED", pod_obj("theirs", 1, "n", scheduler="default-scheduler"))
    state.pod_event("ADDED", pod_obj("going", 1, "n", phase="Running", deleting=True))
    state.pod_event("ADDED", pod_obj("ended", 1, "n", phase="Succeeded"))
    state.pod_event("ADDED", pod_obj("there", 1, "m"))
    state.pod_event("ADDED", pod_obj("waiting", 1))
    (waiting,) = state.pending()
    state.assume(waiting.pod, "n")  # counted on n, but not bound there yet
    assert sorted(r.pod.name for r in state.on_node("n")) == ["going", "here", "theirs"]
    state.pod_event("DELETED", pod_obj("here", 1, "n", phase="Running"))
    assert sorted(r.pod.name for r in state.on_node("n")) == ["going", "theirs"]
    assert [r.pod.name for r in state.on_node("m")] == ["there"]
    assert state.on_node("nowhere") == []


def test_neighbours_with_host_ports_stay_counted_once_their_binding_is_seen() -> None:
    state = ClusterState("voda-scheduler")
    state.node_event("ADDED", node_obj("n"))
    web = pod_obj("web")
    web["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
    state.pod_event("ADDED", web)
    state.pod_event("ADDED", pod_obj("plain", 1, "n"))
    (record,) = state.pending()
    state.assume(record.pod, "n")
    assert [p.name for p in state.snapshot().neighbours["n"]] == ["web"]
    state.pod_event("MODIFIED", {**web, "spec": {**web["spec"], "nodeName": "n"}})
    (seen,) = state.snapshot().neighbours["n"]
    assert seen.name == "web" and seen.host_ports == {("0.0.0.0", "TCP", 80)}
    assert sorted(p.name for p in state.snapshot(everyone=True).neighbours["n"]) == [
        "plain", "web"]
    state.pod_event("DELETED", {**web, "spec": {**web["spec"], "nodeName": "n"}})
    assert "n" not in state.snapshot().neighbours


def test_gated_and_ending_pods_do_not_wait_for_this_scheduler() -> None:
    state = ClusterState("voda-scheduler")
    state.pod_event("ADDED", pod_obj("gated", gated=True))
    state.pod_event("ADDED", pod_obj("going", deleting=True))
    state.pod_event("ADDED", pod_obj("failed", phase="Failed"))
    state.pod_event("ADDED", pod_obj("other", scheduler="default-scheduler"))
    assert state.pending() == []
    state.pod_event("MODIFIED", pod_obj("gated"))
    assert [r.pod.name for r in state.pending()] == ["gated"]


def test_an_unreadable_pod_of_ours_is_kept_with_its_reason() -> None:
    state = ClusterState("voda-scheduler")
    bad = pod_obj("bad")
    bad["spec"]["containers"][0]["resources"]["limits"][GPU] = "lots"
    state.pod_event("ADDED", bad)
    (record,) = state.pending()
    assert "not a quantity" in record.error


# ----- recovery ------------------------------------------------------------------------------
def test_a_loss_is_counted_once_and_timed_by_its_replacement() -> None:
    tracker = RecoveryTracker(window=100)
    pod = make_pod("a").on("n1").obj()
    tracker.lost(pod, "ns/Job/j", now=10.0)
    tracker.lost(pod, "ns/Job/j", now=12.0)  # deleted later: the same loss
    assert tracker.recovering("ns/Job/j") and tracker.lost_nodes("ns/Job/j") == {"n1": 1}
    assert tracker.replaced("ns/Job/j", now=13.5) == 3.5
    assert tracker.replaced("ns/Job/j", now=14.0) is None
    tracker.lost(pod, "ns/Job/j", now=20.0)
    assert not tracker.recovering("ns/Job/j")


def test_losses_expire_and_a_node_back_in_time_loses_nothing() -> None:
    tracker = RecoveryTracker(window=5)
    tracker.lost(make_pod("a").on("n1").obj(), "w", now=0.0)
    tracker.expire(now=6.0)
    assert not tracker.recovering("w")
    b = make_pod("b").on("n2").obj()
    tracker.lost(b, "w", now=10.0)
    tracker.back([b.key])
    assert tracker.replaced("w", now=11.0) is None
    tracker.node_not_ready("n2", 10.0)
    tracker.node_not_ready("n2", 12.0)  # still the first time seen
    assert tracker.not_ready_nodes() == [("n2", 10.0)]
    tracker.node_ready("n2")
    assert tracker.not_ready_nodes() == []


def test_a_pod_stays_on_a_not_ready_node_as_long_as_it_tolerates_the_taint() -> None:
    bare = make_pod("a").obj()
    assert toleration_seconds(bare, UNREACHABLE_TAINT, 300.0) == 300.0  # the default
    admitted = (make_pod("b").tolerates(NOT_READY_TAINT, effect="NoExecute", operator="Exists")
                .with_(tolerations=(
                    Toleration(NOT_READY_TAINT, "Exists", "", "NoExecute", 300.0),
                    Toleration(UNREACHABLE_TAINT, "Exists", "", "NoExecute", 300.0),
                    Toleration(UNREACHABLE_TAINT, "Exists", "", "NoExecute", 40.0))).obj())
    assert toleration_seconds(admitted, UNREACHABLE_TAINT, 5.0) == 40.0  # the smallest
    assert toleration_seconds(admitted, NOT_READY_TAINT, 5.0) == 300.0
    forever = make_pod("c").tolerates("", operator="Exists").obj()  # tolerates every taint
    assert toleration_seconds(forever, NOT_READY_TAINT, 300.0) is None
    other = make_pod("d").tolerates("dedicated", "x", "NoExecute").obj()
    assert toleration_seconds(other, NOT_READY_TAINT, 7.0) == 7.0
    schedule_only = make_pod("e").tolerates(NOT_READY_TAINT, effect="NoSchedule",
                                            operator="Exists").obj()
    assert toleration_seconds(schedule_only, NOT_READY_TAINT, 7.0) == 7.0


# ----- events --------------------------------------------------------------------------------
def test_events_name_the_pod_and_repeat_only_after_a_while() -> None:
    pod = make_pod("p").obj()
    body = event_body(pod, "FailedScheduling", "x" * 5000, "Warning", 0.0, "voda-scheduler", "i")
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "p",
                                      "namespace": "default", "uid": pod.uid}
    assert len(body["message"]) == 1024 and body["source"] == {"component": "voda-scheduler"}
    limiter = EventLimiter(repeat=60)
    assert limiter.allow(pod, "R", "m", 0.0)
    assert not limiter.allow(pod, "R", "m", 30.0)
    assert limiter.allow(pod, "R", "other", 31.0)
    assert limiter.allow(pod, "R", "other", 92.0)


# ----- owners --------------------------------------------------------------------------------
def test_a_deployments_pods_are_one_workload_with_its_annotations() -> None:
    objects = {
        ("ReplicaSet", "web-1"): {"metadata": {"uid": "rs1", "annotations": {"a": "rs"},
                                               "ownerReferences": [{"kind": "Deployment",
                                                                    "name": "web", "uid": "d",
                                                                    "controller": True}]}},
        ("Deployment", "web"): {"metadata": {"uid": "d", "annotations": {"a": "d", "b": "d"}}},
    }
    calls: list[tuple[str, str]] = []

    def get(kind: str, namespace: str, name: str) -> Any:
        calls.append((kind, name))
        return objects.get((kind, name))

    owners = Owners(get, clock=lambda: 0.0, ttl=30)
    pod = make_pod("web-1-x").with_(owner=Owner("ReplicaSet", "web-1", "rs1")).obj()
    workload = owners.resolve(pod)
    assert workload.key == "default/Deployment/web"
    assert [dict(layer) for layer in workload.layers] == [{"a": "rs"}, {"a": "d", "b": "d"}]
    owners.resolve(pod)
    assert len(calls) == 2  # cached
    bare = make_pod("solo").obj()
    assert owners.resolve(bare).key == "default/Pod/solo"
    custom = make_pod("w").with_(owner=Owner("MPIJob", "m", "x")).obj()
    assert owners.resolve(custom).key == "default/MPIJob/m"
    stale = make_pod("web-2-y").with_(owner=Owner("ReplicaSet", "web-1", "another")).obj()
    assert owners.resolve(stale).layers == ()  # a new object under the old name


# ----- serve settings ------------------------------------------------------------------------
def server(**table: Any) -> Any:
    return SimpleNamespace(pod_scheduler_settings=table)


def test_serve_settings_default_to_a_config_map_in_voda_s_namespace() -> None:
    settings = pod_scheduler_settings(server(), "voda")
    assert settings is not None
    assert settings.config_map == "voda/voda-scheduler-config"
    assert settings.scheduler_name == "voda-scheduler"
    assert pod_scheduler_settings(server(enabled=False), "voda") is None
    from_file = pod_scheduler_settings(server(config_file="/etc/voda/scheduler.yaml"), "voda")
    assert from_file is not None and from_file.config_map is None


@pytest.mark.parametrize(("table", "says"), [
    ({"bogus": 1}, "pod_scheduler.bogus: unknown setting"),
    ({"enabled": "yes"}, "pod_scheduler.enabled: expected true or false"),
    ({"retry_seconds": 0}, "pod_scheduler.retry_seconds: expected seconds"),
    ({"event_repeat_seconds": 1e9}, "pod_scheduler.event_repeat_seconds"),
    ({"scheduler_name": "Not A Name"}, "pod_scheduler.scheduler_name: must be"),
    ({"config_map": "no-slash"}, "pod_scheduler.config_map: expected namespace/name"),
    ({"config_key": 3}, "pod_scheduler.config_key: expected a string"),
])
def test_bad_serve_settings_name_the_setting(table: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(")):
        pod_scheduler_settings(server(**table), "voda")


# ----- configuration source ---------------------------------------------------------------
def test_a_config_file_is_read_again_when_it_changes_and_a_bad_one_is_refused(
        tmp_path: Path) -> None:
    path = tmp_path / "scheduler.yaml"
    path.write_text("scoringWeights: {resourceAvailability: 0.9}\n")
    changes: list[SchedulerConfig] = []
    source = ConfigSource(changes.append, config_file=str(path))
    source.poll_file()
    assert source.config.placement.resource_weight == 0.9 and len(changes) == 1
    source.poll_file()
    assert len(changes) == 1  # unchanged file: not read again
    path.write_text("scoringWeights: {resourceAvailability: -2}\n")
    os.utime(path, (1, 1))
    source.poll_file()
    assert source.config.placement.resource_weight == 0.9
    assert source.error and "scoringWeights.resourceAvailability: must lie in" in source.error
    source.config_map_event("DELETED", {})
    assert source.config == SchedulerConfig() and source.error is None


# ----- claims -------------------------------------------------------------------------------
def test_a_decisions_gpus_are_claimed_all_or_none_and_released_once_counted() -> None:
    view = ClusterView()
    view.on_node("ADDED", node_obj("n", gpus=8))
    gone: set[str] = set()
    claims = Claims(view, lambda pod: pod.key not in gone)
    a, b = make_pod("a").gpus(4).obj(), make_pod("b").gpus(4).obj()
    assert view.claim("elastic-job", "n", 2)
    assert claims.claim_all([(a, "n"), (b, "n")]) == "n"  # 4 + 4 > 8 - 2: none kept
    assert view.claimed("pod/default/a") == {} and claims.open() == []
    view.release("elastic-job")
    assert claims.claim_all([(a, "n"), (b, "n")]) is None
    assert view.free("n") == 0
    view.on_pod("ADDED", {"metadata": {"name": "a", "namespace": "default"},
                          "spec": {"nodeName": "n", "containers": [
                              {"resources": {"limits": {GPU: "4"}}}]},
                          "status": {"phase": "Running"}})
    claims.release_counted()
    assert claims.open() == ["pod/default/b"] and view.free("n") == 0
    gone.add(b.key)
    claims.release_counted()
    assert claims.open() == [] and view.free("n") == 4


def test_a_node_write_the_scheduler_does_not_read_keeps_the_snapshots_nodes() -> None:
    state = ClusterState("voda-scheduler")
    state.node_event("ADDED", node_obj("n"))
    nodes = state.snapshot().nodes
    heartbeat = node_obj("n")
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T00:00:10Z"
    state.node_event("MODIFIED", heartbeat)
    assert state.snapshot().nodes is nodes  # the Planner keeps its views
    state.node_event("MODIFIED", node_obj("n", gpus=4))
    assert state.snapshot().nodes is not nodes


# ----- volumes -------------------------------------------------------------------------------
def test_claims_say_where_a_pod_can_go() -> None:
    zone = "topology.kubernetes.io/zone"
    claims = {("ns", "bound"): {"spec": {"volumeName": "pv-b"}},
              ("ns", "late"): {"spec": {"storageClassName": "wffc"}},
              ("ns", "now"): {"spec": {"storageClassName": "fast"}},
              ("ns", "bare"): {"spec": {}},
              ("ns", "dangling"): {"spec": {"volumeName": "gone"}},
              ("ns", "going"): {"metadata": {"deletionTimestamp": "x"}, "spec": {}}}
    pvs = {("", "pv-b"): {"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": zone, "operator": "In", "values": ["b"]}]}]}}}}}
    classes = {("", "wffc"): {"volumeBindingMode": "WaitForFirstConsumer", "allowedTopologies": [
        {"matchLabelExpressions": [{"key": zone, "values": ["a"]}]}]},
               ("", "fast"): {"volumeBindingMode": "Immediate"}}

    def resolved(*names: str) -> volumes.Volumes:
        pod = make_pod("p", "ns").with_(claims=names).obj()
        return volumes.resolve(pod, lambda ns, n: claims.get((ns, n)),
                               lambda ns, n: pvs.get((ns, n)), lambda ns, n: classes.get((ns, n)))

    both = resolved("bound", "late")
    assert both.error == "" and both.provision == ("late",)
    assert [t.reason for t in both.topology] == [volumes.NODE_CONFLICT, volumes.BIND_CONFLICT]
    node_a = make_nodes().nodes(1).change("s0-l0-n0", labels={zone: "a"}).obj()[0]
    node_b = make_nodes().nodes(1).change("s0-l0-n0", labels={zone: "b"}).obj()[0]
    pod = make_pod("p", "ns").with_(volume_topology=both.topology).obj()
    assert filters.static_problem(pod, node_a) == volumes.NODE_CONFLICT
    assert filters.static_problem(replace(pod, volume_topology=both.topology[1:]), node_a) is None
    assert filters.static_problem(replace(pod, volume_topology=both.topology[1:]), node_b) == (
        volumes.BIND_CONFLICT)
    assert resolved("now").error == volumes.UNBOUND_IMMEDIATE
    assert resolved("bare").error == volumes.UNBOUND_IMMEDIATE  # no class: Immediate
    assert resolved("dangling").error == volumes.PV_MISSING
    assert resolved("missing").error == 'persistentvolumeclaim "missing" not found'
    assert resolved("going").error == 'persistentvolumeclaim "going" is being deleted'


# ----- preemption ----------------------------------------------------------------------------
def test_preemption_takes_the_fewest_lowest_priority_victims() -> None:
    nodes = make_nodes().nodes(2).obj()
    n0, n1 = nodes[0].name, nodes[1].name
    running = {
        n0: [make_pod("a").gpus(4).on(n0).with_(priority=10).obj(),
             make_pod("b").gpus(4).on(n0).with_(priority=50).obj()],
        n1: [make_pod("c").gpus(2).on(n1).with_(priority=10).obj(),
             make_pod("d").gpus(2).on(n1).with_(priority=20).obj(),
             make_pod("e").gpus(4).on(n1).with_(priority=5).obj()],
    }
    snapshot = snapshot_of(nodes, [p for pods in running.values() for p in pods])
    vip = make_pod("vip").gpus(4).with_(priority=100).obj()
    found = preempt.find(vip, nodes, snapshot, running)
    # n0 would lose a (10); n1 loses e (5) alone: the lowest highest-victim priority.
    assert found is not None and found.node == n1 and [v.name for v in found.victims] == ["e"]
    big = make_pod("big").gpus(8).with_(priority=30).obj()
    found = preempt.find(big, nodes, snapshot, running)
    assert found is not None and found.node == n1  # b (50) on n0 outranks it
    assert sorted(v.name for v in found.victims) == ["c", "d", "e"]
    assert preempt.find(replace(big, priority=5), nodes, snapshot, running) is None
    never = replace(vip, preempts=False)
    assert not preempt.eligible(never, {})
    nominated = replace(vip, nominated=n1)
    assert not preempt.eligible(nominated, {n1: [running[n1][2]]})  # its victim is going
    assert preempt.eligible(nominated, {n0: [running[n0][0]]})
