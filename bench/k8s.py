"""The Kubernetes backend against the fake API server: `voda serve` with 5,000 nodes and
100,000 pods in its cache, then 1,000 nodes and 2,000 jobs.

The fake cluster (API server and simulated controllers) runs in its own process; the
engine and the backend run here, as `voda serve` would. Times come from the fake
server's log of committed changes (time.monotonic(), one clock for both processes).

Figures:
- scale: a real `voda serve --backend kubernetes` process against a fake cluster of
  --scale-nodes nodes and --scale-pods running pods of other tenants (as kube-apiserver
  serves them, managedFields included): its peak resident memory (VmHWM from
  /proc, target under 1 GiB), the time from its start to the first decision (a job
  submitted once it serves; its object committed by the API server), and a relist
  after 410 Gone (the fake server forgets its watch history and ends every watch:
  from then until Voda's pod informer watches again, having listed every pod in
  pages; target under 10 s), split into the fake server's share (compacting, then for
  each page from its request to its last byte sent, as the server times them:
  /_fake/requests) and Voda's (the rest), with what Voda's pods informer logged of
  the list (waiting for pages, fetching them, decoding, digesting, delivering);
- decision -> every patch sent: from the moment the engine hands a decision's actions
  to the backend until the API server has committed the last object write it needs
  (create, or size and plan); per decision (its slowest action) and per action;
- gated -> pinned: from a worker pod appearing gated to the patch that pins and
  ungates it;
- leader failover: two `voda serve --backend kubernetes` with client-go's timings
  (lease 15 s, renew deadline 10 s, retry 2 s); the leader is killed (SIGKILL) or
  stopped (SIGTERM); time until the standby holds the lease and until it serves.

    python bench/k8s.py [--scale-nodes 5000] [--scale-pods 100000] [--nodes 1000]
                        [--jobs 2000] [--rounds 10] [--failovers 3] [--quick]

--quick: 500 nodes and 10,000 pods for the scale figures, 200 nodes and 200 jobs for
the decisions, one failover of each kind (a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from voda.backends.kubernetes.api import KubeApi  # noqa: E402
from voda.backends.kubernetes.backend import KubernetesBackend  # noqa: E402
from voda.backends.kubernetes.pinning import encode  # noqa: E402
from voda.backends.kubernetes.settings import KubernetesSettings  # noqa: E402
from voda.core.model import Job, JobPlacement  # noqa: E402
from voda.engine.scheduler import Scheduler, SchedulerSettings  # noqa: E402

WORK = "sim.voda.io/work-seconds"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeClusterProcess:
    def __init__(self, folder: Path, nodes: int, gpus: int, pods: int = 0) -> None:
        self.kubeconfig = folder / "kubeconfig"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "voda_testing.kube", "--nodes", str(nodes), "--gpus",
             str(gpus), "--kubeconfig", str(self.kubeconfig), "--pods", str(pods)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("ready "):
            raise RuntimeError(f"the fake cluster did not start: {line!r}")
        self.url = line.split()[1]

        self.entries: list[dict[str, Any]] = []

    def log(self, since: float = 0.0) -> list[dict[str, Any]]:
        """Committed changes after `since`; fetched incrementally, so polling costs the
        fake server only what is new."""
        last = self.entries[-1]["t"] if self.entries else 0.0
        with urllib.request.urlopen(f"{self.url}/_fake/log?since={last}", timeout=120) as r:
            self.entries.extend(json.loads(r.read()))
        start = bisect.bisect_right([e["t"] for e in self.entries], since) if since else 0
        return self.entries[start:]

    def requests(self, since: float) -> list[dict[str, Any]]:
        """The list and watch requests the fake server received after `since`."""
        with urllib.request.urlopen(f"{self.url}/_fake/requests?since={since}",
                                    timeout=120) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]

    def compact(self) -> int:
        """Forget the watch history and end every watch: each watcher gets 410 Gone.
        Returns how many watches were ended."""
        request = urllib.request.Request(f"{self.url}/_fake/compact", data=b"",
                                         method="POST")
        with urllib.request.urlopen(request, timeout=120) as r:
            return int(json.loads(r.read())["closed"])

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def documents() -> dict[str, dict[str, Any]]:
    out = {}
    for kind in ("mpijob", "pytorchjob"):
        doc = yaml.safe_load((ROOT / "examples" / f"{kind}.yaml").read_text())
        doc["metadata"]["annotations"][WORK] = "1e9"  # they run for the whole benchmark
        out[kind] = doc
    return out


class Recording:
    """The backend, with the moment each action was handed over and what it asked for."""

    def __init__(self, backend: KubernetesBackend) -> None:
        self.backend = backend
        self.actions: list[dict[str, Any]] = []

    def _note(self, kind: str, job: Job, began: float) -> None:
        plan = self.backend.plan(job.name)
        self.actions.append({"kind": kind, "job": job.name, "t": began,
                             "replicas": len(plan), "plan": encode(plan)})

    def start(self, job: Job, placement: JobPlacement) -> None:
        began = time.monotonic()
        self.backend.start(job, placement)
        self._note("start", job, began)

    def scale(self, job: Job, placement: JobPlacement) -> None:
        began = time.monotonic()
        self.backend.scale(job, placement)
        self._note("scale", job, began)

    def halt(self, job: Job) -> None:
        self.backend.halt(job)

    def delete(self, job: str) -> None:
        self.backend.delete(job)

    def nodes(self) -> list[Any]:
        return self.backend.nodes()

    def events(self) -> list[Any]:
        return self.backend.events()

    def running(self) -> dict[str, JobPlacement]:
        return self.backend.running()


def committed(actions: list[dict[str, Any]], log: list[dict[str, Any]]) -> dict[int, float]:
    """For each action (by position), when the server committed the write it needed."""
    by_job: dict[str, list[dict[str, Any]]] = {}
    for entry in log:
        if entry["kind"] in ("mpijobs", "pytorchjobs"):
            by_job.setdefault(entry["name"], []).append(entry)
    done = {}
    for i, action in enumerate(actions):
        for entry in by_job.get(action["job"], ()):
            if entry["t"] >= action["t"] and entry["replicas"] == action["replicas"] and (
                    entry["plan"] == action["plan"]):
                done[i] = entry["t"]
                break
    return done


def pin_latencies(log: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """From each worker pod appearing gated to its pin; and, of that, the time its node
    still had no room (until the last pod that held GPUs there was gone)."""
    appeared: dict[str, float] = {}
    freed: dict[str, float] = {}  # node -> when a pod bound there last went away
    out, waited = [], []
    for entry in log:
        if entry["kind"] != "pods":
            continue
        uid = entry["uid"]
        if entry["type"] == "DELETED":
            if entry.get("node"):
                freed[entry["node"]] = entry["t"]
            continue
        if entry["gated"]:
            appeared.setdefault(uid, entry["t"])
        elif uid in appeared:
            began = appeared.pop(uid)
            out.append(entry["t"] - began)
            waited.append(max(0.0, freed.get(entry.get("pinned") or "", 0.0) - began))
    return out, waited


def running_workers(log: list[dict[str, Any]]) -> int:
    state: dict[str, bool] = {}
    for entry in log:
        if entry["kind"] == "pods":
            state[entry["uid"]] = entry["type"] != "DELETED" and entry["phase"] == "Running"
    return sum(state.values())


def caught_up(api: KubeApi, backend: KubernetesBackend) -> bool:
    """Whether the backend's watches have seen every change the server has committed (a
    burst of tens of thousands of pod events takes the Python client a while)."""
    current = int(api.request("GET", "/api/v1/namespaces/kube-system/pods")["metadata"][
        "resourceVersion"])
    return all(int(i.resource_version or 0) >= current - 5 for i in backend.informers
               if i.kind.plural == "pods")


def wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise TimeoutError(what)


def bench_decisions(nodes: int, gpus: int, jobs: int, rounds: int, per_round: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="voda-bench-k8s-"))
    cluster = FakeClusterProcess(folder, nodes, gpus)
    try:
        api = KubeApi.connect(str(cluster.kubeconfig), timeout=60)
        backend = KubernetesBackend(api, KubernetesSettings(namespace="default",
                                                            watch_seconds=600),
                                    resync_seconds=60)
        began = time.monotonic()
        backend.watch(timeout=300)
        recording = Recording(backend)
        recording.running()
        scheduler = Scheduler(recording, SchedulerSettings(algorithm="ElasticFIFO",  # type: ignore[arg-type]
                                                           rate_limit_seconds=0))
        print(f"fake cluster: {nodes} nodes x {gpus} GPUs; backend watching in "
              f"{time.monotonic() - began:.1f} s")
        docs = documents()
        max_workers = max(1, nodes * gpus // jobs)

        def submit(index: int, priority: int = 1) -> None:
            name = f"job-{index:05d}"
            backend.specs[name] = docs["mpijob" if index % 2 else "pytorchjob"]
            scheduler.submit(Job(name=name, min_workers=1, max_workers=max_workers,
                                 priority=priority, submit_time=float(index)))

        for i in range(jobs):
            submit(i)
        began = time.monotonic()
        scheduler.step(time.time(), force=True)
        decided = time.monotonic() - began
        total = sum(a["replicas"] for a in recording.actions)
        wait(lambda: len(committed(recording.actions, cluster.log())) == len(
            recording.actions), 1800, "the first decision's objects")
        created = time.monotonic() - began
        wait(lambda: running_workers(cluster.log()) >= total, 3600, "every worker running")
        running = time.monotonic() - began
        wait(lambda: caught_up(api, backend), 1800, "the backend's watches")
        print(f"first decision: {jobs} jobs started ({total} workers), decided in "
              f"{decided:.2f} s; objects created in {created:.1f} s; all workers running "
              f"after {running:.1f} s; the backend's watches caught up after "
              f"{time.monotonic() - began:.1f} s")
        first_log = list(cluster.log())
        rounds_began = time.monotonic()
        per_decision, per_action = [], []
        next_index = jobs
        for round_ in range(rounds):
            recording.actions.clear()
            for _ in range(per_round):
                submit(next_index, priority=0)
                next_index += 1
            since = time.monotonic()
            scheduler.step(time.time(), force=True)
            actions = list(recording.actions)
            wait(lambda a=actions, t=since: len(committed(a, cluster.log(t))) == len(a), 600,
                 f"round {round_}")
            done = committed(actions, cluster.log(since))
            lags = [done[i] - a["t"] for i, a in enumerate(actions)]
            per_action += lags
            per_decision.append(max(lags))
            print(f"decision {round_ + 1}: {len(actions)} actions, every patch sent "
                  f"{max(lags) * 1000:.0f} ms after the decision")
            time.sleep(2.0)  # let moved workers settle before the next decision
            wait(lambda: caught_up(api, backend), 600, "the backend's watches")
        median = statistics.median(per_decision) * 1000
        print(f"decision -> every patch sent: median {median:.0f}"
              f" ms per decision ({rounds} decisions), median "
              f"{statistics.median(per_action) * 1000:.0f} ms per action ({len(per_action)})"
              f" [target {DECISION_TARGET_MS} ms per decision: "
              f"{'met' if median < DECISION_TARGET_MS else 'MISSED'}]")
        for label, log in (("the first decision's workers", first_log),
                           ("later decisions' workers", cluster.log(rounds_began))):
            pins, waited = pin_latencies(log)
            quantiles = statistics.quantiles(pins, n=20)
            own = statistics.median([p - w for p, w in zip(pins, waited, strict=True)]) * 1000
            print(f"gated -> pinned and ungated, {label}: median "
                  f"{statistics.median(pins) * 1000:.0f} ms, p95 {quantiles[-1] * 1000:.0f} ms "
                  f"over {len(pins)} worker pods (of which waiting for their node to free "
                  f"GPUs: median {statistics.median(waited) * 1000:.0f} ms; the rest, median "
                  f"{own:.0f} ms [target {PIN_TARGET_MS} ms: "
                  f"{'met' if own < PIN_TARGET_MS else 'MISSED'}])")
        print(f"backend counters: {dict(sorted(backend.stats.items()))}")
        backend.close()
    finally:
        cluster.stop()


MEMORY_TARGET_MIB = 1024
RELIST_TARGET_SECONDS = 10.0
DECISION_TARGET_MS = 1000  # every patch of a decision sent within a second
PIN_TARGET_MS = 1000  # a gated worker pinned within a second once its node has room


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the peak resident set, kept by the kernel) of a process."""
    out = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def serve_process(folder: Path, kubeconfig: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
    env["VODA_CONFIG"] = str(folder / "none.toml")
    return subprocess.Popen(
        [sys.executable, "-m", "voda.cli.main", "serve", "--backend", "kubernetes",
         "--kubeconfig", str(kubeconfig), "--db", f"sqlite:///{folder / 'voda.db'}",
         "--port", str(port), "--rate-limit", "1", "--step-interval", "0.5"],
        cwd=ROOT, env=env, stdout=(folder / f"serve-{port}.log").open("wb"),
        stderr=subprocess.STDOUT)


def submit_job(port: int, doc: dict[str, Any], token_file: Path) -> None:
    """As the administrator, with the token `voda serve` generated beside its database."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/jobs", data=yaml.safe_dump(doc).encode(),
        headers={"Content-Type": "application/yaml",
                 "Authorization": f"Bearer {token_file.read_text().strip()}"}, method="POST")
    urllib.request.urlopen(request, timeout=120).read()


def relisted(requests: list[dict[str, Any]]) -> float | None:
    """When the pods informer watched again after listing every pod (None: not yet)."""
    pods = [r for r in requests if r["path"] == "/api/v1/pods"]
    lists = [r for r in pods if r["verb"] == "list"]
    if not lists:
        return None
    after = [r["t"] for r in pods if r["verb"] == "watch" and r["t"] > lists[-1]["t"]]
    return min(after) if after else None


RELIST_LINE = re.compile(
    r"pods informer \(status\.phase[^)]*\): listed (\d+) \((\d+) new or changed, (\d+) "
    r"gone\) in (\d+) pages in ([\d.]+) s: ([\d.]+) s waiting for pages \(fetched in "
    r"([\d.]+) s, request to last byte, and their heads decoded in ([\d.]+) s, a page "
    r"ahead\), ([\d.]+) s digesting, ([\d.]+) s delivering")


def informer_relist(log_text: str) -> dict[str, float] | None:
    """What the cluster-wide pods informer logged of its last list (see Informer._relist)."""
    found = RELIST_LINE.findall(log_text)
    if not found:
        return None
    keys = ("objects", "changed", "gone", "pages", "seconds", "waited", "fetch", "decode",
            "digest", "deliver")
    return {k: float(v) for k, v in zip(keys, found[-1], strict=True)}


def relist_shares(requests: list[dict[str, Any]], cut: float, compacted: float,
                  done: float) -> dict[str, float]:
    """The relist's time split between the fake API server and Voda. The server's share:
    compacting and ending the watches (from `cut` until its answer, `compacted`), then for
    each page from receiving its request to handing its last byte to the socket. Voda's:
    the rest, until the watch is asked for (noticing the ended watches and the 410, then
    for each page the time the server was not at work on it: reading, decoding and
    digesting pages and asking for the next)."""
    pages = [r for r in requests if r["path"] == "/api/v1/pods" and r["verb"] == "list"]
    built = [r.get("built", 0.0) for r in pages]
    sent = [r.get("sent", 0.0) for r in pages]
    total = done - cut
    server = compacted - cut + sum(sent)
    return {"total": total, "server": server, "voda": total - server,
            "compacting": compacted - cut, "built": sum(built),
            "first_page": built[0] if built else 0.0, "sending": sum(sent) - sum(built),
            "bytes": sum(r.get("bytes", 0.0) for r in pages),
            "noticed": (pages[0]["t"] - compacted) if pages else 0.0}


def bench_scale(nodes: int, gpus: int, pods: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="voda-bench-scale-"))
    began = time.monotonic()
    cluster = FakeClusterProcess(folder, nodes, gpus, pods)
    print(f"scale: fake cluster of {nodes} nodes x {gpus} GPUs and {pods} running pods of "
          f"other tenants, up in {time.monotonic() - began:.0f} s")
    port = free_port()
    process: subprocess.Popen[bytes] | None = None
    try:
        started = time.monotonic()
        process = serve_process(folder, cluster.kubeconfig, port)
        wait(lambda: up(port) or process.poll() is not None, 1200, "voda serve")
        if process.poll() is not None:
            raise RuntimeError(f"voda serve ended: {(folder / f'serve-{port}.log').read_text()}")
        serving = time.monotonic() - started
        submit_job(port, documents()["mpijob"], folder / "token")
        wait(lambda: any(e["kind"] in ("mpijobs", "pytorchjobs")
                         for e in cluster.log(started)), 600, "the first decision")
        first = min(e["t"] for e in cluster.log(started)
                    if e["kind"] in ("mpijobs", "pytorchjobs")) - started
        at_start = memory_kib(process.pid)
        cut = time.monotonic()
        closed = cluster.compact()
        compacted = time.monotonic()
        wait(lambda: relisted(cluster.requests(cut)) is not None, 600, "the relist")
        requests = cluster.requests(cut)
        relist = (relisted(requests) or cut) - cut
        shares = relist_shares(requests, cut, compacted, relisted(requests) or cut)
        pages = sum(1 for r in requests if r["path"] == "/api/v1/pods" and r["verb"] == "list")
        time.sleep(2.0)  # the other informers relist too
        informer = informer_relist((folder / f"serve-{port}.log").read_text())
        memory = memory_kib(process.pid)
        peak_mib = memory["VmHWM"] / 1024
        print(f"scale: voda serve serving after {serving:.1f} s; start -> first decision "
              f"(job object committed) {first:.1f} s")
        print(f"scale: relist after 410 Gone: {relist:.2f} s ({pages} pages of pods, "
              f"{shares['bytes'] / 1e6:.0f} MB; {closed} watches ended) "
              f"[target {RELIST_TARGET_SECONDS:.0f} s: "
              f"{'met' if relist < RELIST_TARGET_SECONDS else 'MISSED'}]")
        print(f"scale:   the fake API server's share {shares['server']:.2f} s (compacting and "
              f"ending the watches {shares['compacting']:.2f} s; from each page's request to "
              f"its last byte sent: building the pages {shares['built']:.2f} s, the first "
              f"page's snapshot of every pod included {shares['first_page']:.2f} s, sending "
              f"{shares['sending']:.2f} s)")
        print(f"scale:   Voda's share {shares['voda']:.2f} s (the rest: the ended watches and "
              f"the 410 noticed, first page asked for {shares['noticed']:.2f} s after the "
              f"watches ended; then, for each page, what the server did not overlap: reading, "
              f"decoding and digesting it and asking for the next)")
        if informer is not None:
            print(f"scale:   Voda's pods informer: listed {informer['objects']:.0f} pods "
                  f"({informer['changed']:.0f} new or changed, {informer['gone']:.0f} gone) in "
                  f"{informer['seconds']:.2f} s: waited {informer['waited']:.2f} s for pages "
                  f"(fetched a page ahead in {informer['fetch']:.2f} s, request to last byte, "
                  f"the server's share included; their heads decoded in "
                  f"{informer['decode']:.2f} s), digested them in {informer['digest']:.2f} s, "
                  f"delivered the changes in {informer['deliver']:.2f} s")
        print(f"scale: voda serve resident memory {at_start['VmRSS'] / 1024:.0f} MiB after "
              f"the first decision, {memory['VmRSS'] / 1024:.0f} MiB after the relist, peak "
              f"{peak_mib:.0f} MiB [target {MEMORY_TARGET_MIB} MiB: "
              f"{'met' if peak_mib < MEMORY_TARGET_MIB else 'MISSED'}]")
    finally:
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        cluster.stop()


def bench_failover(runs: int) -> None:
    results: dict[str, list[tuple[float, float]]] = {"SIGKILL": [], "SIGTERM": []}
    for sig in (signal.SIGKILL, signal.SIGTERM):
        for _ in range(runs):
            results[sig.name].append(failover_once(sig))
    for name, values in results.items():
        leases = [v[0] for v in values]
        serving = [v[1] for v in values]
        print(f"leader failover ({name}, lease 15 s / renew 10 s / retry 2 s, {runs} runs): "
              f"standby holds the lease after median {statistics.median(leases):.2f} s "
              f"(max {max(leases):.2f}), serves after median {statistics.median(serving):.2f} s")


def failover_once(sig: signal.Signals) -> tuple[float, float]:
    folder = Path(tempfile.mkdtemp(prefix="voda-bench-failover-"))
    cluster = FakeClusterProcess(folder, 16, 8)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
        env["VODA_CONFIG"] = str(folder / "none.toml")
        ports = [free_port(), free_port()]
        for port in ports:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "voda.cli.main", "serve", "--backend", "kubernetes",
                 "--kubeconfig", str(cluster.kubeconfig), "--db",
                 f"sqlite:///{folder / 'voda.db'}", "--port", str(port),
                 "--rate-limit", "1", "--step-interval", "0.5"],
                cwd=ROOT, env=env, stdout=(folder / f"{port}.log").open("wb"),
                stderr=subprocess.STDOUT))
            if port == ports[0]:
                wait(lambda p=port: up(p), 120, "the leader")
        wait(lambda: "is a standby until" in (folder / f"{ports[1]}.log").read_text(), 120,
             "the standby")
        docs = documents()
        for i in range(4):
            submit_job(ports[0], docs["mpijob" if i % 2 else "pytorchjob"], folder / "token")
        wait(lambda: running_workers(cluster.log()) >= 8, 120, "jobs running")
        time.sleep(4.0)  # the standby has watched the leader renew
        leader = [e for e in cluster.log() if e["kind"] == "leases"][-1]["holder"]
        processes[0].send_signal(sig)
        stopped = time.monotonic()
        wait(lambda: up(ports[1]), 120, "the standby serving")
        serving = time.monotonic() - stopped
        taken = min(e["t"] for e in cluster.log(stopped) if e["kind"] == "leases"
                    and e["holder"] not in ("", leader))
        return taken - stopped, serving
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)
        cluster.stop()


def up(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
            return r.status == 200 and b'"standby"' not in r.read()  # a standby answers too
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale-nodes", type=int, default=5000)
    parser.add_argument("--scale-pods", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--failovers", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.scale_nodes, args.scale_pods = 500, 10_000
        args.nodes, args.jobs, args.rounds, args.failovers = 200, 200, 3, 1
    if args.scale_pods or args.scale_nodes:
        bench_scale(args.scale_nodes, args.gpus, args.scale_pods)
    if args.rounds:
        bench_decisions(args.nodes, args.gpus, args.jobs, args.rounds, args.per_round)
    if args.failovers:
        bench_failover(args.failovers)


if __name__ == "__main__":
    main()
