"""deploy/grafana and deploy/prometheus: every query parses and names only metrics that a
live `voda serve` exports, and every metric it exports is on the dashboard; every panel
follows the namespace and instance variables; the alerting rules pass `promtool check
rules`, fire on made-up series as they should (`promtool test rules`) and each has a
section of docs/runbook.md. A real Prometheus scraping a running `voda serve` is
tests/test_prometheus_live.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import httpx
import promql_parser
import pytest
import yaml
from monitoring_files import (
    RULES,
    RUNBOOK,
    dashboard,
    dashboard_queries,
    metric_names,
    panel_queries,
    rule_queries,
    rules,
    selectors,
    substitute,
    variable_queries,
)
from polling import wait_for
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT, ServeFactory
from voda.podsched.metrics import ClusterFigures, PodSchedulerMetrics

RUNBOOK_URL = "https://github.com/voda-scheduler/voda/blob/main/docs/runbook.md#"
# What Prometheus itself records of each scrape (VodaDown and VodaMetricsAbsent read `up`).
SCRAPE_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                 "scrape_samples_post_metric_relabeling", "scrape_series_added"}


def live_metric_families(serve: ServeFactory, tmp_path: Path) -> dict[str, set[str]]:
    """The metric families a live `voda serve` exports after a few jobs ran: family ->
    its sample names (without the `_created` timestamps). Job d cannot reach its max
    beside a and b, so the reasons of jobs below their max are exported too."""
    queues = tmp_path / "queues.yaml"  # a team queue, so its series are exported too
    queues.write_text("queues:\n  - name: team-a\n    guarantee: {default: 4}\n")
    server = serve(f"sqlite:///{tmp_path / 'm.db'}", "--cluster", "2x4,1x8:a100",
                   "--time-scale", "120", "--rate-limit", "0.1", "--step-interval", "0.2",
                   "--queues", str(queues))
    with server.client() as client:
        for name, gpu_type, most in (("a", "default", 4), ("b", "default", 4),
                                     ("c", "a100", 4), ("d", "default", 8)):
            body = {"name": name, "command": "x", "min": 1, "max": most, "epochs": 2,
                    "gpu_type": gpu_type}
            assert client.post("/v1/jobs", json=body).status_code == 201
        wait_for(lambda: client.get("/v1/jobs", params={"status": "Completed"}).json()["total"]
                 == 4, timeout=60)
        text = client.get("/metrics").text
    return metric_families(text)


def metric_families(text: str) -> dict[str, set[str]]:
    """Prometheus text -> family -> its sample names (without the `_created` times)."""
    families = {family.name: {s.name for s in family.samples}
                for family in text_string_to_metric_families(text)}
    # A counter's or histogram's creation time comes as a family of its own, NAME_created.
    return {name: samples for name, samples in families.items()
            if name.removesuffix("_created") not in families.keys() - {name}}


def pod_scheduler_families() -> dict[str, set[str]]:
    """The pod scheduler's families as its code exports them (beside `voda serve` only on
    the kubernetes backend: tests/test_prometheus_live.py scrapes one), after a decision."""
    metrics = PodSchedulerMetrics()
    metrics.decisions.labels(result="bound").inc()
    metrics.watch_cluster(lambda: ClusterFigures(0.5, 0.25, {"l0": 0.5}, {"s0": 0.5}))
    return metric_families(generate_latest(metrics.registry).decode())


def test_every_dashboard_and_rule_query_names_only_exported_metrics(
        serve: ServeFactory, tmp_path: Path) -> None:
    families = {**live_metric_families(serve, tmp_path), **pod_scheduler_families()}
    # Besides Voda's own, the series Prometheus adds to every scraped target.
    names = set().union(*families.values(), SCRAPE_SERIES)
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
                   "voda_scheduling_refused", "voda_domain_utilization_ratio",
                   "voda_jobs_spanning_nodes", "voda_jobs_waiting_by_reason",
                   "voda_pod_placement_decisions_total", "voda_pod_gpu_allocation_ratio",
                   "voda_pod_placement_duration_seconds_bucket"):
        assert metric in used
    # And the other way round: every family `voda serve` exports is on the dashboard.
    assert {family for family, samples in families.items() if not samples & used} == set()


def test_every_panel_follows_the_namespace_and_instance_variables() -> None:
    """Every selector of every panel (and of the gpu_type and instance variables) takes
    the namespace and the instance chosen at the top of the dashboard."""
    board = dashboard()
    assert [v["name"] for v in board["templating"]["list"]] == [
        "datasource", "namespace", "instance", "gpu_type"]
    variables = variable_queries()
    assert {name: label for name, (_, label) in variables.items()} == {
        "namespace": "namespace", "instance": "instance", "gpu_type": "gpu_type"}
    namespace = ("namespace", "MatchOp.Re", "$namespace")
    instance = ("instance", "MatchOp.Re", "$instance")
    wanted = {q: {namespace, instance} for q in panel_queries()}
    wanted[variables["gpu_type"][0]] = {namespace, instance}
    wanted[variables["instance"][0]] = {namespace}
    unscoped = {}
    for query, matchers in wanted.items():
        # Only Grafana's interval variables would not parse; the others are strings here.
        expr = substitute(query, {"$__rate_interval": "5m", "$__range": "6h"})
        for selector in selectors(expr):
            if not matchers <= {(m.name, str(m.op), m.value) for m in selector.matchers.matchers}:
                unscoped[query] = selector.name
    assert unscoped == {}
    assert variables["instance"][0] == 'voda_store_up{namespace=~"$namespace"}'


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
    assert "SUCCESS: 9 rules found" in done.stdout
    alerts = {r["alert"] for r in rules()}
    assert {"VodaDown", "VodaMetricsAbsent", "VodaSchedulerStuck", "VodaStoreWritesFailing",
            "VodaStoreRejectingRows", "VodaGPUsIdleWhileJobsWait"} <= alerts


def test_every_alert_has_a_runbook_section() -> None:
    """Each alert's runbook_url is its section of docs/runbook.md (GitHub's anchor of the
    heading `## ALERT`); the runbook has a section for every alert and none for an alert
    that is gone, each saying what it means, how to check and what to do."""
    text = RUNBOOK.read_text()
    sections = dict(re.findall(r"^## (Voda\w+)\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    alerts = [r for r in rules() if "alert" in r]
    assert set(sections) == {r["alert"] for r in alerts}
    for rule in alerts:
        name = rule["alert"]
        assert rule["annotations"]["runbook_url"] == RUNBOOK_URL + name.lower(), name
        assert rule["annotations"]["summary"], name
        body = sections[name]
        for part in ("**What it means.**", "**How to check.**", "**What to do.**"):
            assert part in body, (name, part)
        assert "```sh" in body, name  # concrete commands to check with


def test_the_deployed_scrape_job_is_the_one_the_rules_watch() -> None:
    """deploy/monitoring's ServiceMonitor takes the job label from the Service's
    app.kubernetes.io/name (not its name, which a kustomize prefix changes): `voda`,
    the job of VodaDown and VodaMetricsAbsent."""
    monitor = yaml.safe_load((ROOT / "deploy" / "monitoring" / "servicemonitor.yaml")
                             .read_text())
    services = [d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "service.yaml")
                                              .read_text()) if d["kind"] == "Service"]
    (service,) = services
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()
    job = service["metadata"]["labels"][monitor["spec"]["jobLabel"]]
    assert job == "voda"
    by_alert = {r["alert"]: r["expr"] for r in rules()}
    for alert in ("VodaDown", "VodaMetricsAbsent"):
        (up,) = selectors(by_alert[alert])
        assert up.name == "up"
        assert {(m.name, m.value) for m in up.matchers.matchers} == {("job", job)}


# Alerts evaluated by `promtool test rules` on made-up series (one sample a minute):
# the loop stops stepping at minute 3, the store goes down at minute 2, jobs that fit wait
# beside free a100 GPUs (the v100 GPUs are all in use: no alert there), steps keep failing
# (one a minute; another service's single failure is no alert), one row is refused for
# good at minute 4 and one completion is dropped then; decisions take 1-5 s each; one
# Voda target stops answering scrapes at minute 2 (another keeps answering, and another
# job's target that is down is no Voda alert). Then, apart: the only Voda target goes
# away at minute 2 (its leader left the Endpoints: a staleness marker), and a Prometheus
# that never had one.
RULE_TESTS = {
    "evaluation_interval": "1m",
    "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": 'up{job="voda",instance="10.0.0.1:8470"}', "values": "1 1 0x30"},
            {"series": 'up{job="voda",instance="10.0.0.2:8470"}', "values": "1x30"},
            {"series": 'up{job="other",instance="10.0.0.3:9100"}', "values": "0x30"},
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
            # Down since minute 2, for 3 minutes: firing from minute 5, for that target only.
            {"eval_time": "4m", "alertname": "VodaDown", "exp_alerts": []},
            {"eval_time": "5m", "alertname": "VodaDown",
             "exp_alerts": [{"exp_labels": {"severity": "critical", "job": "voda",
                                            "instance": "10.0.0.1:8470"}}]},
            {"eval_time": "20m", "alertname": "VodaMetricsAbsent", "exp_alerts": []},
        ],
    }, {
        "interval": "1m",
        "input_series": [
            {"series": 'up{job="voda",instance="10.0.0.1:8470"}', "values": "1 1 stale"},
            {"series": 'up{job="other",instance="10.0.0.3:9100"}', "values": "1x30"},
        ],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "VodaMetricsAbsent", "exp_alerts": []},
            {"eval_time": "6m", "alertname": "VodaMetricsAbsent", "exp_alerts": []},
            {"eval_time": "7m", "alertname": "VodaMetricsAbsent",
             "exp_alerts": [{"exp_labels": {"severity": "critical", "job": "voda"}}]},
            {"eval_time": "7m", "alertname": "VodaDown", "exp_alerts": []},
        ],
    }, {
        "interval": "1m",
        "input_series": [
            {"series": 'up{job="other",instance="10.0.0.3:9100"}', "values": "1x30"},
        ],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": "VodaMetricsAbsent", "exp_alerts": []},
            {"eval_time": "5m", "alertname": "VodaMetricsAbsent",
             "exp_alerts": [{"exp_labels": {"severity": "critical", "job": "voda"}}]},
        ],
    }],
}


def test_alerts_fire_when_they_should(tmp_path: Path) -> None:
    """The rules' expressions, `for` and labels, evaluated by Prometheus's own engine
    (the annotations are left out of this copy: their text is not under test)."""
    copy = yaml.safe_load(RULES.read_text())
    for group in copy["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(copy))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"],
                                                         **RULE_TESTS}))
    done = subprocess.run([shutil.which("promtool") or "promtool", "test", "rules",
                           "tests.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_dashboard_is_grafana_json() -> None:
    board = dashboard()
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
