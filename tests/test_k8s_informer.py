"""The informer against the fake API server: a watch that goes silent without closing is
noticed and opened again; an event a handler refuses is delivered again, in order; lists
come in pages; a relist after 410 Gone finds what changed."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from voda.backends.kubernetes.api import Kind, KubeApi, decode_lazy_list
from voda.backends.kubernetes.informer import Informer, predates
from voda.backends.kubernetes.settings import KubernetesSettings
from voda_testing.kube import FakeApiServer
from voda_testing.kube.harness import eventually

CONFIGMAPS = Kind("", "v1", "configmaps")
Obj = dict[str, Any]


class Recorder:
    """A handler that keeps what it took, refusing named objects a number of times."""

    def __init__(self, refuse: dict[str, int] | None = None) -> None:
        self.refuse = dict(refuse or {})
        self.taken: list[tuple[str, str, str]] = []  # (event, name, data value)
        self.lock = threading.Lock()

    def __call__(self, kind: str, obj: Obj, old: Obj | None) -> None:
        name = obj["metadata"]["name"]
        with self.lock:
            if self.refuse.get(name, 0) > 0:
                self.refuse[name] -= 1
                raise RuntimeError(f"handler cannot take {name} now")
            self.taken.append((kind, name, (obj.get("data") or {}).get("v", "")))

    def names(self) -> set[str]:
        with self.lock:
            return {name for _, name, _ in self.taken}

    def of(self, name: str) -> list[tuple[str, str]]:
        with self.lock:
            return [(kind, value) for kind, n, value in self.taken if n == name]


@pytest.fixture
def api(fake_api: FakeApiServer) -> KubeApi:
    return KubeApi.connect(str(fake_api.kubeconfig), backoff=0.05, max_backoff=0.2)


@pytest.fixture
def informers() -> Iterator[list[Informer]]:
    started: list[Informer] = []
    yield started
    for informer in started:
        informer.stop()


def start(informers: list[Informer], informer: Informer) -> Informer:
    informer.backoff, informer.max_backoff = 0.05, 0.2
    informers.append(informer.start())
    assert informer.synced.wait(20)
    return informer


def config_map(name: str, value: str = "1") -> Obj:
    return {"metadata": {"name": name}, "data": {"v": value}}


def test_a_watch_that_goes_silent_is_noticed_and_opened_again(
        fake_api: FakeApiServer, api: KubeApi, namespace: str,
        informers: list[Informer]) -> None:
    handler = Recorder()
    informer = start(informers, Informer(api, CONFIGMAPS, handler, namespace,
                                         watch_seconds=300, idle_seconds=2.0))
    eventually(lambda: fake_api.stall_watches() > 0)  # its watch is open, now dead
    fake_api.store.create("configmaps", namespace, config_map("after"))
    eventually(lambda: "after" in handler.names(), timeout=60)
    assert informer.idle_restarts >= 1 and informer.relists == 1  # resumed, not relisted


def test_a_dead_watch_is_noticed_within_a_minute_by_default() -> None:
    assert KubernetesSettings().watch_idle_seconds <= 60
    informer = Informer(KubeApi(None), CONFIGMAPS, Recorder())
    assert informer.idle_seconds <= 60
    assert informer._watch_seconds() < informer.idle_seconds  # healthy ones end first


def test_an_event_the_handler_refuses_is_delivered_again_in_order(
        fake_api: FakeApiServer, api: KubeApi, namespace: str, informers: list[Informer],
        caplog: pytest.LogCaptureFixture) -> None:
    handler = Recorder(refuse={"b": 3})
    informer = start(informers, Informer(api, CONFIGMAPS, handler, namespace))
    with caplog.at_level(logging.ERROR, logger="voda.backends.kubernetes.informer"):
        for name in ("a", "b", "c"):
            fake_api.store.create("configmaps", namespace, config_map(name))
        fake_api.store.update("configmaps", namespace, "b", config_map("b", "2"))
        eventually(lambda: handler.of("b") == [("ADDED", "1"), ("MODIFIED", "2")])
    assert handler.of("a") == [("ADDED", "1")] and handler.of("c") == [("ADDED", "1")]
    assert informer.handler_errors == 3 and not informer.undelivered
    assert "the handler failed on ADDED" in caplog.text


def test_an_event_refused_during_a_relist_is_delivered_again(
        fake_api: FakeApiServer, api: KubeApi, namespace: str,
        informers: list[Informer]) -> None:
    fake_api.store.create("configmaps", namespace, config_map("listed"))
    handler = Recorder(refuse={"listed": 2})
    start(informers, Informer(api, CONFIGMAPS, handler, namespace))
    fake_api.store.create("configmaps", namespace, config_map("later"))  # wakes the watch
    eventually(lambda: handler.of("listed") == [("ADDED", "1")])


def test_lists_come_in_pages_and_a_relist_sees_every_object(
        fake_api: FakeApiServer, namespace: str, informers: list[Informer]) -> None:
    for i in range(7):
        fake_api.store.create("configmaps", namespace, config_map(f"m{i}"))
    api = KubeApi.connect(str(fake_api.kubeconfig), page_size=3)
    handler = Recorder()
    start(informers, Informer(api, CONFIGMAPS, handler, namespace))
    assert handler.names() == {f"m{i}" for i in range(7)}
    lists = [r for r in fake_api.requests if r.verb == "list" and
             r.path.endswith(f"/namespaces/{namespace}/configmaps")]
    assert len(lists) == 3 and all("limit=3" in r.query for r in lists)
    assert sum("continue=" in r.query for r in lists) == 2


def test_the_backend_lists_in_pages_by_default(fake_api: FakeApiServer,
                                               namespace: str) -> None:
    api = KubeApi.connect(str(fake_api.kubeconfig))
    api.list(CONFIGMAPS, namespace)
    last = [r for r in fake_api.requests if r.verb == "list"][-1]
    assert f"limit={KubernetesSettings().list_page_size}" in last.query


def test_a_continue_token_that_expired_lists_again_in_one_request(
        fake_api: FakeApiServer, namespace: str) -> None:
    for i in range(5):
        fake_api.store.create("configmaps", namespace, config_map(f"e{i}"))
    api = KubeApi.connect(str(fake_api.kubeconfig), page_size=2)
    limit = fake_api.snapshot_limit
    fake_api.snapshot_limit = 0  # every snapshot is forgotten at once: the token is 410
    try:
        listed = api.list(CONFIGMAPS, namespace)
    finally:
        fake_api.snapshot_limit = limit
    assert sorted(o["metadata"]["name"] for o in listed["items"]) == [
        f"e{i}" for i in range(5)]
    assert "continue" not in listed["metadata"]


def test_pages_fetched_ahead_list_everything_when_a_token_expires(
        fake_api: FakeApiServer, namespace: str) -> None:
    for i in range(5):
        fake_api.store.create("configmaps", namespace, config_map(f"f{i}"))
    api = KubeApi.connect(str(fake_api.kubeconfig), page_size=2)
    limit = fake_api.snapshot_limit
    fake_api.snapshot_limit = 0  # the token of the page fetched ahead is 410
    try:
        pages = list(api.list_pages(CONFIGMAPS, namespace, lazy=True, prefetch=True))
    finally:
        fake_api.snapshot_limit = limit
    assert {name for page in pages for _, name, _ in page["items"].heads()} == {
        f"f{i}" for i in range(5)}
    assert "continue" not in pages[-1]["metadata"] and len(pages[-1]["items"]) == 5


def test_a_lazy_list_decodes_an_item_only_when_asked() -> None:
    listed = {"kind": "ConfigMapList", "apiVersion": "v1",
              "metadata": {"resourceVersion": "9", "continue": "c"},
              "items": [{"metadata": {"name": "a", "namespace": "n", "resourceVersion": "3",
                                      "labels": {"x": "y"}}, "data": {"v": "1"}},
                        {"metadata": {"name": "b"}}]}
    page = decode_lazy_list(json.dumps(listed).encode())
    assert page["metadata"] == listed["metadata"] and page["kind"] == "ConfigMapList"
    items = page["items"]
    assert len(items) == 2 and items.heads() == [("n", "a", "3"), ("", "b", None)]
    assert items._raws is None  # the heads alone: no item decoded yet
    assert items[1] == listed["items"][1] and list(items) == listed["items"]
    assert len(decode_lazy_list(b'{"metadata": {}, "items": null}')["items"]) == 0


def test_a_relist_decodes_and_transforms_only_what_changed(
        fake_api: FakeApiServer, namespace: str, informers: list[Informer]) -> None:
    for i in range(7):
        fake_api.store.create("configmaps", namespace, config_map(f"r{i}"))
    api = KubeApi.connect(str(fake_api.kubeconfig), page_size=3)
    transformed: list[str] = []

    def transform(obj: Obj) -> Obj:
        transformed.append(obj["metadata"]["name"])
        return obj

    informer = start(informers, Informer(api, CONFIGMAPS, Recorder(), namespace,
                                         transform=transform))
    assert sorted(transformed) == [f"r{i}" for i in range(7)]
    informer.stop()
    fake_api.store.update("configmaps", namespace, "r3", config_map("r3", "2"))
    fake_api.store.delete("configmaps", namespace, "r5")
    transformed.clear()
    informer._relist()
    assert transformed == ["r3"]
    relist = informer.last_relist
    assert (relist["objects"], relist["changed"], relist["deleted"], relist["pages"]) == (
        6, 1, 1, 2)
    assert relist["seconds"] >= relist["waited"] + relist["deliver"]


def test_a_watch_whose_connection_drops_is_opened_again_at_once(
        fake_api: FakeApiServer, api: KubeApi, namespace: str,
        informers: list[Informer]) -> None:
    handler = Recorder()
    informer = Informer(api, CONFIGMAPS, handler, namespace, backoff=30.0, max_backoff=30.0)
    informers.append(informer.start())
    assert informer.synced.wait(20)
    eventually(lambda: informer._watch_opened is not None)
    time.sleep(1.1)  # open for a second: a watch, not "a very short watch"
    assert fake_api.close_watches() > 0
    fake_api.store.create("configmaps", namespace, config_map("after"))
    eventually(lambda: handler.of("after") == [("ADDED", "1")], timeout=10)
    assert informer.errors == 0


def test_informers_keep_what_voda_reads_of_other_owners_pods() -> None:
    from voda.backends.kubernetes.slim import slim, slim_pod

    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "t", "labels": {"app": "web"},
                        "managedFields": [{"manager": "kubelet"}], "uid": "u"},
           "spec": {"nodeName": "n", "priority": 5, "tolerations": [{"key": "k"}],
                    "affinity": {"nodeAffinity": {}}, "volumes": [
                        {"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
                        {"name": "token", "projected": {"sources": []}}],
                    "containers": [{"name": "app", "image": "i", "env": [{"name": "X"}],
                                    "resources": {"requests": {"cpu": "1"}},
                                    "ports": [{"containerPort": 80, "hostPort": 80}],
                                    "volumeMounts": [{"name": "token"}]}]},
           "status": {"phase": "Running", "conditions": [{"type": "Ready"}],
                      "containerStatuses": [{"name": "app"}], "podIP": "10.0.0.1"}}
    other = slim_pod(pod, "voda.io/job")
    assert "managedFields" not in other["metadata"] and other["metadata"]["labels"]
    assert other["spec"]["containers"] == [{"name": "app", "image": "i", "resources": {
        "requests": {"cpu": "1"}}, "ports": [{"containerPort": 80, "hostPort": 80}]}]
    assert [v["name"] for v in other["spec"]["volumes"]] == ["data"]
    assert other["spec"]["tolerations"] and other["spec"]["affinity"] is not None
    assert other["status"] == {"phase": "Running", "conditions": [{"type": "Ready"}]}
    ours = {**pod, "metadata": {**pod["metadata"], "labels": {"voda.io/job": "j"}}}
    kept = slim_pod(ours, "voda.io/job")
    assert kept["spec"] == pod["spec"] and kept["status"] == pod["status"]
    assert "managedFields" not in kept["metadata"] and "managedFields" not in slim(
        ours)["metadata"]
    assert pod["metadata"]["managedFields"]  # the original is left alone


def test_a_relist_keeps_the_cached_copy_of_an_object_that_did_not_change(
        fake_api: FakeApiServer, api: KubeApi, namespace: str,
        informers: list[Informer]) -> None:
    for name in ("same", "changed"):
        fake_api.store.create("configmaps", namespace, config_map(name))
    handler = Recorder()
    informer = start(informers, Informer(api, CONFIGMAPS, handler, namespace,
                                         transform=lambda o: {**o, "seen": True}))
    cached = informer.cache[(namespace, "same")]
    assert cached["seen"]
    informer.stop()
    fake_api.store.update("configmaps", namespace, "changed", config_map("changed", "2"))
    informer._relist()
    assert informer.cache[(namespace, "same")] is cached
    assert informer.cache[(namespace, "changed")]["data"] == {"v": "2"}
    assert handler.of("changed") == [("ADDED", "1"), ("MODIFIED", "2")]
    assert handler.of("same") == [("ADDED", "1")]


def test_the_cluster_wide_pod_watch_leaves_out_pods_that_ended(
        fake_api: FakeApiServer, api: KubeApi, namespace: str,
        informers: list[Informer]) -> None:
    from voda.backends.kubernetes.cluster_view import NOT_ENDED, ClusterView, watch_cluster

    def make(name: str, phase: str) -> None:
        fake_api.store.create("pods", namespace, {"metadata": {"name": name}, "spec": {
            "nodeName": "n", "containers": [{"name": "c", "image": "i"}]}})
        fake_api.store.patch("pods", namespace, name, {"status": {"phase": phase}},
                             "application/merge-patch+json", subresource="status")

    make("done", "Succeeded")
    make("running", "Running")
    make("failing", "Running")
    seen: list[tuple[str, str]] = []
    view = ClusterView()
    view.pod_handlers.append(lambda kind, obj, old: seen.append((kind, obj["metadata"]["name"])))
    for informer in watch_cluster(api, view):
        start(informers, informer)
    pods = informers[1]
    names = {name for ns, name in pods.cache if ns == namespace}
    assert names == {"running", "failing"}
    fake_api.store.patch("pods", namespace, "failing", {"status": {"phase": "Failed"}},
                         "application/merge-patch+json", subresource="status")
    eventually(lambda: ("DELETED", "failing") in seen)
    assert (namespace, "failing") not in pods.cache
    watched = [r for r in fake_api.requests if r.path == "/api/v1/pods"]
    assert watched and all("fieldSelector=status.phase" in r.query for r in watched)
    assert pods.field_selector == NOT_ENDED


def test_an_event_older_than_our_own_write_is_told_apart() -> None:
    def obj(uid: str, rv: str) -> Obj:
        return {"metadata": {"uid": uid, "resourceVersion": rv}}

    written = obj("u1", "120")
    assert predates(obj("u1", "99"), written)  # integers, not strings: "99" > "120"
    assert not predates(obj("u1", "120"), written)
    assert not predates(obj("u1", "121"), written)
    assert not predates(obj("u2", "5"), written)  # another object of the same name
    assert not predates(obj("u1", "5"), None)
    assert not predates(obj("u1", "a9"), obj("u1", "b1"))  # not etcd's: taken as new
