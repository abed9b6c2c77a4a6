"""Goodput reports over real HTTP (`voda serve` in a subprocess, emulated backend, SQLite
and PostgreSQL): hostile input, ownership, and the allocation following a reported model
exactly as the pure algorithm decides."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import httpx
import pytest

import voda.training.report as voda_report
from tests.conftest import ServeFactory, ServeProcess
from tests.goodput_reports import SYNC_BOUND, body
from tests.polling import wait_for
from tests.test_cli_service import voda
from voda.core.allocation.voda import Voda
from voda.core.goodput_report import BatchLimits, GoodputReport, StepObservation, model_of
from voda.core.model import Job


def submit(client: httpx.Client, name: str, **fields: Any) -> str:
    doc = {"name": name, "command": "x", "min": 1, "max": 2, "epochs": 1000, "priority": 0,
           "category": name, **fields}
    response = client.post("/v1/jobs", json=doc)
    assert response.status_code == 201, response.text
    return str(response.json()["uid"])  # the cluster view's and the allocation's key


def start_job(client: httpx.Client, name: str, **fields: Any) -> str:
    job = submit(client, name, **fields)
    wait_for(lambda: client.get(f"/v1/jobs/{job}").json()["status"] == "Running")
    return job


def report_of(values: dict[str, Any]) -> GoodputReport:
    """The report the service reads from a body (as voda.api.schemas does)."""
    return GoodputReport(tuple(StepObservation(**o) for o in values["observations"]),
                         values["grad_sqr"], values["grad_var"],
                         BatchLimits(**values["limits"]), values.get("epoch_samples"))


def changed(path: str, value: Any) -> dict[str, Any]:
    """The default body with one field (dotted path) set to `value`."""
    doc = copy.deepcopy(body())
    *parents, last = path.split(".")
    target: Any = doc
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[int(last) if last.isdigit() else last] = value
    return doc


HOSTILE = [
    ("no observations", changed("observations", []), "observations"),
    ("65 observations", changed("observations", body()["observations"] * 17), "observations"),
    ("more GPUs than the job's max", changed("observations.0.replicas", 3),
     "observations.0.replicas"),
    ("more nodes than GPUs", changed("observations.0.nodes", 2), "observations.0.nodes"),
    ("a micro-batch outside the per-GPU range", changed("observations.1.atomic_bsz", 8),
     "observations.1.atomic_bsz"),
    ("compute longer than the step", changed("observations.0.compute_seconds", 5.0),
     "observations.0.compute_seconds"),
    ("a step of no time", changed("observations.0.step_seconds", 0.0),
     "observations.0.step_seconds"),
    ("a step of a day", changed("observations.0.step_seconds", 86_400.0),
     "observations.0.step_seconds"),
    ("a GPU count as text", changed("observations.0.replicas", "2"), "observations.0.replicas"),
    ("a negative gradient statistic", changed("grad_sqr", -1.0), "grad_sqr"),
    ("min local above max local", changed("limits.min_local", 512), "limits.min_local"),
    ("M0 above the max batch", changed("limits.init_batch", 8192), "limits.init_batch"),
    ("a fixed batch above the max batch", changed("limits.fixed_batch", 10_000),
     "limits.fixed_batch"),
    ("a batch limit past the bound", changed("limits.max_batch", 10**12), "limits.max_batch"),
    ("no limits", {k: v for k, v in body().items() if k != "limits"}, "limits"),
    ("an epoch of no samples", changed("epoch_samples", 0), "epoch_samples"),
    ("an unknown field", {**body(), "surprise": 1}, "surprise"),
    ("measurements that contradict each other",
     changed("observations.2.step_seconds", 30.0), "observations."),
]


@pytest.fixture(scope="module")
def reporter(api_server: ServeProcess) -> Any:
    with api_server.client("alice") as client:
        name = start_job(client, "goodput-hostile")
        yield client, name
        client.delete(f"/v1/jobs/{name}")


@pytest.mark.parametrize(("doc", "field"), [(d, f) for _, d, f in HOSTILE],
                         ids=[i for i, _, _ in HOSTILE])
def test_a_bad_report_is_a_422_naming_the_field(reporter: Any, doc: dict, field: str) -> None:
    client, name = reporter
    response = client.post(f"/v1/jobs/{name}/goodput", json=doc)
    assert response.status_code == 422, response.text
    fields = [e["field"] for e in response.json()["errors"]]
    assert any(f.startswith(field) for f in fields), fields
    assert client.get(f"/v1/jobs/{name}").json()["goodput"] is None  # nothing was kept


@pytest.mark.parametrize("text", [
    '"grad_var": 1e400', '"grad_var": NaN', '"grad_var": Infinity'],
    ids=["a number past a double", "NaN", "infinity"])
def test_non_finite_numbers_are_refused(reporter: Any, text: str) -> None:
    client, name = reporter
    raw = json.dumps(body()).replace('"grad_var": 40.0', text)
    response = client.post(f"/v1/jobs/{name}/goodput", content=raw,
                           headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] in ("grad_var", "body")


def test_a_huge_list_is_refused_without_a_fit(reporter: Any) -> None:
    client, name = reporter
    doc = changed("observations", body()["observations"] * 2000)
    started = time.monotonic()
    response = client.post(f"/v1/jobs/{name}/goodput", json=doc)
    assert response.status_code in (413, 422)
    assert time.monotonic() - started < 5.0


def test_only_the_owner_of_a_running_job_reports(api_server: ServeProcess,
                                                 reporter: Any) -> None:
    client, name = reporter
    with api_server.client("bob") as bob, api_server.client(anonymous=True) as anonymous:
        assert bob.post(f"/v1/jobs/{name}/goodput", json=body()).status_code == 404
        assert anonymous.post(f"/v1/jobs/{name}/goodput", json=body()).status_code == 401
    missing = client.post("/v1/jobs/no-such-job/goodput", json=body())
    assert missing.status_code == 404
    waiting = client.post("/v1/jobs", json={"name": "goodput-late", "command": "x",
                                            "min": 1, "max": 1, "epochs": 5})
    late = waiting.json()["name"]
    client.delete(f"/v1/jobs/{late}")
    refused = client.post(f"/v1/jobs/{late}/goodput", json=body())
    assert refused.status_code == 409 and refused.json()["errors"][0]["field"] == "status"


def test_a_report_is_shown_with_the_batch_the_job_would_pick(api_server: ServeProcess) -> None:
    with api_server.client("alice") as client:
        name = start_job(client, "goodput-shown", max=2)
        response = client.post(f"/v1/jobs/{name}/goodput", json=body())
        assert response.status_code == 200, response.text
        shown = client.get(f"/v1/jobs/{name}").json()
        summary = shown["goodput"]
        assert summary["reported"] and summary["measured_gpus"] == 2
        assert summary["category_measured_gpus"] == 2 and summary["throughput_from"] == "job"
        model = model_of(report_of(body()), 2)
        gpus = shown["workers"]
        nodes = len({p["node"] for p in shown["placement"]})
        choice = model.choose(nodes, gpus)
        assert summary["batch_now"] == {
            "gpus": gpus, "nodes": nodes, "batch_size": choice.batch_size(gpus),
            "atomic_bsz": choice.atomic_bsz, "accum_steps": choice.accum_steps,
            "goodput": pytest.approx(choice.goodput)}
        code, out = voda(api_server, "describe", name)
        assert code == 0, out
        line = " ".join(out.split())
        assert "Goodput reported, measured on 2 GPUs" in line
        assert f"now batch {choice.batch_size(gpus)} ({choice.atomic_bsz} per GPU" in line
        client.delete(f"/v1/jobs/{name}")


def test_a_training_script_reports_with_voda_report(api_server: ServeProcess,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Any) -> None:
    with api_server.client("alice") as client:
        name = start_job(client, "goodput-script")
        doc = body()
        monkeypatch.setenv("VODA_JOB", name)
        monkeypatch.setenv("VODA_TOKEN", api_server.tokens["alice"])
        monkeypatch.setenv("VODA_REPORT", api_server.url)
        monkeypatch.setenv("RANK", "0")
        bad = {**doc["limits"], "min_local": 1000}
        assert voda_report.goodput(doc["observations"], 1.0, 40.0, bad) is False
        assert "limits.min_local" in capsys.readouterr().err  # the service's reason
        assert voda_report.goodput(doc["observations"], 1.0, 40.0, doc["limits"],
                                   epoch_samples=50_000.0) is True
        assert client.get(f"/v1/jobs/{name}").json()["goodput"]["measured_gpus"] == 2
        # A report file (the local backend's channel) gets the report as one line.
        monkeypatch.setenv("VODA_REPORT", str(tmp_path / "reports.jsonl"))
        assert voda_report.goodput(doc["observations"], 1.0, 40.0, doc["limits"]) is True
        line = json.loads((tmp_path / "reports.jsonl").read_text())
        assert line["goodput"] == {"observations": doc["observations"], "grad_sqr": 1.0,
                                   "grad_var": 40.0, "limits": doc["limits"]}
        client.delete(f"/v1/jobs/{name}")


# ----- the allocation follows the model ---------------------------------------------------
def _allocation(client: httpx.Client) -> dict[str, int]:
    return client.get("/v1/cluster").json()["allocation"]


def _settled(client: httpx.Client, since: float = 0.0) -> dict[str, int]:
    """The allocation once a decision after `since` has been made and held for 1 s."""
    held: list[dict[str, int]] = []

    def steady() -> bool:
        view = client.get("/v1/cluster").json()
        if (view["last_reschedule"] or 0) <= since:
            return False
        held.append(view["allocation"])
        return len(held) >= 5 and all(a == held[-1] for a in held[-5:])
    wait_for(steady, timeout=60)
    return held[-1]


def _job(view: dict[str, Any], model: Any = None) -> Job:
    """The job as the scheduler sees it, from what the API shows of it."""
    return Job(name=view["uid"], min_workers=view["min_workers"],
               max_workers=view["max_workers"], priority=view["priority"],
               submit_time=view["submit_time"], epochs=view["epochs"],
               completed_epochs=view["completed_epochs"], category=view["category"],
               gpu_type=view["gpu_type"], current_workers=view["workers"],
               epoch_time_by_workers={int(k): v for k, v in
                                      view["epoch_time_by_workers"].items()},
               goodput=model, category_goodput=model)


def test_the_allocation_follows_a_reported_model_as_the_algorithm_decides(
        serve: ServeFactory, tmp_path: Any) -> None:
    # Epochs of 60,000 s: no epoch ends during the test, so the report alone changes things.
    server = serve(f"sqlite:///{tmp_path / 'alloc.db'}", "--cluster", "4x4", "--algorithm",
                   "Voda", "--time-scale", "0.001", "--rate-limit", "0.2",
                   "--step-interval", "0.2", tokens=True)
    with server.client("alice") as client:
        names = [submit(client, f"alloc-{i}", max=16, epochs=50) for i in range(2)]
        before = _settled(client)
        assert before[names[0]] > 0
        views = {n: client.get(f"/v1/jobs/{n}").json() for n in names}
        assert [views[n]["workers"] for n in names] == [before[n] for n in names]
        doc = body(SYNC_BOUND, configs=[(1, 1, 64), (1, 1, 128), (1, 2, 64), (1, 2, 128),
                                        (1, 4, 64)])
        reported_at = time.time()
        response = client.post(f"/v1/jobs/{names[0]}/goodput", json=doc)
        assert response.status_code == 200, response.text
        after = _settled(client, since=reported_at)
        model = model_of(report_of(doc), 16)
        jobs = [_job(views[names[0]], model), _job(views[names[1]])]
        expected = Voda()(jobs, 16)
        assert after == expected
        assert after != before  # the model made a difference: it is not the default sizing
        assert after[names[0]] <= 2 * model.max_profiled_replicas
