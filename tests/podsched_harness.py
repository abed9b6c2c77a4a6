"""A cluster for the pod scheduler's flow tests: the fake API server over loopback HTTP,
the cluster simulator (kube-scheduler, kubelets, node lifecycle, GPU ledger), the
workload controllers (Jobs, Deployments, ReplicaSets) and the pod scheduler itself,
talking to the server through the official client like in a cluster."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from voda.backends.kubernetes.cluster_view import ClusterView, watch_cluster
from voda.podsched.controller import PodScheduler, PodSchedulerSettings
from voda_testing.kube import FakeApiServer
from voda_testing.kube.cluster import ClusterSimulator, SimSettings
from voda_testing.kube.cluster.workloads import WorkloadControllers
from voda_testing.kube.harness import FakeCluster

GPU = "nvidia.com/gpu"
SCHEDULER = "voda-scheduler"
CONFIG_MAP = "voda/voda-scheduler-config"
Obj = dict[str, Any]


def container(gpus: int, cpu: str = "1") -> Obj:
    limits: Obj = {"cpu": cpu, "memory": "1Gi"}
    if gpus:
        limits[GPU] = str(gpus)
    return {"name": "main", "image": "registry.example/app:1", "resources": {"limits": limits}}


def pod_template(gpus: int, annotations: dict[str, str] | None = None,
                 restart: str = "Never", **spec: Any) -> Obj:
    return {"metadata": {"labels": {"app": "x"}, "annotations": annotations or {}},
            "spec": {"schedulerName": SCHEDULER, "restartPolicy": restart,
                     "containers": [container(gpus)], **spec}}


@dataclass
class Cluster:
    """The fake cluster (voda_testing.kube.harness) with workload controllers and the pod
    scheduler on it."""

    fake: FakeCluster
    workloads: WorkloadControllers
    view: ClusterView
    scheduler: PodScheduler
    namespace: str = "default"
    nodes: list[str] = field(default_factory=list)

    @property
    def api(self) -> FakeApiServer:
        return self.fake.server

    @property
    def sim(self) -> ClusterSimulator:
        return self.fake.sim

    @property
    def store(self) -> Any:
        return self.fake.server.store

    # ----- nodes ---------------------------------------------------------------------------
    def grid(self, spines: int, leaves: int, per_leaf: int, gpus: int = 8) -> list[str]:
        """Nodes s<i>-l<j>-n<k> under leaf s<i>-l<j> and spine s<i>."""
        names = []
        for s in range(spines):
            for leaf in range(leaves):
                for k in range(per_leaf):
                    name = f"s{s}-l{leaf}-n{k}"
                    self.sim.add_node(name, gpus, {"voda.io/spine": f"s{s}",
                                                   "voda.io/leaf": f"s{s}-l{leaf}"})
                    names.append(name)
        self.nodes.extend(names)
        return names

    # ----- workloads ---------------------------------------------------------------------------
    def job(self, name: str, pods: int, gpus: int, annotations: dict[str, str] | None = None,
            template_annotations: dict[str, str] | None = None, **spec: Any) -> Obj:
        body = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "annotations": annotations or {}},
                "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 20,
                         "template": pod_template(gpus, template_annotations), **spec}}
        return self.store.create("jobs.batch", self.namespace, body)

    def deployment(self, name: str, replicas: int, gpus: int,
                   annotations: dict[str, str] | None = None, **spec: Any) -> Obj:
        """`spec`: more fields of the pod template's spec."""
        body = {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "annotations": annotations or {}},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                         "template": {**pod_template(gpus, restart="Always", **spec),
                                      "metadata": {"labels": {"app": name}}}}}
        return self.store.create("deployments.apps", self.namespace, body)

    def pods(self, prefix: str = "", bound: bool | None = None) -> list[Obj]:
        items, _ = self.store.list("pods", self.namespace)
        out = [p for p in items if p["metadata"]["name"].startswith(prefix)
               and not p["metadata"].get("deletionTimestamp")]
        if bound is not None:
            out = [p for p in out if bool(p["spec"].get("nodeName")) == bound]
        return sorted(out, key=lambda p: p["metadata"]["name"])

    def bound_nodes(self, prefix: str) -> list[str]:
        return [p["spec"]["nodeName"] for p in self.pods(prefix, bound=True)]

    def events(self, pod_name: str | None = None, reason: str | None = None) -> list[Obj]:
        items, _ = self.store.list("events", self.namespace)
        return [e for e in items
                if (pod_name is None or e["involvedObject"]["name"] == pod_name)
                and (reason is None or e["reason"] == reason)]

    def set_config(self, text: str) -> None:
        namespace, name = CONFIG_MAP.split("/")
        body = {"metadata": {"name": name}, "data": {"config.yaml": text}}
        if self.store.try_get("configmaps", namespace, name) is None:
            self.store.create("configmaps", namespace, body)
        else:
            self.store.update("configmaps", namespace, name, body)

    def gpus_held(self) -> dict[str, int]:
        """GPUs held per node by bound pods, as the ledger counts them now."""
        return {n: c for n, c in self.sim.ledger.used.items() if c}


@contextmanager
def running_cluster(tmp_path: Path, config: str | None = None,
                    sim: SimSettings | None = None, **settings: Any) -> Iterator[Cluster]:
    fake = FakeCluster.start(tmp_path, sim or SimSettings(),
                             bookmark_interval=0.2)
    workloads = WorkloadControllers(fake.server.store).start()
    # As in `voda serve`: Voda's cluster view (its ServiceAccount's watches) feeds the pod
    # scheduler, which sends its own requests as its own ServiceAccount.
    view = ClusterView()
    feeding = watch_cluster(fake.api(), view, 30)
    for informer in feeding:
        informer.start()
    scheduler = PodScheduler(fake.api("pod-scheduler"), view, PodSchedulerSettings(
        config_map=CONFIG_MAP, retry_seconds=1.0, watch_seconds=30, **settings))
    cluster = Cluster(fake, workloads, view, scheduler)
    if config is not None:
        cluster.set_config(config)
    try:
        assert all(i.synced.wait(10) for i in feeding)
        scheduler.start()
        assert scheduler.wait_synced(10)
        yield cluster
    finally:
        scheduler.stop()
        for informer in feeding:
            informer.stop()
        workloads.stop()
        fake.stop()
    assert not fake.sim.errors, fake.sim.errors
    assert not workloads.errors, workloads.errors
    assert not fake.sim.ledger.violations, fake.sim.ledger.violations


def not_ready_tolerations(seconds: int | None) -> list[Obj]:
    """NoExecute tolerations of not-ready and unreachable nodes (as the DefaultTolerationSeconds
    admission plugin adds them, with its 300 s); None: tolerated for good."""
    return [{"key": key, "operator": "Exists", "effect": "NoExecute",
             **({"tolerationSeconds": seconds} if seconds is not None else {})}
            for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]


def config_text(**spec: Any) -> str:
    return yaml.safe_dump({"apiVersion": "voda.io/v1alpha1", "kind": "SchedulerConfig",
                           "spec": spec})
