"""/metrics: Prometheus text that promtool accepts, with the service's figures in it."""

from __future__ import annotations

import shutil
import subprocess
import time

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ServeProcess

EXPECTED = [
    "voda_jobs_created", "voda_jobs_deleted", "voda_jobs_completed", "voda_jobs_failed",
    "voda_reschedules", "voda_reschedule_duration_seconds", "voda_allocation_duration_seconds",
    "voda_placement_duration_seconds", "voda_jobs_ready", "voda_jobs_waiting",
    "voda_jobs_running", "voda_gpus", "voda_gpus_in_use", "voda_workers_migrated",
    "voda_jobs_spanning_nodes", "voda_domain_utilization_ratio", "voda_fragmentation_ratio",
]


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_promtool_accepts_the_metrics(api_server: ServeProcess) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is needed (Debian package prometheus)"
    with api_server.client("alice") as client:
        name = client.post("/v1/jobs", json={"name": "metered", "command": "x",
                                             "epochs": 100}).json()["name"]
        time.sleep(0.5)
        text = client.get("/metrics").text
        client.delete(f"/v1/jobs/{name}")
    result = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                            capture_output=True, timeout=30)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert set(EXPECTED) <= names, set(EXPECTED) - names


def test_counters_and_gauges_follow_the_jobs(api_server: ServeProcess) -> None:
    with api_server.client("alice") as client:
        before = samples(client.get("/metrics").text)
        name = client.post("/v1/jobs", json={"name": "counted", "command": "x",
                                             "gpu_type": "a100", "epochs": 100}).json()["name"]
        client.delete(f"/v1/jobs/{name}")
        time.sleep(0.5)
        after = samples(client.get("/metrics").text)
    key = (("gpu_type", "a100"),)
    assert after[("voda_jobs_created_total", key)] == before.get(
        ("voda_jobs_created_total", key), 0) + 1
    assert after[("voda_jobs_deleted_total", key)] == before.get(
        ("voda_jobs_deleted_total", key), 0) + 1
    assert after[("voda_gpus", key)] == 16
    assert 0 <= after[("voda_gpus_in_use", key)] <= 16
    assert after[("voda_reschedules_total", key)] >= 1


def test_the_step_period_counts_the_steps_and_is_never_below_the_interval(
        api_server: ServeProcess) -> None:
    """The server steps every 0.2 s (conftest): each period is at least that, and one is
    counted per step."""
    with api_server.client("alice") as client:
        started = time.monotonic()
        before = samples(client.get("/metrics").text)
        time.sleep(1.0)
        after = samples(client.get("/metrics").text)
        window = time.monotonic() - started  # the sleep and both scrapes
    count = after[("voda_scheduler_step_period_seconds_count", ())] - before.get(
        ("voda_scheduler_step_period_seconds_count", ()), 0)
    total = after[("voda_scheduler_step_period_seconds_sum", ())] - before.get(
        ("voda_scheduler_step_period_seconds_sum", ()), 0)
    # Every period but the first ends and starts within the window, each at least 0.2 s.
    assert 1 <= count <= window / 0.2 + 1
    assert total >= 0.2 * count
    assert after[("voda_scheduler_step_period_seconds_bucket", (("le", "0.15"),))] == 0
