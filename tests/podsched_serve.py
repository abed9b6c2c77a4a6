"""`voda serve --backend kubernetes` (and so the pod scheduler beside it) against the fake
API server, its cluster simulator and workload controllers: what
tests/test_podsched_serve.py and tests/test_prometheus_live.py share."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.conftest import free_port
from voda_testing.kube import FakeApiServer
from voda_testing.kube.cluster import ClusterSimulator, SimSettings
from voda_testing.kube.cluster.workloads import WorkloadControllers
from voda_testing.kube.harness import eventually

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "voda"


@contextmanager
def fake_kubernetes(tmp_path: Path) -> Iterator[tuple[FakeApiServer, ClusterSimulator, Path]]:
    """The fake API server (a kubeconfig for it), the simulator and the controllers."""
    api = FakeApiServer(bookmark_interval=0.2).start()
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.store.create("namespaces", "", {"metadata": {"name": NAMESPACE}})
    sim = ClusterSimulator(api.store, SimSettings()).start()
    workloads = WorkloadControllers(api.store).start()
    try:
        yield api, sim, kubeconfig
    finally:
        workloads.stop()
        sim.stop()
        api.stop()
    assert not sim.ledger.violations and not workloads.errors


def serve_kubernetes(tmp_path: Path, kubeconfig: Path,
                     table: str) -> tuple[subprocess.Popen, str, Path]:
    """`voda serve --backend kubernetes` with config.toml's `table` added; (the process,
    its URL, its log)."""
    config = tmp_path / "config.toml"
    config.write_text("[kubernetes]\nlease_seconds = 3.0\nrenew_deadline_seconds = 2.0\n"
                      "retry_seconds = 0.5\n" + table)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
    env["VODA_CONFIG"] = str(config)
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "voda.cli.main", "serve", "--backend", "kubernetes",
         "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE,
         "--db", f"sqlite:///{tmp_path / 'voda.db'}", "--port", str(port)],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}", log


@contextmanager
def serving_pods(tmp_path: Path, sim: ClusterSimulator, kubeconfig: Path) -> Iterator[str]:
    """Eight 8-GPU nodes in two leaves (one spine), `voda serve --backend kubernetes` with
    the pod scheduler, its SchedulerConfig created; yields the service's URL."""
    for leaf in range(2):
        for k in range(4):
            sim.add_node(f"l{leaf}-n{k}", 8, {"voda.io/leaf": f"l{leaf}", "voda.io/spine": "s"})
    proc, url, log = serve_kubernetes(tmp_path, kubeconfig,
                                      "[pod_scheduler]\nretry_seconds = 1.0\n")
    try:
        eventually(lambda: up(url) or proc.poll() is not None, timeout=60)
        assert proc.poll() is None, log.read_text()[-3000:]
        kubectl(kubeconfig, "-n", NAMESPACE, "create", "-f",
                str(ROOT / "examples" / "pod-scheduler-config.yaml"))
        yield url
    finally:
        proc.terminate()
        proc.wait(20)


def kubectl(kubeconfig: Path, *args: str) -> str:
    kubectl_bin = shutil.which("kubectl")
    assert kubectl_bin, "kubectl is needed (it is on the image)"
    result = subprocess.run([kubectl_bin, "--kubeconfig", str(kubeconfig), *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def up(url: str) -> bool:
    """The service answers and leads (not a standby replica)."""
    try:
        health = httpx.get(f"{url}/healthz", timeout=1.0)
        return health.status_code == 200 and health.json().get("role") != "standby"
    except httpx.HTTPError:
        return False
