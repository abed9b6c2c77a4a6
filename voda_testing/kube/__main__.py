"""A fake cluster in its own process, for benchmarks and manual runs:

    python -m voda_testing.kube --nodes 1000 --gpus 8 --kubeconfig /tmp/kc.yaml

serves the fake API server with the simulated controllers and N nodes (and, with
--pods, that many running pods of other tenants, as a real API server returns them,
managedFields included), writes a kubeconfig, and answers GET /_fake/log?since=T with
the changes to pods and Kubeflow jobs committed after T (time.monotonic(), comparable
across processes on one machine): when each worker pod appeared gated, was pinned,
and when each job object changed size or plan. POST /_fake/compact forgets the watch
history and ends every watch (each client gets 410 Gone and lists again); GET
/_fake/requests?since=T lists the list and watch requests received after T (a list's
with the seconds the server took to build its body and to send it, and its bytes).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from voda_testing.kube.cluster import ClusterSimulator, SimSettings
from voda_testing.kube.cluster.kubeflow_rules import serve_operators
from voda_testing.kube.resources import CRD_SETS, default_resources
from voda_testing.kube.server import FakeApiServer
from voda_testing.kube.store import Change, Store

LEAF_SIZE = 16
TENANT_NAMESPACES = 50


def tenant_pod(index: int, node: str, when: str) -> dict[str, Any]:
    """A pod of another tenant's Deployment, running, as kube-apiserver serves it."""
    app = f"svc-{index // 20}"
    name = f"{app}-7d9f8b6c4-{index:06d}"
    manager = {"manager": "kube-controller-manager", "operation": "Update",
               "apiVersion": "v1", "time": when, "fieldsType": "FieldsV1",
               "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {
                   ".": {}, "f:app": {}, "f:pod-template-hash": {}},
                   "f:ownerReferences": {".": {}, "k:{\"uid\":\"rs\"}": {}}},
                   "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {
                       ".": {}, "f:image": {}, "f:name": {}, "f:ports": {}, "f:resources": {
                           ".": {}, "f:limits": {}, "f:requests": {}}}}}}}
    return {
        "metadata": {
            "name": name, "generateName": f"{app}-7d9f8b6c4-",
            "labels": {"app": app, "pod-template-hash": "7d9f8b6c4"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": f"{app}-7d9f8b6c4", "uid": f"rs-{index // 20}",
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [manager, {**manager, "manager": "kubelet",
                                        "subresource": "status"}]},
        "spec": {
            "nodeName": node, "serviceAccountName": "default",
            "containers": [{
                "name": "app", "image": f"registry.example.com/team/{app}:1.4.2",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "LOG_LEVEL", "value": "info"},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {
                            "apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                "resources": {"requests": {"cpu": "250m", "memory": "512Mi"},
                              "limits": {"cpu": "1", "memory": "1Gi"}},
                "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420,
                                                                 "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt",
                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "dnsPolicy": "ClusterFirst", "terminationGracePeriodSeconds": 30,
            "securityContext": {}, "priority": 0, "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority"},
        "status": {
            "phase": "Running", "podIP": f"10.{index // 65536 % 256}.{index // 256 % 256}."
                                         f"{index % 256}", "hostIP": "10.0.0.1",
            "qosClass": "Burstable", "startTime": when,
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": when}
                           for t in ("Initialized", "Ready", "ContainersReady",
                                     "PodScheduled")],
            "containerStatuses": [{
                "name": "app", "ready": True, "started": True, "restartCount": 0,
                "image": f"registry.example.com/team/{app}:1.4.2",
                "imageID": "registry.example.com/team/app@sha256:" + "0" * 64,
                "containerID": f"containerd://{index:064x}",
                "state": {"running": {"startedAt": when}}}]},
    }


def summary(change: Change) -> dict[str, Any] | None:
    obj = change.object
    meta = obj["metadata"]
    entry: dict[str, Any] = {"t": time.monotonic(), "kind": change.resource.plural,
                             "type": change.type, "name": meta["name"],
                             "uid": meta.get("uid")}
    if change.resource.plural == "pods":
        labels = meta.get("labels") or {}
        if "voda.io/job" not in labels:
            return None
        spec = obj.get("spec") or {}
        entry.update(gated=bool(spec.get("schedulingGates")), node=spec.get("nodeName"),
                     pinned=(spec.get("nodeSelector") or {}).get("kubernetes.io/hostname"),
                     phase=(obj.get("status") or {}).get("phase"),
                     job=labels["voda.io/job"])
    elif change.resource.plural in ("mpijobs", "pytorchjobs", "leases"):
        spec = obj.get("spec") or {}
        specs = spec.get("mpiReplicaSpecs") or spec.get("pytorchReplicaSpecs") or {}
        entry.update(replicas=(specs.get("Worker") or {}).get("replicas"),
                     plan=(meta.get("annotations") or {}).get("voda.io/plan"),
                     holder=spec.get("holderIdentity"))
    else:
        return None
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--history", type=int, default=2_000_000)
    parser.add_argument("--crds", choices=CRD_SETS, default="all",
                        help="the Kubeflow CRDs installed (default: both operators')")
    parser.add_argument("--configmap-seconds", type=float, default=0.2,
                        help="how long a ConfigMap change takes to reach the pods mounting "
                             "it (a real kubelet: tens of seconds)")
    parser.add_argument("--pods", type=int, default=0,
                        help="running pods of other tenants, spread over the nodes")
    args = parser.parse_args()
    store = Store(default_resources(args.crds), history_limit=args.history)
    log: list[dict[str, Any]] = []
    lock = threading.Lock()

    def record(change: Change) -> None:
        entry = summary(change)
        if entry is not None:
            with lock:
                log.append(entry)

    store.listeners.append(record)

    async def read_log(request: web.Request) -> web.Response:
        since = float(request.query.get("since", "0"))
        with lock:
            out = [e for e in log if e["t"] > since]
        return web.Response(text=json.dumps(out), content_type="application/json")

    async def compact(request: web.Request) -> web.Response:
        """Every watcher misses a change to each kind and then finds it forgotten: the
        watches go silent, a node and a pod change, the history is compacted, and the
        watches end (each client resumes from before the change: 410 Gone)."""
        server.stall_watches_now()
        touched = {"metadata": {"annotations": {"sim.voda.io/touched": str(time.time())}}}
        for kind in ("nodes", "pods"):
            for obj in itertools.islice(store.objects[kind].values(), 1):
                meta = obj["metadata"]
                store.patch(kind, meta.get("namespace", ""), meta["name"], touched,
                            "application/merge-patch+json")
        store.compact()
        return web.json_response({"closed": server.close_watches_now()})

    async def requests(request: web.Request) -> web.Response:
        since = float(request.query.get("since", "0"))
        out = [{"t": r.time, "verb": r.verb, "resource": r.resource, "path": r.path,
                "query": r.query, **r.timing} for r in list(server.requests)
               if r.time > since and r.verb in ("list", "watch")]
        return web.json_response(out)

    server = serve_operators(FakeApiServer(store, bookmark_interval=5.0, port=args.port,
                                           extra_routes=[("GET", "/_fake/log", read_log),
                                                         ("POST", "/_fake/compact", compact),
                                                         ("GET", "/_fake/requests", requests)])
                             ).start()
    sim = ClusterSimulator(store, SimSettings(tick_seconds=0.02, start_seconds=0.05,
                                              terminate_seconds=0.05,
                                              configmap_seconds=args.configmap_seconds))
    for i in range(args.nodes):
        sim.add_node(f"node-{i:04d}", args.gpus, labels={
            "voda.io/leaf": f"leaf-{i // LEAF_SIZE}", "voda.io/spine": f"spine-{i // 256}"})
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for ns in range(TENANT_NAMESPACES if args.pods else 0):
        store.create("namespaces", "", {"metadata": {"name": f"tenant-{ns:02d}"}})
    for i in range(args.pods):
        store.create("pods", f"tenant-{i % TENANT_NAMESPACES:02d}",
                     tenant_pod(i, f"node-{i % max(1, args.nodes):04d}", when))
    sim.start()
    server.write_kubeconfig(args.kubeconfig)
    print(f"ready {server.url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    sim.stop()
    server.stop()


if __name__ == "__main__":
    main()
