"""On Kubernetes a job's namespace names its team queue (docs/design/013-queues.md):
`voda serve --backend kubernetes` on the fake API server and the cluster simulator, real
HTTP on loopback. A queue named as the namespace takes its jobs; a queue whose `match`
has the namespace comes first; a queue named in the job, or its user's, comes before
either."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from voda_testing.kube.cluster import WORK_ANNOTATION
from voda_testing.kube.harness import FakeCluster, eventually

ROOT = Path(__file__).resolve().parent.parent
NS = "ml"
QUEUES = """
queues:
  - name: ml
    guarantee: {default: 2}
"""
CONFIG = """
[users.alice]
queue = "vision"
[[queues]]
name = "vision"
guarantee = {default = 1}
"""


def document(name: str, queue: str | None = None) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / "pytorchjob.yaml").read_text())
    doc["metadata"]["name"] = name
    annotations = doc["metadata"].setdefault("annotations", {})
    annotations.update({WORK_ANNOTATION: "3600", "voda.io/min-workers": "1",
                        "voda.io/max-workers": "1", "voda.io/gpu-type": "default"})
    annotations.pop("voda.io/category", None)
    if queue is not None:
        annotations["voda.io/queue"] = queue
    doc["spec"]["elasticPolicy"].update(minReplicas=1, maxReplicas=1)
    return doc


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeCluster]:
    with FakeCluster.running(tmp_path, nodes=1, rbac=False) as cluster:
        cluster.server.store.create("namespaces", "", {"metadata": {"name": NS}})
        yield cluster


@pytest.fixture
def service(tmp_path: Path, fake: FakeCluster) -> Iterator[str]:
    from conftest import TOKENS_ENV, free_port

    port = free_port()
    (tmp_path / "queues.yaml").write_text(QUEUES)
    config = tmp_path / "config.toml"
    config.write_text('[kubernetes]\nlease_seconds = 3.0\nrenew_deadline_seconds = 2.0\n'
                      'retry_seconds = 0.5\nvoda_namespace = "voda"\n[pod_scheduler]\n'
                      f'kubeconfig = "{fake.kubeconfig_of("pod-scheduler")}"\n' + CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
    env.update(VODA_CONFIG=str(config), VODA_TOKENS=TOKENS_ENV)
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "voda.cli.main", "serve", "--backend", "kubernetes",
         "--kubeconfig", str(fake.kubeconfig), "--namespace", NS, "--queues",
         str(tmp_path / "queues.yaml"), "--db", f"sqlite:///{tmp_path / 'voda.db'}",
         "--port", str(port), "--rate-limit", "0.3", "--step-interval", "0.2"],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            health = httpx.get(f"{url}/healthz", timeout=1.0)
            return health.status_code == 200 and health.json().get("role") != "standby"
        except httpx.HTTPError:
            return proc.poll() is not None

    eventually(up, timeout=60)
    assert proc.poll() is None, log.read_text()[-3000:]
    yield url
    proc.kill()
    proc.wait(10)


def test_a_job_s_namespace_names_its_queue_unless_it_or_its_user_names_one(
        service: str) -> None:
    from conftest import TOKENS

    def client(user: str) -> httpx.Client:
        return httpx.Client(base_url=service, timeout=30,
                            headers={"Authorization": f"Bearer {TOKENS[user]}"})

    def submit(who: httpx.Client, doc: dict[str, Any]) -> httpx.Response:
        return who.post("/v1/jobs", content=yaml.safe_dump(doc),
                        headers={"Content-Type": "application/yaml"})

    with client("bob") as bob, client("alice") as alice, client("root") as root:
        by_namespace = submit(bob, document("by-namespace"))
        assert by_namespace.status_code == 201, by_namespace.text
        assert by_namespace.json()["team_queue"] == "ml"  # the queue named as the namespace
        assert submit(alice, document("by-user")).json()["team_queue"] == "vision"
        named = submit(bob, document("named", queue="vision"))
        assert named.json()["team_queue"] == "vision"
        unknown = submit(bob, document("unknown", queue="nlp"))
        assert unknown.status_code == 422
        assert unknown.json()["errors"][0]["field"] == "metadata.annotations.voda.io/queue"
        matched = root.put("/v1/queues/research", json={"guarantee": {"default": 1},
                                                        "match": {"namespace": NS}})
        assert matched.status_code == 201, matched.text
        assert submit(bob, document("by-match")).json()["team_queue"] == "research"
        ml = root.get("/v1/queues/ml").json()
        used = {u["gpu_type"]: u for u in ml["usage"]}["default"]
        assert used["guarantee"] == 2
        eventually(lambda: root.get("/v1/jobs/by-namespace").json()["status"] == "Running",
                   timeout=60)
