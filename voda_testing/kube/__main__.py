"""A fake cluster in its own process, for benchmarks and manual runs:

    python -m voda_testing.kube --nodes 1000 --gpus 8 --kubeconfig /tmp/kc.yaml

serves the fake API server with the simulated controllers and N nodes, writes a
kubeconfig, and answers GET /_fake/log?since=T with the changes to pods and
Kubeflow jobs committed after T (time.monotonic(), comparable across processes
on one machine): when each worker pod appeared gated, was pinned, and when each
job object changed size or plan.
"""

from __future__ import annotations

import argparse
import contextlib
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

    server = serve_operators(FakeApiServer(store, bookmark_interval=5.0, port=args.port,
                                           extra_routes=[("GET", "/_fake/log", read_log)])
                             ).start()
    sim = ClusterSimulator(store, SimSettings(tick_seconds=0.02, start_seconds=0.05,
                                              terminate_seconds=0.05,
                                              configmap_seconds=args.configmap_seconds))
    for i in range(args.nodes):
        sim.add_node(f"node-{i:04d}", args.gpus, labels={
            "voda.io/leaf": f"leaf-{i // LEAF_SIZE}", "voda.io/spine": f"spine-{i // 256}"})
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
