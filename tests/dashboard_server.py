"""What the dashboard's browser tests share: a `voda serve --backend emulated` with a
small cluster of two GPU types, jobs submitted through the API, and a login through the
dashboard's form."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import TOKENS, TOKENS_ENV, ServeProcess, free_port

CLUSTER = """
nodes:
  - {name: a, count: 2, gpus: 4, leaf: rack-a, spine: spine-1}
  - {name: b, count: 2, gpus: 4, leaf: rack-b, spine: spine-1}
  - {name: c, count: 2, gpus: 8, gpu_type: a100, leaf: rack-c, spine: spine-2}
"""
# A team queue with a guarantee and no jobs: the Queues page shows it beside `default`,
# which borrows its idle guarantee (every decision is the one without queues).
QUEUES = """
queues:
  - {name: research, guarantee: {a100: 8}, borrowing_limit: {default: 4}, weight: 2}
"""
VIEWER, VIEWER_TOKEN = "vera", "tok-vera-2c8e4a6f1d"  # a read-only viewer's token


def dashboard_server(folder: Path, port: int | None = None) -> ServeProcess:
    """A server (not started) on `folder`'s SQLite store: started again with the same
    folder and port, it is the same service after a restart."""
    (folder / "cluster.yaml").write_text(CLUSTER)
    (folder / "queues.yaml").write_text(QUEUES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
    env["VODA_CONFIG"] = str(folder / "no-config.toml")
    env["VODA_TOKENS"] = f"{TOKENS_ENV},{VIEWER}:{VIEWER_TOKEN}:viewer"
    env["VODA_HISTORY_SAMPLE_SECONDS"] = "1"  # the History page has points within seconds
    port = port or free_port()
    return ServeProcess(
        url=f"http://127.0.0.1:{port}", port=port,
        args=["--db", f"sqlite:///{folder / 'voda.db'}", "--cluster", str(folder / "cluster.yaml"),
              "--queues", str(folder / "queues.yaml"), "--time-scale", "30", "--rate-limit", "0.2",
              "--step-interval", "0.2"],
        env=env, log_path=folder / "serve.log", tokens={**TOKENS, VIEWER: VIEWER_TOKEN})


@contextmanager
def running_dashboard(folder: Path) -> Iterator[ServeProcess]:
    """A dashboard server on `folder`, started, and stopped at the end."""
    process = dashboard_server(folder)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def submit(server: ServeProcess, user: str, name: str, **fields: object) -> str:
    body = {"name": name, "command": "python train.py", "min": 1, "max": 2, "epochs": 1000,
            **fields}
    with server.client(user) as client:
        answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()["uid"]  # the pages' key: links, data-job, the cluster map


def job(server: ServeProcess, user: str, name: str) -> dict:
    with server.client(user) as client:
        return client.get(f"/v1/jobs/{name}").json()


def login(page, server: ServeProcess, user: str, path: str = "/ui/cluster",
          token: str | None = None) -> None:
    page.goto(f"{server.url}{path}")
    assert "/ui/login" in page.url
    page.fill("input[name=token]", token or TOKENS[user])
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(re.escape(path.split("?")[0])))
    assert page.inner_text("#user-name").startswith(user)


def form_token(page) -> str:
    """The form token of the logged-in page (its log-out form carries one)."""
    return page.get_attribute("input[name=form_token]", "value")


def cookies(page) -> dict[str, str]:
    return {c["name"]: c["value"] for c in page.context.cookies()}


def mark_no_reload(page) -> None:
    page.evaluate("window.__still_here = true")


def not_reloaded(page) -> bool:
    return page.evaluate("window.__still_here === true")
