"""`voda serve --backend kubernetes` runs the pod scheduler beside the elastic backend:
the examples, submitted with kubectl to the fake API server, are placed as they say;
its metrics are served at /metrics; bad [pod_scheduler] settings stop it at start.
The examples validate against the Kubernetes schemas (kubernetes-validate)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import kubernetes_validate
import pytest
import yaml

from tests.podsched_serve import ROOT, fake_kubernetes, kubectl, serve_kubernetes, serving_pods
from voda_testing.kube import FakeApiServer
from voda_testing.kube.cluster import ClusterSimulator
from voda_testing.kube.harness import eventually

EXAMPLES = ("batch-gang.yaml", "inference-deployment.yaml", "pod-scheduler-config.yaml")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_examples_validate_against_the_kubernetes_schemas(example: str) -> None:
    for document in yaml.safe_load_all((ROOT / "examples" / example).read_text()):
        kubernetes_validate.validate(document, "1.32", strict=True)


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[FakeApiServer, ClusterSimulator, Path]]:
    with fake_kubernetes(tmp_path) as made:
        yield made


def test_serve_places_the_examples_and_serves_the_pod_metrics(tmp_path: Path, fake) -> None:
    api, sim, kubeconfig = fake
    with serving_pods(tmp_path, sim, kubeconfig) as url:
        for example in ("batch-gang.yaml", "inference-deployment.yaml"):
            kubectl(kubeconfig, "-n", "default", "create", "-f", str(ROOT / "examples" / example))

        def bound(prefix: str) -> list[str]:
            pods, _ = api.store.list("pods", "default")
            return [p["spec"]["nodeName"] for p in pods
                    if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName")]

        gang = eventually(lambda: len(bound("bert-pretrain-")) == 4 and bound("bert-pretrain-"),
                          timeout=30)
        assert len({n.split("-")[0] for n in gang}) == 1 and len(set(gang)) == 4
        replicas = eventually(lambda: len(bound("llm-inference-")) == 4
                              and bound("llm-inference-"), timeout=30)
        assert len(set(replicas)) == 4
        assert not set(replicas) & set(gang)  # the gang took its leaf's four nodes
        described = kubectl(kubeconfig, "-n", "default", "get", "events",
                            "--field-selector", "reason=Scheduled", "-o", "json")
        messages = [e["message"] for e in yaml.safe_load(described)["items"]]
        assert any("placed in leaf" in m for m in messages)
        text = httpx.get(f"{url}/metrics", timeout=10).text
        assert 'voda_pod_placement_decisions_total{result="bound"}' in text
        assert "voda_pod_gpu_allocation_ratio 0.5625" in text  # (32 + 4) of 64 GPUs
        assert "voda_jobs_running" in text  # the service's own metrics are still there


def test_bad_pod_scheduler_settings_stop_serve_at_start(tmp_path: Path, fake) -> None:
    _, _, kubeconfig = fake
    proc, _, log = serve_kubernetes(tmp_path, kubeconfig, "[pod_scheduler]\nretry_seconds = -1\n")
    assert proc.wait(60) == 2
    assert "pod_scheduler.retry_seconds: expected seconds in (0, 3600]" in log.read_text()
