"""A fake cluster with Voda's Kubernetes backend on it, for flow tests and benchmarks.

RBAC is on by default: the server holds deploy/'s roles, and each component connects
with its own ServiceAccount's token (`kubeconfig`: Voda's, `kubeconfig_of("pod-scheduler")`:
the pod scheduler's); tests observe and arrange through `admin_kubeconfig`. Any request
the roles do not grant is answered 403, and `stop()` fails the test that caused one."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voda.backends.kubernetes.api import KubeApi
from voda.backends.kubernetes.backend import KubernetesBackend
from voda.backends.kubernetes.settings import KubernetesSettings
from voda_testing.kube.cluster import ClusterSimulator, SimSettings
from voda_testing.kube.cluster.kubeflow_rules import serve_operators
from voda_testing.kube.deployed import VODA_NAMESPACE, install_rbac
from voda_testing.kube.resources import default_resources
from voda_testing.kube.server import FakeApiServer
from voda_testing.kube.store import Store

# 300 s of tolerationSeconds are 0.3 s, 10 s of CrashLoopBackOff 0.1 s
FAST_SIM = SimSettings(tick_seconds=0.01, start_seconds=0.02, terminate_seconds=0.02,
                       image_pull_seconds=0.01, toleration_seconds_scale=0.001,
                       restart_backoff_scale=0.01)


def eventually(check: Callable[[], Any], timeout: float = 60.0, every: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(every)
    raise AssertionError("condition not met in time")


@dataclass
class FakeCluster:
    """The fake API server, the simulated controllers and a connected KubeApi."""

    server: FakeApiServer
    sim: ClusterSimulator
    kubeconfig: Path  # Voda's ServiceAccount (all of the server when RBAC is off)
    namespace: str = "default"  # the jobs'
    voda_namespace: str = VODA_NAMESPACE  # Voda's own: its leader Lease
    backends: list[KubernetesBackend] = field(default_factory=list)
    kubeconfigs: dict[str, Path] = field(default_factory=dict)
    allow_denied: bool = False  # a test that provokes 403s on purpose sets it

    @classmethod
    def start(cls, folder: Path, sim_settings: SimSettings = FAST_SIM,
              bookmark_interval: float = 0.5, crds: str = "all", rbac: bool = True,
              tls: bool = False) -> FakeCluster:
        """`crds`: the Kubeflow CRDs installed (voda_testing.kube.resources.CRD_SETS);
        `rbac`: enforced, with deploy/'s roles and each component's own token; `tls`:
        HTTPS, which kubectl needs before it sends a token."""
        server = serve_operators(FakeApiServer(Store(default_resources(crds)),
                                               bookmark_interval=bookmark_interval,
                                               tls=tls)).start()
        namespace = "default"
        kubeconfigs: dict[str, Path] = {}
        if rbac:
            for who, token in install_rbac(server, namespace).items():
                kubeconfigs[who] = server.write_kubeconfig(folder / f"kubeconfig-{who}",
                                                           token=token)
        else:
            server.store.create("namespaces", "", {"metadata": {"name": VODA_NAMESPACE}})
            plain = server.write_kubeconfig(folder / "kubeconfig")
            kubeconfigs = {who: plain for who in ("admin", "voda", "pod-scheduler")}
        sim = ClusterSimulator(server.store, sim_settings).start()
        return cls(server, sim, kubeconfigs["voda"], namespace, kubeconfigs=kubeconfigs)

    @classmethod
    @contextlib.contextmanager
    def running(cls, folder: Path, nodes: int = 1, gpus: int = 4, **start: Any
                ) -> Iterator[FakeCluster]:
        """A started cluster with `nodes` empty nodes n0, n1, ... of `gpus` GPUs each,
        stopped on leaving (`start`: FakeCluster.start's other arguments)."""
        cluster = cls.start(folder, **start)
        try:
            for i in range(nodes):
                cluster.sim.add_node(f"n{i}", gpus)
            yield cluster
        finally:
            cluster.stop()

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfigs["admin"]

    def kubeconfig_of(self, who: str) -> Path:
        return self.kubeconfigs[who]

    def api(self, who: str = "voda", **kwargs: Any) -> KubeApi:
        return KubeApi.connect(str(self.kubeconfigs[who]), **kwargs)

    def backend(self, settings: KubernetesSettings | None = None, fence: Any = None,
                resync_seconds: float = 1.0) -> KubernetesBackend:
        settings = settings or KubernetesSettings(namespace=self.namespace,
                                                  unschedulable_seconds=2.0)
        backend = KubernetesBackend(self.api(fence=fence, backoff=0.05, max_backoff=0.5),
                                    settings, resync_seconds=resync_seconds)
        backend.watch()
        for informer in backend.informers:
            informer.backoff, informer.max_backoff = 0.05, 0.5
        self.backends.append(backend)
        return backend

    def stop(self) -> None:
        for backend in self.backends:
            backend.close()
        self.sim.stop()
        self.server.stop()
        if not self.allow_denied:
            assert not self.server.denied, f"requests RBAC refused: {list(self.server.denied)}"
