"""The local backend on this machine's own devices, as `voda serve` on it takes them: one slot
per GPU and NCCL between the ranks where GPUs are visible, else two CPU slots and gloo.

Every other local-backend test runs on CPU slots (conftest.py hides the GPUs); this is the
end-to-end test to run on a GPU machine. Under the real scheduler, example jobs train, their
node is drained while one of them runs (it checkpoints on SIGTERM and stops), comes back,
and the job resumes from its checkpoint: every epoch once, and the same weights as an
uninterrupted run. A batch-adaptive job measures and reports its goodput on the device.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from voda.backends.local import LocalBackend, detect_gpus
from voda.backends.local.launch import environment
from voda.cli.demo_local import PROJECT_ROOT
from voda.core.model import Job, JobStatus
from voda.engine.events import Event, EventKind
from voda.engine.scheduler import Scheduler, SchedulerSettings
from voda_testing.devices import machine_devices

TRAIN = PROJECT_ROOT / "examples" / "local" / "train.py"
FIXED = f"python {TRAIN} --fixed-batch --sample-seconds 0.002"
TIMEOUT = 240.0

pytestmark = pytest.mark.usefixtures(machine_devices.__name__)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def epochs_done(backend: LocalBackend, job: str) -> int:
    path = backend.checkpoint_dir(job) / "epochs.jsonl"
    return len(read_jsonl(path)) if path.exists() else 0


def run_until_done(scheduler: Scheduler, clock: Callable[[], float],
                   during: Callable[[float], None] = lambda now: None) -> None:
    while scheduler.active:
        now = clock()
        assert now < TIMEOUT, f"jobs still active: {sorted(scheduler.active)}"
        during(now)
        scheduler.step(now)
        time.sleep(0.25)


@pytest.fixture
def clock() -> Callable[[], float]:
    started = time.monotonic()
    return lambda: time.monotonic() - started


@pytest.mark.parametrize("launcher", ["direct", "fork"])
def test_jobs_on_this_machines_devices_resume_after_a_drain_with_an_uninterrupted_runs_weights(
        tmp_path: Path, clock: Callable[[], float], launcher: str) -> None:
    gpus = detect_gpus()
    collective = "nccl" if gpus else "gloo"
    commands = {"first": f"{FIXED} --epochs 6", "second": f"{FIXED} --epochs 4"}
    backend = LocalBackend(slots=len(gpus) or 2, run_dir=tmp_path / "runs", cwd=PROJECT_ROOT,
                           clock=clock, commands=commands, stop_timeout=15.0,
                           launcher=launcher)
    [node] = backend.nodes()
    scheduler = Scheduler(backend, SchedulerSettings(algorithm="ElasticFIFO",
                                                     rate_limit_seconds=0))
    assert backend.wait_ready(), f"the {launcher} launcher did not start"
    for name, epochs in (("first", 6), ("second", 4)):
        scheduler.submit(Job(name, 1, backend.slots, epochs=epochs, submit_time=clock()))
    drained_at: list[float] = []
    back_at: list[float] = []

    def drain_then_return(now: float) -> None:
        if not drained_at and epochs_done(backend, "first") >= 2:
            scheduler.halt_jobs_on(node.name, now)
            scheduler.handle(Event(EventKind.NODE_REMOVED, now, node=node))
            drained_at.append(now)
        elif drained_at and not back_at and not backend.running():
            scheduler.handle(Event(EventKind.NODE_ADDED, now, node=node))
            back_at.append(now)

    try:
        run_until_done(scheduler, clock, drain_then_return)
    finally:
        backend.close()

    assert back_at, "the drain never stopped the jobs"
    assert {n: r.status for n, r in scheduler.jobs.items()} == {
        "first": JobStatus.COMPLETED, "second": JobStatus.COMPLETED}
    for name, epochs in (("first", 6), ("second", 4)):
        history = read_jsonl(backend.checkpoint_dir(name) / "epochs.jsonl")
        assert [h["epoch"] for h in history] == list(range(1, epochs + 1)), name
        assert scheduler.jobs[name].epoch_time_by_workers, f"{name}: no epoch report arrived"
        log = backend.log_path(name).read_text()
        starts = [line for line in log.splitlines() if "voda-train: world size" in line]
        assert starts and all(f"({collective})" in line for line in starts), log
    first_log = backend.log_path("first").read_text()
    assert "stopped before epoch" in first_log, first_log
    assert backend.launches("first") >= 2
    # The checkpoint carried everything: the weights equal an uninterrupted run's on the
    # same kind of device, one rank.
    reference = tmp_path / "reference"
    # the ranks' environment (voda importable from the checkout, installed or not), no reports
    env = environment({"VODA_REPORT": ""}, None)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[0]
    subprocess.run([sys.executable, *commands["first"].split()[1:], "--checkpoint-dir",
                    str(reference), "--sample-seconds", "0"], cwd=PROJECT_ROOT, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, check=True, timeout=120)
    got = json.loads((backend.checkpoint_dir("first") / "final.json").read_text())
    want = json.loads((reference / "final.json").read_text())
    assert got["params"] == pytest.approx(want["params"], rel=1e-4, abs=1e-5)
    assert backend.idle()


def test_an_adaptive_job_measures_its_goodput_on_this_machines_devices(
        tmp_path: Path, clock: Callable[[], float]) -> None:
    gpus = detect_gpus()
    command = (f"python {TRAIN} --epochs 3 --steps-per-epoch 8 --batch-size 32 "
               "--max-batch 128 --sample-seconds 0.0005 --label-noise 1")
    backend = LocalBackend(slots=len(gpus) or 2, run_dir=tmp_path / "runs", cwd=PROJECT_ROOT,
                           clock=clock, commands={"adaptive": command}, stop_timeout=15.0)
    scheduler = Scheduler(backend, SchedulerSettings(algorithm="Pollux",
                                                     rate_limit_seconds=0))
    assert backend.wait_ready()
    scheduler.submit(Job("adaptive", 1, backend.slots, epochs=3, submit_time=clock()))
    try:
        run_until_done(scheduler, clock)
    finally:
        backend.close()

    record = scheduler.jobs["adaptive"]
    assert record.status is JobStatus.COMPLETED, record.failure_reason
    model = record.goodput
    assert model is not None, "no goodput report reached the scheduler"
    # Gradient statistics measured on the device: from the replicas' gradients, or from two
    # halves of the batch on one rank.
    assert model.grad_sqr > 0 and model.grad_var > 0
    assert model.fixed_batch is None and model.init_batch == 32 and model.max_batch == 128
    reports = [r["goodput"] for r in read_jsonl(backend.run_dir / "adaptive" / "reports.jsonl")
               if "goodput" in r]
    assert len(reports) == 3  # one an epoch, each accepted
