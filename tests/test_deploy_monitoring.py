"""deploy/grafana and deploy/prometheus: every query parses and names only metrics that a
live `voda serve` exports; the alerting rules pass `promtool check rules` and fire on
made-up series as they should (`promtool test rules`)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import promql_parser
import pytest
import yaml
from polling import wait_for
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT, ServeFactory

DASHBOARD = ROOT / "deploy" / "grafana" / "voda-dashboard.json"
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
# Grafana's variables, replaced by what Grafana would put there.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "6h", "$gpu_type": ".*"}


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):  # label_values(METRIC, LABEL): the metric is a selector
            queries.append(query["query"].removeprefix("label_values(").split(",")[0])
    out = []
    for q in queries:
        for name, value in GRAFANA_VARIABLES.items():
            q = q.replace(name, value)
        out.append(q)
    return out


def rule_queries() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (parsed, not pattern-matched)."""
    names: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            names.add(node.name)
            return
        for attribute in ("expr", "lhs", "rhs", "vector_selector", "param"):
            child = getattr(node, attribute, None)
            if child is not None:
                walk(child)
        for child in getattr(node, "args", None) or ():
            walk(child)

    walk(promql_parser.parse(expr))
    return names


def live_metric_names(serve: ServeFactory, tmp_path: Path) -> set[str]:
    server = serve(f"sqlite:///{tmp_path / 'm.db'}", "--cluster", "2x4,1x8:a100",
                   "--time-scale", "120", "--rate-limit", "0.1", "--step-interval", "0.2")
    with server.client() as client:
        for name, gpu_type in (("a", "default"), ("b", "default"), ("c", "a100")):
            body = {"name": name, "command": "x", "min": 1, "max": 4, "epochs": 2,
                    "gpu_type": gpu_type}
            assert client.post("/v1/jobs", json=body).status_code == 201
        wait_for(lambda: client.get("/v1/jobs", params={"status": "Completed"}).json()["total"]
                 == 3, timeout=60)
        text = client.get("/metrics").text
    names = set()
    for family in text_string_to_metric_families(text):
        names.update(sample.name for sample in family.samples)
    return names


def test_every_dashboard_and_rule_query_names_only_exported_metrics(
        serve: ServeFactory, tmp_path: Path) -> None:
    names = live_metric_names(serve, tmp_path)
    queries = dashboard_queries() + rule_queries()
    assert len(queries) >= 20
    unknown = {q: metric_names(q) - names for q in queries}
    assert {q: n for q, n in unknown.items() if n} == {}
    # What the issue asks the dashboard to show, by the metrics that carry it.
    used = set().union(*(metric_names(q) for q in dashboard_queries()))
    for metric in ("voda_jobs_waiting", "voda_gpus_in_use", "voda_job_actions_total",
                   "voda_workers_migrated_total", "voda_reschedule_duration_seconds_bucket",
                   "voda_http_request_duration_seconds_bucket", "voda_store_up",
                   "voda_store_unwritten_batches", "voda_store_write_failures",
                   "voda_scheduling_refused"):
        assert metric in used


def test_a_misspelt_metric_would_be_caught() -> None:
    assert metric_names('sum by (le) (rate(voda_nope_bucket{a="b"}[5m])) / on() voda_x') == {
        "voda_nope_bucket", "voda_x"}
    with pytest.raises(ValueError):
        promql_parser.parse("sum by (le (voda_x")


def test_alerting_rules_pass_promtool() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is installed by `make test` (Debian package prometheus)"
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 7 rules found" in done.stdout
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert {"VodaSchedulerStuck", "VodaStoreWritesFailing", "VodaStoreRejectingRows",
            "VodaGPUsIdleWhileJobsWait"} <= alerts


# Alerts evaluated by `promtool test rules` on made-up series (one sample a minute):
# the loop stops stepping at minute 3, the store goes down at minute 2, jobs that fit wait
# beside free a100 GPUs (the v100 GPUs are all in use: no alert there), steps keep failing
# (one a minute; another service's single failure is no alert), one row is refused for
# good at minute 4 and one completion is dropped then; decisions take 1-5 s each.
RULE_TESTS = {
    "evaluation_interval": "1m",
    "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": 'voda_scheduler_last_step_timestamp_seconds{job="voda"}',
             "values": "0+60x3 180x30"},
            {"series": 'voda_scheduler_step_failures_total{job="voda"}', "values": "0+1x30"},
            {"series": 'voda_scheduler_step_failures_total{job="once"}', "values": "0 1x30"},
            {"series": 'voda_store_up{job="voda"}', "values": "1 1 0x30"},
            {"series": 'voda_store_rejected_rows{job="voda"}', "values": "0x3 1x30"},
            {"series": 'voda_scheduler_events_failed_total{job="voda",kind="job-completed"}',
             "values": "0x3 1x30"},
            {"series": 'voda_scheduler_events_failed_total{job="voda",kind="epoch-reported"}',
             "values": "0x30"},
            {"series": 'voda_jobs_waiting_fitting{job="voda",gpu_type="a100"}',
             "values": "2x30"},
            {"series": 'voda_gpus{job="voda",gpu_type="a100"}', "values": "8x30"},
            {"series": 'voda_gpus_in_use{job="voda",gpu_type="a100"}', "values": "4x30"},
            {"series": 'voda_jobs_waiting_fitting{job="voda",gpu_type="v100"}',
             "values": "3x30"},
            {"series": 'voda_gpus{job="voda",gpu_type="v100"}', "values": "8x30"},
            {"series": 'voda_gpus_in_use{job="voda",gpu_type="v100"}', "values": "8x30"},
            # Ten decisions a minute, every one between 1 and 5 s.
            {"series": 'voda_reschedule_duration_seconds_bucket{job="voda",le="1.0"}',
             "values": "0x30"},
            {"series": 'voda_reschedule_duration_seconds_bucket{job="voda",le="5.0"}',
             "values": "0+10x30"},
            {"series": 'voda_reschedule_duration_seconds_bucket{job="voda",le="+Inf"}',
             "values": "0+10x30"},
        ],
        "alert_rule_test": [
            # Stuck: 120 s without a step from minute 5, for 2 minutes more.
            {"eval_time": "6m", "alertname": "VodaSchedulerStuck", "exp_alerts": []},
            {"eval_time": "8m", "alertname": "VodaSchedulerStuck",
             "exp_alerts": [{"exp_labels": {"severity": "critical", "job": "voda"}}]},
            {"eval_time": "1m", "alertname": "VodaStoreWritesFailing", "exp_alerts": []},
            {"eval_time": "4m", "alertname": "VodaStoreWritesFailing",
             "exp_alerts": [{"exp_labels": {"severity": "critical", "job": "voda"}}]},
            {"eval_time": "7m", "alertname": "VodaSchedulerStepsFailing",
             "exp_alerts": [{"exp_labels": {"severity": "warning", "job": "voda"}}]},
            {"eval_time": "3m", "alertname": "VodaStoreRejectingRows", "exp_alerts": []},
            {"eval_time": "5m", "alertname": "VodaStoreRejectingRows",
             "exp_alerts": [{"exp_labels": {"severity": "warning", "job": "voda"}}]},
            {"eval_time": "3m", "alertname": "VodaEventsDropped", "exp_alerts": []},
            {"eval_time": "5m", "alertname": "VodaEventsDropped",
             "exp_alerts": [{"exp_labels": {"severity": "warning", "job": "voda",
                                            "kind": "job-completed"}}]},
            {"eval_time": "20m", "alertname": "VodaEventsDropped", "exp_alerts": []},
            {"eval_time": "9m", "alertname": "VodaGPUsIdleWhileJobsWait", "exp_alerts": []},
            {"eval_time": "11m", "alertname": "VodaGPUsIdleWhileJobsWait",
             "exp_alerts": [{"exp_labels": {"severity": "warning", "job": "voda",
                                            "gpu_type": "a100"}}]},
            {"eval_time": "5m", "alertname": "VodaSlowDecisions", "exp_alerts": []},
            {"eval_time": "20m", "alertname": "VodaSlowDecisions",
             "exp_alerts": [{"exp_labels": {"severity": "warning"}}]},
        ],
    }],
}


def test_alerts_fire_when_they_should(tmp_path: Path) -> None:
    """The rules' expressions, `for` and labels, evaluated by Prometheus's own engine
    (the annotations are left out of this copy: their text is not under test)."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"],
                                                         **RULE_TESTS}))
    done = subprocess.run([shutil.which("promtool") or "promtool", "test", "rules",
                           "tests.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_dashboard_is_grafana_json() -> None:
    board = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and board["uid"] == "voda-overview"
    for p in board["panels"]:
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"]


def test_http_answers_are_timed_by_route_template(serve: ServeFactory, tmp_path: Path) -> None:
    server = serve(f"sqlite:///{tmp_path / 'h.db'}")
    with server.client() as client:
        client.get("/v1/jobs/no-such-job")
        text = client.get("/metrics").text
    assert ('voda_http_request_duration_seconds_count{method="GET",route="/v1/jobs/{name}",'
            'status="4xx"} 1.0') in text
    assert "no-such-job" not in text
    assert httpx.get(f"{server.url}/healthz").status_code == 200
