"""`voda serve` as a real subprocess on loopback, for the tests and the benchmarks."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServeProcess:
    url: str
    port: int
    args: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen | None = None
    started_in: float = 0.0
    tokens: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    token_file: Path | None = None
    verify: ssl.SSLContext | bool = True  # trusts the CA of a server with --tls-cert
    cwd: Path = ROOT

    def start(self, timeout: float = 60.0) -> ServeProcess:
        began = time.monotonic()
        log = self.log_path.open("ab")
        env = dict(self.env)
        if "VODA_TOKEN_FILE" not in env:  # the report-token key beside the log, not in ~
            env.setdefault("VODA_REPORT_KEY_FILE", str(self.log_path.parent / "report-key"))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "voda.cli.main", "serve", *self._backend_args(), *self.args,
             "--host", self.host, "--port", str(self.port)],
            cwd=self.cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        while time.monotonic() - began < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"voda serve exited: {self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0,
                             verify=self.verify).status_code == 200:
                    self.started_in = time.monotonic() - began
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"voda serve did not answer: {self.log_path.read_text()[-3000:]}")

    def _backend_args(self) -> list[str]:
        """These servers run the emulated backend unless a test names another."""
        return [] if "--backend" in self.args else ["--backend", "emulated"]

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def admin_token(self) -> str:
        """The administrator's token: root's, or the one `voda serve` generated."""
        if "root" in self.tokens:
            return self.tokens["root"]
        assert self.token_file is not None
        return self.token_file.read_text().strip()

    def dashboard_cookies(self, user: str | None = None) -> httpx.Cookies:
        """The cookie of a dashboard login (a session) with `user`'s token (default: an
        administrator's)."""
        return dashboard_login(self.url, self.tokens[user] if user else self.admin_token,
                               self.verify)

    def client(self, user: str | None = None, anonymous: bool = False) -> httpx.Client:
        """A client with `user`'s token (default: an administrator's); `anonymous`: none."""
        token = None if anonymous else self.tokens[user] if user else self.admin_token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0,
                            verify=self.verify)


def dashboard_login(url: str, token: str, verify: ssl.SSLContext | bool = True) -> httpx.Cookies:
    """Log in to the dashboard at `url` as a browser does; the session's cookie."""
    answer = httpx.post(f"{url}/ui/login", data={"token": token}, headers={"Origin": url},
                        verify=verify, timeout=30.0)
    assert answer.status_code == 303, answer.text
    return answer.cookies
