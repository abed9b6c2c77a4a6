"""A real Prometheus (Debian's `prometheus`, installed with promtool by `make test`)
scrapes a running `voda serve` every second, as deploy/monitoring's ServiceMonitor would
(job `voda`, a `namespace` label, no credentials: /metrics is open), and evaluates
deploy/prometheus/rules.yaml. Through its HTTP API: every query of the Grafana dashboard,
with the dashboard's variables set to what Grafana would put there, answers at least one
series; each variable's label_values lists this Voda; every rule loads and evaluates
without error, and a healthy Voda fires no alert."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from monitoring_files import RULES, dashboard_queries, rules, substitute, variable_queries
from polling import wait_for

from tests.conftest import ServeFactory
from tests.podsched_serve import ROOT, fake_kubernetes, kubectl, serving_pods
from voda_testing.serve import free_port

pytestmark = pytest.mark.slow

# Two network domains of default GPUs and one of a100: the topology panels have domains.
CLUSTER = """nodes:
  - {count: 2, gpus: 4, leaf: leaf-0, spine: spine-0}
  - {count: 2, gpus: 4, leaf: leaf-1, spine: spine-0}
  - {count: 1, gpus: 8, gpu_type: a100, leaf: leaf-2, spine: spine-0}
"""
# Long jobs that keep running through the test; together they want more default GPUs
# than there are (some run below their max, with a reason), and d spans nodes.
POD_METRICS = "voda_pod_"  # the pod scheduler's (voda.podsched.metrics)
JOBS = [("a", "default", 1, 8), ("b", "default", 2, 8), ("c", "a100", 1, 4),
        ("d", "default", 4, 16)]


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def get(self, path: str, **params: Any) -> Any:
        """An API answer's data; an API error fails the test with Prometheus's message."""
        answer = httpx.get(f"{self.url}{path}", params=params, timeout=10.0).json()
        assert answer["status"] == "success", (path, params, answer)
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return data["result"]

    def answers_every(self, queries: list[str], what: str) -> None:
        """Wait until each of `queries` answers at least one series; fail naming those
        that do not."""
        empty: list[str] = []

        def every_query_answers() -> bool:
            empty[:] = [q for q in queries if not self.query(q)]
            return not empty

        try:
            wait_for(every_query_answers, timeout=90)
        except AssertionError:
            pytest.fail(f"these {what} queries answer no series: {empty}")

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited: {self.log_path.read_text()[-3000:]}")
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Any]:
    """Start Debian's prometheus on a free loopback port, scraping `target` as job voda
    and loading the rules; it is killed at teardown."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is installed by `make test` (Debian package prometheus)"
    started: list[Prometheus] = []

    def start(target: str) -> Prometheus:
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{
                "job_name": "voda",
                "metrics_path": "/metrics",
                # What the Prometheus Operator adds to a ServiceMonitor's targets.
                "static_configs": [{"targets": [target], "labels": {"namespace": "voda"}}],
            }],
        }
        config_file = tmp_path / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        port = free_port()
        log_path = tmp_path / "prometheus.log"
        proc = subprocess.Popen(
            [binary, f"--config.file={config_file}",
             f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            cwd=tmp_path, stdout=log_path.open("ab"), stderr=subprocess.STDOUT)
        prometheus = Prometheus(f"http://127.0.0.1:{port}", proc, log_path)
        started.append(prometheus)
        wait_for(prometheus.ready, timeout=60)
        return prometheus

    yield start
    for prometheus in started:
        if prometheus.proc.poll() is None:
            prometheus.proc.kill()
            prometheus.proc.wait(10)


def test_a_real_prometheus_scrapes_voda_and_answers_every_dashboard_query(
        serve: ServeFactory, start_prometheus: Any, tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    # Tokens configured, as deployed: Prometheus scrapes without any.
    server = serve(f"sqlite:///{tmp_path / 'p.db'}", "--cluster", str(cluster),
                   "--time-scale", "1", "--rate-limit", "0.1", "--step-interval", "0.2",
                   tokens=True)
    with server.client("root") as client:
        for name, gpu_type, least, most in JOBS:
            body = {"name": name, "command": "x", "gpu_type": gpu_type, "min": least,
                    "max": most, "epochs": 100_000}
            assert client.post("/v1/jobs", json=body).status_code == 201
        wait_for(lambda: client.get("/v1/jobs", params={"status": "Running"}).json()["total"]
                 == len(JOBS), timeout=60)
    instance = f"127.0.0.1:{server.port}"
    prometheus = start_prometheus(instance)

    def target_up() -> bool:
        targets = prometheus.get("/api/v1/targets")["activeTargets"]
        return [(t["labels"]["job"], t["labels"]["instance"], t["health"])
                for t in targets] == [("voda", instance, "up")]

    wait_for(target_up, timeout=60)
    assert [s["value"][1] for s in prometheus.query('up{job="voda"}')] == ["1"]

    # What Grafana puts in the queries with this Voda chosen (a multi-value variable is a
    # regex alternation) and a 15 s rate interval (four scrapes of 1 s and then some).
    variables = {"$__rate_interval": "15s", "$__range": "5m", "$namespace": "voda",
                 "$instance": instance, "$gpu_type": "(a100|default)"}
    # The pod scheduler's panels need `voda serve --backend kubernetes`: the next test.
    queries = [q for q in dashboard_queries(variables) if POD_METRICS not in q]
    assert len(queries) >= 40
    prometheus.answers_every(queries, "dashboard")

    # Each variable lists this Voda, as Grafana's label_values asks Prometheus for it.
    listed = {name: set(prometheus.get(f"/api/v1/label/{label}/values",
                                       **{"match[]": substitute(selector, variables)}))
              for name, (selector, label) in variable_queries().items()}
    assert listed == {"namespace": {"voda"}, "instance": {instance},
                      "gpu_type": {"a100", "default"}}

    # Every rule of rules.yaml is loaded and evaluates without error.
    alerts = {rule["alert"] for rule in rules()}

    def loaded() -> list[dict[str, Any]]:
        return [r for g in prometheus.get("/api/v1/rules")["groups"] for r in g["rules"]]

    def every_rule_evaluated_and_voda_seen_up() -> bool:
        states = {r["name"]: (r["health"], r.get("state")) for r in loaded()}
        return (all(health != "unknown" for health, _ in states.values())
                and states.get("VodaDown") == ("ok", "inactive")
                and states.get("VodaMetricsAbsent") == ("ok", "inactive"))

    wait_for(every_rule_evaluated_and_voda_seen_up, timeout=60)
    evaluated = loaded()
    assert {r["name"] for r in evaluated} == alerts
    assert {r["name"]: (r["health"], r.get("lastError", "")) for r in evaluated} == {
        name: ("ok", "") for name in alerts}
    # A healthy Voda: nothing fires (an alert with a long `for` may be pending at most).
    assert [r["name"] for r in evaluated if r["state"] == "firing"] == []


def test_a_real_prometheus_answers_the_pod_scheduler_panels(start_prometheus: Any,
                                                            tmp_path: Path) -> None:
    """`voda serve --backend kubernetes` runs the pod scheduler beside the service (the
    fake API server, its simulated nodes in two leaves); a gang of pods it places; every
    query of the dashboard's pod scheduler panels answers series."""
    with fake_kubernetes(tmp_path) as (api, sim, kubeconfig), \
            serving_pods(tmp_path, sim, kubeconfig) as url:
        kubectl(kubeconfig, "-n", "default", "create", "-f",
                str(ROOT / "examples" / "batch-gang.yaml"))

        def bound() -> int:
            pods, _ = api.store.list("pods", "default")
            return sum(1 for p in pods if p["spec"].get("nodeName"))

        wait_for(lambda: bound() >= 4, timeout=60)
        instance = url.removeprefix("http://")
        prometheus = start_prometheus(instance)
        variables = {"$__rate_interval": "15s", "$__range": "5m", "$namespace": "voda",
                     "$instance": instance, "$gpu_type": ".*"}
        queries = [q for q in dashboard_queries(variables) if POD_METRICS in q]
        assert len(queries) >= 7
        prometheus.answers_every(queries, "pod scheduler")
        allocated = prometheus.query(f'voda_pod_gpu_allocation_ratio{{instance="{instance}"}}')
        assert float(allocated[0]["value"][1]) > 0
