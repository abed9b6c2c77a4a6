"""One `voda serve --backend kubernetes` process on a FakeCluster, as one pod of Voda's
Deployment would run (its own ServiceAccount's kubeconfig, Voda's namespace `voda`, the
leader's address written into Service voda's Endpoints)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from voda_testing.kube.harness import FakeCluster
from voda_testing.serve import free_port

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "tok-root-5b7e9d1c3a"


class Replica:
    def __init__(self, folder: Path, fake: FakeCluster, name: str, namespace: str = "",
                 extra_config: str = "") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = folder / f"{name}.toml"
        config.write_text(
            "[kubernetes]\nlease_seconds = 3.0\nrenew_deadline_seconds = 2.0\n"
            'retry_seconds = 0.5\nvoda_namespace = "voda"\nleader_service = "voda"\n'
            f"{extra_config}"
            f'[pod_scheduler]\nkubeconfig = "{fake.kubeconfig_of("pod-scheduler")}"\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
        env.update(VODA_CONFIG=str(config), POD_IP="127.0.0.1", POD_NAME=name,
                   VODA_TOKENS=f"root:{ADMIN_TOKEN}:admin")
        self.log = folder / f"{name}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "voda.cli.main", "serve", "--backend", "kubernetes",
             "--kubeconfig", str(fake.kubeconfig), "--namespace", namespace or fake.namespace,
             "--db", f"sqlite:///{folder / 'voda.db'}", "--port", str(self.port)],
            cwd=ROOT, env=env, stdout=self.log.open("wb"), stderr=subprocess.STDOUT)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    def get(self, path: str) -> httpx.Response | None:
        try:
            return httpx.get(self.url + path, timeout=2.0)
        except httpx.HTTPError:
            return None

    def status(self, path: str) -> int:
        response = self.get(path)
        return 0 if response is None else response.status_code

    def leading(self) -> bool:
        return self.status("/v1/jobs") in (200, 401)

    def standing_by(self) -> bool:
        return "is a standby until" in self.log.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
