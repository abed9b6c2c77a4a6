"""Goodput reports through the local backend: the report file's goodput lines checked
(every field bounded, refusals naming it) and fitted into GOODPUT_REPORTED events, and
the example training script measuring its model across a rescale with real processes,
at a fixed batch and adapting its batch to what it measured."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import ServeFactory
from tests.goodput_reports import body
from tests.polling import wait_for
from tests.test_api_goodput import HOSTILE as API_HOSTILE
from tests.test_api_goodput import _job, _settled, changed
from tests.test_local_backend import TRAIN, read_jsonl, wait_for_events, write_script
from voda.backends.local import LocalBackend
from voda.cli.demo_local import PROJECT_ROOT
from voda.core.allocation.voda import Voda
from voda.core.goodput import GoodputModel
from voda.core.goodput_report import BatchLimits, ReportRefused, model_of, report_from_values
from voda.core.model import Job
from voda.engine.events import Event, EventKind
from voda.training.adaptive_batch import decide, plan
from voda.training.goodput_meter import GOODPUT_FILE


def without(doc: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != key}


# ----- the report file's goodput lines, checked -------------------------------------------
# What only JSON read without a schema can hold, beside every case the API refuses.
FILE_ONLY = [
    ("not an object", [1, 2], "report"),
    ("observations that are not a list", changed("observations", {"a": 1}), "observations"),
    ("an observation that is not an object", changed("observations.1", 3), "observations.1"),
    ("a GPU count as a boolean", changed("observations.0.replicas", True),
     "observations.0.replicas"),
    ("a GPU count as a fraction", changed("observations.0.replicas", 1.5),
     "observations.0.replicas"),
    ("no nodes", changed("observations.0.nodes", 0), "observations.0.nodes"),
    ("a step of NaN", changed("observations.0.step_seconds", math.nan),
     "observations.0.step_seconds"),
    ("a missing time", changed("observations.0", {"nodes": 1, "replicas": 1, "atomic_bsz": 64,
                                                  "step_seconds": 0.3}),
     "observations.0.compute_seconds"),
    ("an unknown field in an observation", changed("observations.0.gpu", "t4"),
     "observations.0.gpu"),
    ("an infinite gradient statistic", changed("grad_var", math.inf), "grad_var"),
    ("a gradient statistic past the bound", changed("grad_var", 1e31), "grad_var"),
    ("a fixed batch as text", changed("limits.fixed_batch", "64"), "limits.fixed_batch"),
]
CASES = [*API_HOSTILE, *FILE_ONLY]


@pytest.mark.parametrize(("doc", "field"), [(d, f) for _, d, f in CASES],
                         ids=[i for i, _, _ in CASES])
def test_a_report_line_is_refused_as_the_api_refuses_it_naming_the_field(
        doc: Any, field: str) -> None:
    with pytest.raises(ReportRefused) as refused:
        model_of(report_from_values(doc, max_workers=2), max_workers=2)
    fields = [f for f, _ in refused.value.problems]
    assert any(f.startswith(field) for f in fields), fields


def test_a_good_report_line_reads_as_the_api_reads_the_body() -> None:
    doc = body(epoch_samples=50_000.0)
    report = report_from_values(json.loads(json.dumps(doc)), max_workers=2)
    assert [(o.nodes, o.replicas, o.atomic_bsz) for o in report.observations] == [
        (o["nodes"], o["replicas"], o["atomic_bsz"]) for o in doc["observations"]]
    assert report.limits.max_local == doc["limits"]["max_local"]
    assert report.epoch_samples == 50_000.0
    assert report_from_values(without(doc, "epoch_samples"), 2).epoch_samples is None


# ----- the backend fits what a script writes ------------------------------------------------
@pytest.fixture
def clock() -> Callable[[], float]:
    started = time.monotonic()
    return lambda: time.monotonic() - started


def test_the_backend_fits_report_lines_into_goodput_events_and_logs_refusals_cut_short(
        tmp_path: Path, clock: Callable[[], float]) -> None:
    good = body(epoch_samples=50_000.0)
    bad = changed("limits.min_local", 1000)
    script = write_script(tmp_path, "reports.py", (
        "import json, os, voda.training.report\n"
        "with open(os.environ['VODA_REPORT'], 'a') as f:\n"
        "    f.write('[' * 100000 + '\\n')  # nested past any parser's depth\n"
        "    flood = {f'x{i}': 1 for i in range(5000)}  # 5,000 unknown fields\n"
        "    f.write(json.dumps({'goodput': flood}) + '\\n')\n"
        f"good, bad = {good!r}, {bad!r}\n"
        "for doc in (bad, good):\n"
        "    assert voda.training.report.goodput(doc['observations'], doc['grad_sqr'],"
        " doc['grad_var'], doc['limits'], epoch_samples=doc.get('epoch_samples'))\n"
        "voda.training.report.epoch(1, 2.0, 1)\n"))
    backend = LocalBackend(slots=2, run_dir=tmp_path / "runs", clock=clock,
                           commands={"adaptive": script}, launcher="fork", preload=())
    try:
        backend.start(Job("adaptive", 1, 2, epochs=1), (("local", 1),))
        events = wait_for_events(backend, lambda ev: any(
            e.kind is EventKind.JOB_COMPLETED for e in ev))
    finally:
        backend.close()
    reported = [e for e in events if e.kind is EventKind.GOODPUT_REPORTED]
    assert len(reported) == 1
    model = reported[0].data["goodput"]
    assert model == model_of(report_from_values(good, 2), 2)  # as the service fits it
    assert model.max_profiled_replicas == 2 and model.epoch_samples == 50_000.0
    kinds = [e.kind for e in events]
    assert kinds.index(EventKind.GOODPUT_REPORTED) < kinds.index(EventKind.JOB_COMPLETED)
    log = backend.log_path("adaptive").read_text()
    assert "goodput report refused: limits.min_local: 1000 is above max_local" in log
    flood = next(line for line in log.splitlines() if "x4999" in line or "x0:" in line)
    assert "unknown field" in flood and len(flood) < 2_100  # the reasons are cut short


def rescaled_after_a_report(backend: LocalBackend, job: Job,
                            first: tuple[tuple[str, int], ...],
                            then: tuple[tuple[str, int], ...]) -> list[Event]:
    """The events of `job` started on `first`, rescaled to `then` once it has reported
    its goodput, and run to completion; the backend closed."""
    seen: list[Event] = []
    try:
        assert backend.wait_ready()
        backend.start(job, first)
        seen += wait_for_events(backend, lambda ev: any(
            e.kind is EventKind.GOODPUT_REPORTED for e in ev), timeout=60)
        backend.scale(job, then)
        seen += wait_for_events(backend, lambda ev: any(
            e.kind is EventKind.JOB_COMPLETED for e in ev), timeout=90)
    finally:
        backend.close()
    return seen


def test_the_example_script_reports_each_configuration_it_ran_across_a_rescale(
        tmp_path: Path, clock: Callable[[], float]) -> None:
    command = (f"python {TRAIN} --epochs 4 --steps-per-epoch 12 --batch-size 64 "
               "--fixed-batch --sample-seconds 0.001")
    backend = LocalBackend(slots=2, nodes="2x1", run_dir=tmp_path / "runs", cwd=PROJECT_ROOT,
                           clock=clock, commands={"meter": command}, stop_timeout=15.0)
    seen = rescaled_after_a_report(backend, Job("meter", 1, 2, epochs=4), (("local-0", 1),),
                                   (("local-0", 1), ("local-1", 1)))  # two nodes of 1 GPU
    models = [e.data["goodput"] for e in seen if e.kind is EventKind.GOODPUT_REPORTED]
    assert models[0].max_profiled_replicas == 1
    assert models[-1].max_profiled_replicas == 2
    last = models[-1]
    assert last.fixed_batch == 64 and last.init_batch == 64 and last.epoch_samples == 12 * 64
    assert last.grad_sqr > 0 and last.grad_var > 0
    # What the script keeps in its checkpoint directory: one configuration per size.
    kept = json.loads((backend.checkpoint_dir("meter") / GOODPUT_FILE).read_text())
    configs = {(n, r, a): (c, s) for n, r, a, c, s in kept["observations"]}
    assert set(configs) == {(1, 1, 64), (2, 2, 32)}
    for compute, step in configs.values():
        assert 0 < compute <= step
    # The emulated compute (1 ms a sample) is what the compute time measures.
    assert configs[(1, 1, 64)][0] == pytest.approx(0.064, rel=0.5)
    assert configs[(2, 2, 32)][0] == pytest.approx(0.032, rel=0.5)
    reports = [r["goodput"] for r in read_jsonl(backend.run_dir / "meter" / "reports.jsonl")
               if "goodput" in r]
    assert_each_read_fitted_its_newest_line(backend, "meter", models, reports, max_workers=2)
    epochs = read_jsonl(backend.checkpoint_dir("meter") / "epochs.jsonl")
    assert [e["epoch"] for e in epochs] == [1, 2, 3, 4]


def test_the_example_script_trains_at_the_larger_batch_its_measured_model_makes_pay(
        tmp_path: Path, clock: Callable[[], float]) -> None:
    # A fixed 20 ms a micro-batch (a GPU's launches) and noisy labels (large gradient
    # noise): a larger batch shares the fixed cost and loses little efficiency.
    limits = BatchLimits(init_batch=32, max_batch=256, min_local=4, max_local=128)
    command = (f"python {TRAIN} --epochs 6 --steps-per-epoch 8 --batch-size 32 "
               f"--max-batch {limits.max_batch} --min-local {limits.min_local} "
               f"--max-local {limits.max_local} --micro-batch-seconds 0.02 "
               "--sample-seconds 0.0002 --label-noise 1")
    backend = LocalBackend(slots=2, run_dir=tmp_path / "runs", cwd=PROJECT_ROOT, clock=clock,
                           commands={"adaptive": command}, stop_timeout=15.0)
    seen = rescaled_after_a_report(backend, Job("adaptive", 1, 2, epochs=6), (("local", 1),),
                                   (("local", 2),))
    epochs = read_jsonl(backend.checkpoint_dir("adaptive") / "epochs.jsonl")
    assert [e["epoch"] for e in epochs] == [1, 2, 3, 4, 5, 6]  # each once, in order
    lines = [r["goodput"] for r in read_jsonl(backend.run_dir / "adaptive" / "reports.jsonl")
             if "goodput" in r]
    assert len(lines) == len(epochs)  # one report an epoch
    models = [e.data["goodput"] for e in seen if e.kind is EventKind.GOODPUT_REPORTED]
    assert_each_read_fitted_its_newest_line(backend, "adaptive", models, lines, max_workers=2)
    for m in models:  # an adaptive job with its limits, as the policy sizes one
        assert m.fixed_batch is None and m.epoch_samples == 8 * 32
        assert (m.init_batch, m.max_batch, m.min_local, m.max_local) == (
            limits.init_batch, limits.max_batch, limits.min_local, limits.max_local)
    assert models[-1].max_profiled_replicas == 2
    # Before it measured anything the job trained at its initial batch.
    assert (epochs[0]["batch_size"], epochs[0]["lr_factor"]) == (limits.init_batch, 1.0)
    for record in epochs:
        assert record["batch_size"] == record["workers"] * record["atomic_bsz"] * (
            record["accum_steps"] + 1) <= limits.max_batch
        assert limits.min_local <= record["atomic_bsz"] <= limits.max_local
    # Within a process, each epoch trained at what the last report's fit chose.
    for before, record, line in zip(epochs, epochs[1:], lines, strict=False):
        if not record["restarted"]:
            want = decide(limits, line, 1, record["workers"], line["epoch_samples"])
            assert (record["batch_size"], record["atomic_bsz"], record["accum_steps"]) == (
                want.batch, want.atomic_bsz, want.accum_steps), (before, record)
            assert record["lr_factor"] == pytest.approx(want.lr_factor)
    # On two ranks, once measured, it trained at a larger batch than its initial one, and
    # the model it reported last says that batch pays.
    larger = [e for e in epochs if e["workers"] == 2 and e["batch_size"] > limits.init_batch]
    assert larger, epochs
    last, chosen = models[-1], larger[-1]
    start = plan(dataclasses.replace(last, perf=None), 1, 2, fitted=False)
    assert start.batch == limits.init_batch
    assert goodput_at(last, 2, chosen["atomic_bsz"], chosen["accum_steps"]) > goodput_at(
        last, 2, start.atomic_bsz, start.accum_steps)
    assert chosen["lr_factor"] > 1.0  # AdaScale: a larger batch takes larger steps


def assert_each_read_fitted_its_newest_line(backend: LocalBackend, job: str,
                                            models: list[GoodputModel],
                                            lines: list[dict[str, Any]],
                                            max_workers: int) -> None:
    """No line refused or left unfitted, and each event the fit of one line, in order, ending
    with the last: the backend fits the newest line of each read of the file, so two lines a
    busy machine lets pile up between reads give one event."""
    assert "goodput report" not in backend.log_path(job).read_text()  # refused, not fitted
    fits = [model_of(report_from_values(line, max_workers), max_workers) for line in lines]
    assert models and models[-1] == fits[-1]
    at = 0
    for model in models:  # each the fit of a line after the one before it
        assert model in fits[at:], (model, fits)
        at = fits.index(model, at) + 1


def goodput_at(model: GoodputModel, replicas: int, atomic: int, accum: int) -> float:
    return float(model.goodput(np.array([1]), np.array([replicas]), np.array([atomic]),
                               np.array([accum]))[0])


# ----- through the service ----------------------------------------------------------------
def category_model(lines: list[dict[str, Any]], max_workers: int) -> GoodputModel:
    """The model the engine keeps for the category of a job that reported `lines`: the
    first measured on the most GPUs (Scheduler._learn_goodput)."""
    held: GoodputModel | None = None
    for values in lines:
        model = model_of(report_from_values(values, max_workers), max_workers)
        if held is None or model.max_profiled_replicas > held.max_profiled_replicas:
            held = model
    assert held is not None
    return held


def test_a_local_job_reports_its_model_to_the_service_and_voda_sizes_its_category_by_it(
        serve: ServeFactory, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    server = serve(f"sqlite:///{tmp_path / 'v.db'}", "--backend", "local", "--slots", "4",
                   "--run-dir", str(runs), "--algorithm", "Voda", "--rate-limit", "0.2",
                   "--step-interval", "0.2", tokens=True)
    sleeper = write_script(tmp_path, "sleeper.py", "import time\ntime.sleep(300)\n")
    with server.client("root") as client:  # the local backend runs administrators' commands
        def submit(doc: dict[str, Any]) -> str:
            response = client.post("/v1/jobs", json=doc)
            assert response.status_code == 201, response.text
            return str(response.json()["uid"])  # the allocation's key

        meter = submit({"name": "meter", "category": "meter", "min": 1, "max": 2, "epochs": 3,
                        "command": f"python {TRAIN} --steps-per-epoch 8 --batch-size 64 "
                                   "--sample-seconds 0.001"})
        wait_for(lambda: client.get(f"/v1/jobs/{meter}").json()["status"] == "Completed",
                 timeout=90)
        summary = client.get(f"/v1/jobs/{meter}").json()["goodput"]
        lines = [r["goodput"] for r in read_jsonl(runs / meter / "reports.jsonl")
                 if "goodput" in r]
        assert len(lines) == 3  # one report an epoch
        assert summary["reported"] is True
        assert summary["measured_gpus"] == max(
            o["replicas"] for o in lines[-1]["observations"]) >= 1
        assert (summary["grad_sqr"], summary["grad_var"]) == pytest.approx(
            (lines[-1]["grad_sqr"], lines[-1]["grad_var"]))
        assert summary["grad_sqr"] > 0 and summary["grad_var"] > 0
        assert "refused" not in (runs / meter / "log.txt").read_text()
        model = category_model(lines, 2)

        # A new job of the category is sized by the model the first one reported.
        decided_after = time.time()
        # (Long enough that a restart's 30 s is worth paying for both.)
        borrower, stranger = (
            submit({"name": name, "category": category, "min": 1, "max": 4, "epochs": epochs,
                    "command": sleeper})
            for name, category, epochs in (("borrower", "meter", 2000),
                                           ("stranger", "other", 200)))
        allocation = _settled(client, since=decided_after)
        views = [client.get(f"/v1/jobs/{n}").json() for n in (borrower, stranger)]
        assert views[0]["goodput"]["throughput_from"] == "category"
        assert views[0]["goodput"]["category_measured_gpus"] == model.max_profiled_replicas
        assert views[1]["goodput"] is None
        # The borrower has no model of its own, only its category's.
        jobs = [dataclasses.replace(_job(views[0], model), goodput=None), _job(views[1])]
        assert allocation == Voda()(jobs, 4)
        assert [v["workers"] for v in views] == [allocation[borrower], allocation[stranger]]


def test_a_flood_of_goodput_lines_costs_one_fit_per_read_of_the_report_file(
        tmp_path: Path, clock: Callable[[], float]) -> None:
    from voda.backends.local.paths import REPORT_FILE
    from voda.backends.local.run import Run

    good, bad = body(epoch_samples=50_000.0), changed("limits.min_local", 1000)
    run = Run("flood", Job("flood", 1, 2, epochs=1), tmp_path / "flood")
    run.dir.mkdir()
    lines = [json.dumps({"goodput": bad})] + [json.dumps({"goodput": good})] * 300
    (run.dir / REPORT_FILE).write_text("\n".join(lines) + "\n")
    backend = LocalBackend(slots=2, run_dir=tmp_path / "runs", clock=clock,
                           launcher="fork", preload=())
    try:
        backend._read_reports(run)
        events = backend.events()
    finally:
        backend.close()
    reported = [e for e in events if e.kind is EventKind.GOODPUT_REPORTED]
    assert len(reported) == 1  # 300 good lines, one fit
    assert reported[0].data["goodput"] == model_of(report_from_values(good, 2), 2)


def test_the_report_file_is_read_a_bounded_chunk_at_a_time(tmp_path: Path) -> None:
    from voda.backends.local.paths import REPORT_FILE
    from voda.backends.local.run import MAX_REPORT_READ, Run, new_reports

    run = Run("big", Job("big", 1, 1, epochs=1), tmp_path)
    path = tmp_path / REPORT_FILE
    huge = json.dumps({"epoch": 1, "pad": "x" * (3 * MAX_REPORT_READ)})
    path.write_text(huge + "\n" + json.dumps({"epoch": 2, "epoch_seconds": 1.0,
                                              "workers": 1}) + "\n")
    seen: list[dict[str, object]] = []
    for _ in range(6):
        before = run.report_offset
        seen += new_reports(run)
        assert run.report_offset - before <= MAX_REPORT_READ
    assert [r["epoch"] for r in seen] == [2]  # the line longer than a read is dropped
    assert run.report_offset == path.stat().st_size
