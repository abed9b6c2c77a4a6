"""A fake cluster with Voda's Kubernetes backend on it, for flow tests and benchmarks."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voda.backends.kubernetes.api import KubeApi
from voda.backends.kubernetes.backend import KubernetesBackend
from voda.backends.kubernetes.settings import KubernetesSettings
from voda_testing.kube.cluster import ClusterSimulator, SimSettings
from voda_testing.kube.server import FakeApiServer

# 300 s of tolerationSeconds are 0.3 s, 10 s of CrashLoopBackOff 0.1 s
FAST_SIM = SimSettings(tick_seconds=0.01, start_seconds=0.02, terminate_seconds=0.02,
                       image_pull_seconds=0.01, toleration_seconds_scale=0.001,
                       restart_backoff_scale=0.01)


def eventually(check: Callable[[], Any], timeout: float = 20.0, every: float = 0.02) -> Any:
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
    kubeconfig: Path
    namespace: str = "default"
    backends: list[KubernetesBackend] = field(default_factory=list)

    @classmethod
    def start(cls, folder: Path, sim_settings: SimSettings = FAST_SIM,
              bookmark_interval: float = 0.5) -> FakeCluster:
        server = FakeApiServer(bookmark_interval=bookmark_interval).start()
        kubeconfig = server.write_kubeconfig(folder / "kubeconfig")
        sim = ClusterSimulator(server.store, sim_settings).start()
        return cls(server, sim, kubeconfig)

    def api(self, **kwargs: Any) -> KubeApi:
        return KubeApi.connect(str(self.kubeconfig), **kwargs)

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
