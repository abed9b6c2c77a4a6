"""The local backend with real training processes, driven by the real scheduler.

The end-to-end test runs the four example jobs of examples/local/ (real
multi-process gloo DDP, real checkpoints, real SIGTERM) on 4 slots under
ElasticFIFO, stepping the scheduler in real time.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

import voda.training.report
from voda.backends.local import LocalBackend, forkable, from_settings, parse_nodes
from voda.cli.demo_local import (
    PROJECT_ROOT,
    SpecError,
    load_job_spec,
    load_job_specs,
    too_few_gpus,
)
from voda.core.model import Job, JobStatus
from voda.engine.backend import Backend, SupportsAdoption, SupportsDelete
from voda.engine.events import Event, EventKind
from voda.engine.scheduler import Scheduler, SchedulerSettings

TRAIN = PROJECT_ROOT / "examples" / "local" / "train.py"
E2E_TIMEOUT = 150.0


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for_events(backend: LocalBackend, done: Callable[[list[Event]], bool],
                    timeout: float = 90.0) -> list[Event]:
    seen: list[Event] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen.extend(backend.events())
        if done(seen):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"timed out; events so far: {seen}")


@pytest.fixture
def clock() -> Callable[[], float]:
    started = time.monotonic()
    return lambda: time.monotonic() - started


# ----- the end-to-end run --------------------------------------------------------------------
def test_example_jobs_rescale_and_complete_every_epoch_exactly_once(
    tmp_path: Path, clock: Callable[[], float]
) -> None:
    specs = load_job_specs(PROJECT_ROOT / "examples" / "local")
    assert len(specs) >= 3
    backend = LocalBackend(slots=4, run_dir=tmp_path / "runs", cwd=PROJECT_ROOT, clock=clock,
                           stop_timeout=15.0)
    assert isinstance(backend, Backend)
    assert isinstance(backend, SupportsDelete) and isinstance(backend, SupportsAdoption)
    scheduler = Scheduler(backend, SchedulerSettings(algorithm="ElasticFIFO",
                                                     rate_limit_seconds=0))
    assert backend.wait_ready(), "the fork launcher did not start"
    started = clock()
    submit_at = {spec.job.name: started + 2.0 * i for i, spec in enumerate(specs)}
    pending = list(specs)
    try:
        while pending or scheduler.active:
            now = clock()
            assert now < E2E_TIMEOUT, f"jobs still active: {sorted(scheduler.active)}"
            while pending and now >= submit_at[pending[0].job.name]:
                spec = pending.pop(0)
                backend.set_command(spec.job.name, spec.command)
                job = spec.job
                scheduler.submit(Job(job.name, job.min_workers, job.max_workers,
                                     epochs=job.epochs, submit_time=now,
                                     category=job.category))
            scheduler.step(now)
            if scheduler.active:
                assert backend.running().keys() <= scheduler.active.keys()
            time.sleep(0.25)
    finally:
        backend.close()

    records = scheduler.jobs
    assert {name: r.status for name, r in records.items()} == {
        spec.job.name: JobStatus.COMPLETED for spec in specs}
    rescaled = [name for name, r in records.items() if r.rescales > 0]
    assert rescaled, "ElasticFIFO should have rescaled at least one job"
    for spec in specs:
        name, record = spec.job.name, records[spec.job.name]
        history = read_jsonl(backend.checkpoint_dir(name) / "epochs.jsonl")
        # Resumed right: every epoch once, in order, whatever the restarts.
        assert [h["epoch"] for h in history] == list(range(1, spec.job.epochs + 1)), name
        assert record.epoch_time_by_workers, f"{name}: no epoch report reached the scheduler"
        # Throughput too, under the layout: all workers on the one machine.
        assert record.layout_throughput, f"{name}: no throughput reached the scheduler"
        assert {n for _, n in record.layout_throughput} == {1}, name
        assert set(record.epoch_time_by_workers) <= {h["workers"] for h in history}
        # Rescales decided while a restart is under way are carried out together.
        assert 1 <= backend.launches(name) <= 1 + record.rescales + record.migrations
    assert any(backend.launches(name) > 1 for name in rescaled)
    # A rescaled job trained at more than one size and the scheduler saw both speeds.
    multi = [n for n in rescaled
             if len({h["workers"] for h in
                     read_jsonl(backend.checkpoint_dir(n) / "epochs.jsonl")}) > 1]
    assert multi, "a rescaled job should have completed epochs at two sizes"
    # The first epoch after each (re)start includes the restore and is not a speed: the
    # scheduler knows each size at which the job then ran a second epoch in a row.
    for name in multi:
        sizes = [h["workers"] for h in read_jsonl(backend.checkpoint_dir(name) / "epochs.jsonl")]
        measured = {w for w, after in itertools.pairwise(sizes) if after == w}
        assert set(records[name].epoch_time_by_workers) == measured, name
    # Its final weights equal an uninterrupted one-worker run's: the checkpoint carried all.
    command = next(s.command for s in specs if s.job.name == multi[0])
    reference_dir = tmp_path / "reference"
    subprocess.run(
        [sys.executable, *command.split()[1:], "--checkpoint-dir", str(reference_dir),
         "--sample-seconds", "0"],
        cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, check=True,
        env={**os.environ, "VODA_REPORT": "", "OMP_NUM_THREADS": "1"}, timeout=60,
    )
    got = json.loads((backend.checkpoint_dir(multi[0]) / "final.json").read_text())
    want = json.loads((reference_dir / "final.json").read_text())
    assert got["params"] == pytest.approx(want["params"], rel=1e-4, abs=1e-5)
    log = backend.log_path(rescaled[0]).read_text()
    assert "stopped before epoch" in log and "launch 2:" in log
    assert backend.idle()


# ----- failures and stops ------------------------------------------------------------------
def write_script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(body)
    return f"python {path}"


def test_a_script_that_exits_3_is_a_failed_job_with_its_exit_code_and_log_tail(
    tmp_path: Path, clock: Callable[[], float]
) -> None:
    command = write_script(tmp_path, "crash.py",
                           "import sys\nprint('loading data')\nprint('no such file: data.csv')\n"
                           "sys.exit(3)\n")
    # The fork launcher, with nothing to preload: this script needs no torch.
    backend = LocalBackend(slots=2, run_dir=tmp_path / "runs", clock=clock,
                           commands={"crashy": command}, launcher="fork", preload=())
    scheduler = Scheduler(backend, SchedulerSettings(rate_limit_seconds=0))
    try:
        scheduler.submit(Job("crashy", 1, 2, epochs=3))
        scheduler.step(clock())
        events = wait_for_events(backend, lambda ev: any(
            e.kind is EventKind.JOB_FAILED for e in ev))
    finally:
        backend.close()
    failed = next(e for e in events if e.kind is EventKind.JOB_FAILED)
    assert failed.job == "crashy"
    assert failed.data["exit_code"] == 3
    assert "no such file: data.csv" in failed.data["log_tail"]
    assert "exit code 3" in failed.data["reason"]
    for event in events:
        scheduler.handle(event)
    record = scheduler.jobs["crashy"]
    assert record.status is JobStatus.FAILED
    assert "no such file: data.csv" in (record.failure_reason or "")


def test_one_crashed_rank_brings_down_the_others_and_is_reported(
    tmp_path: Path, clock: Callable[[], float]
) -> None:
    command = write_script(tmp_path, "rank1_dies.py",
                           "import os, sys, time\n"
                           "if os.environ['RANK'] == '1':\n    sys.exit(7)\n"
                           "time.sleep(60)\n")
    backend = LocalBackend(slots=2, run_dir=tmp_path / "runs", clock=clock,
                           commands={"half": command}, launcher="direct")
    try:
        started = time.monotonic()
        backend.start(Job("half", 2, 2), (("local", 2),))
        events = wait_for_events(backend, lambda ev: any(
            e.kind is EventKind.JOB_FAILED for e in ev))
        assert time.monotonic() - started < 20
        assert backend.idle()
    finally:
        backend.close()
    failed = next(e for e in events if e.kind is EventKind.JOB_FAILED)
    assert failed.data["exit_code"] == 7


def test_halt_stops_gracefully_keeps_the_checkpoint_and_delete_drops_it(
    tmp_path: Path, clock: Callable[[], float]
) -> None:
    command = write_script(tmp_path, "waits.py", (
        "import os, signal, sys, time, pathlib\n"
        "ckpt = pathlib.Path(os.environ['VODA_CHECKPOINT_DIR'])\n"
        "def stop(*_):\n"
        "    (ckpt / 'ckpt.txt').write_text('saved')\n"
        "    sys.exit(75)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"))
    backend = LocalBackend(slots=2, run_dir=tmp_path / "runs", clock=clock,
                           commands={"w": command}, launcher="direct")
    job = Job("w", 1, 2)
    try:
        backend.start(job, (("local", 1),))
        deadline = time.monotonic() + 20
        log = backend.log_path("w")
        while not log.exists() or "ready" not in log.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert backend.running() == {"w": (("local", 1),)}
        backend.halt(job)
        while not backend.idle():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert backend.events() == []  # a stop asked for is neither a completion nor a failure
        assert (backend.checkpoint_dir("w") / "ckpt.txt").read_text() == "saved"
        assert backend.running() == {}
        backend.delete("w")
        assert not backend.checkpoint_dir("w").exists()
    finally:
        backend.close()


@pytest.mark.parametrize("launcher", ["direct", "fork"])
def test_a_new_backend_adopts_processes_left_running(tmp_path: Path, launcher: str) -> None:
    command = write_script(tmp_path, "long.py", "import time\nprint('up', flush=True)\n"
                           "time.sleep(60)\n")
    first = LocalBackend(slots=2, run_dir=tmp_path / "runs", commands={"long": command},
                         launcher=launcher, preload=())
    first.start(Job("long", 1, 2), (("local", 2),))
    deadline = time.monotonic() + 20
    while first.world_size("long") != 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    first.detach()  # the service went away without stopping its jobs
    second = LocalBackend(slots=2, run_dir=tmp_path / "runs", launcher=launcher, preload=())
    try:
        assert second.running() == {"long": (("local", 2),)}
        second.halt(Job("long", 1, 2))
        while not second.idle():
            assert time.monotonic() < deadline + 20
            time.sleep(0.05)
        assert second.running() == {}
    finally:
        second.close()


# ----- nodes, specs, settings ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "slots", "expected"),
    [
        pytest.param(None, 4, [("local", 4)], id="no nodes setting makes one node of all slots"),
        pytest.param("2x2", 4, [("local-0", 2), ("local-1", 2)], id="2x2 makes two nodes of 2"),
        pytest.param("2", 4, [("local-0", 2), ("local-1", 2)], id="a count splits the slots"),
    ],
)
def test_nodes_setting(spec: str | None, slots: int, expected: list[tuple[str, int]]) -> None:
    assert [(n.name, n.gpus) for n in parse_nodes(spec, slots)] == expected


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        pytest.param({"slots": 0}, "slots", id="zero slots are refused naming slots"),
        pytest.param({"slots": 3, "nodes": "2x2"}, "slots", id="slots must match the nodes shape"),
        pytest.param({"nodes": "two"}, "nodes", id="a malformed nodes setting names nodes"),
        pytest.param({"launcher": "mpirun"}, "launcher", id="an unknown launcher names launcher"),
        pytest.param({"slots": 2, "gpus": ["0"]}, "slots", id="more slots than GPUs is refused"),
    ],
)
def test_bad_settings_name_the_field(tmp_path: Path, kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        LocalBackend(run_dir=tmp_path, **{"launcher": "direct", **kwargs})


def test_gpus_give_one_slot_each_and_virtual_nodes_split_them(tmp_path: Path) -> None:
    backend = LocalBackend(nodes="2x2", gpus=["0", "1", "2", "3"], run_dir=tmp_path,
                           launcher="direct")
    assert [(n.name, n.gpus) for n in backend.nodes()] == [("local-0", 2), ("local-1", 2)]
    assert LocalBackend(gpus=["0", "1", "2"], run_dir=tmp_path, launcher="direct").slots == 3


@pytest.mark.parametrize("launcher", ["direct", "fork"])
@pytest.mark.parametrize(("gpus", "seen"), [([], ["", ""]), (["5", "7"], ["5", "7"])])
def test_each_rank_sees_its_own_gpu_and_cpu_slots_see_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, launcher: str, gpus: list[str],
        seen: list[str]) -> None:
    # The service's own environment shows GPUs: on CPU slots the ranks must not all open
    # GPU 0 (NCCL refuses two ranks on one GPU); on GPU slots each rank sees its own.
    # (One write a line: the ranks share the log.)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    command = write_script(tmp_path, "devices.py",
                           "import os\nos.write(1, f\"rank {os.environ['RANK']} sees "
                           "{os.environ['CUDA_VISIBLE_DEVICES']!r}\\n\".encode())\n")
    backend = LocalBackend(slots=2, run_dir=tmp_path / "runs", commands={"env": command},
                           launcher=launcher, gpus=gpus, preload=())
    try:
        backend.start(Job("env", 2, 2), (("local", 2),))
        wait_for_events(backend, lambda ev: any(e.kind is EventKind.JOB_COMPLETED
                                                or e.kind is EventKind.JOB_FAILED
                                                for e in ev))
    finally:
        backend.close()
    log = backend.log_path("env").read_text()
    for rank, device in enumerate(seen):
        assert f"rank {rank} sees {device!r}" in log, log


def test_the_demo_runs_on_cpu_slots_where_fewer_gpus_than_slots_are_visible() -> None:
    assert too_few_gpus(4, []) == ""  # no GPU: CPU slots anyway, nothing to say
    assert too_few_gpus(4, ["0", "1", "2", "3"]) == ""
    assert too_few_gpus(4, ["0"]) == "1 GPU(s) visible, fewer than 4 slots"


def test_a_spec_without_a_command_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nmin: 2\nmax: 1\n")
    with pytest.raises(SpecError, match="command: required"):
        load_job_spec(path)
    path.write_text("name: x\ncommand: python t.py\nmin: 2\nmax: 1\n")
    with pytest.raises(SpecError, match="max: must be at least min"):
        load_job_spec(path)


# ----- voda.training.report -----------------------------------------------------------
def test_report_appends_json_lines_from_rank_0_only(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    channel = tmp_path / "reports.jsonl"
    monkeypatch.setenv("VODA_REPORT", str(channel))
    monkeypatch.setenv("RANK", "1")
    assert voda.training.report.epoch(1, 2.5, 4) is False
    monkeypatch.setenv("RANK", "0")
    assert voda.training.report.epoch(1, 2.5, 4) is True
    assert voda.training.report.epoch(2, 2.0, 4) is True
    lines = read_jsonl(channel)
    assert [(r["epoch"], r["epoch_seconds"], r["workers"]) for r in lines] == [
        (1, 2.5, 4), (2, 2.0, 4)]
    assert "samples_per_second" not in lines[0]
    assert voda.training.report.epoch(3, 2.0, 4, samples=1000) is True
    assert read_jsonl(channel)[-1]["samples_per_second"] == 500.0


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, str, dict]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append((self.path, self.headers.get("Authorization", ""), body))
        self.send_response(204 if self.path.endswith("/metrics") else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_collector() -> Iterator[str]:
    _Collector.received = []
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_report_posts_to_the_service_with_the_token(http_collector: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VODA_REPORT", http_collector)
    monkeypatch.setenv("VODA_JOB", "alpha")
    monkeypatch.setenv("VODA_TOKEN", "tok1")
    monkeypatch.delenv("RANK", raising=False)
    assert voda.training.report.epoch(3, 1.5, 2) is True
    assert _Collector.received == [
        ("/v1/jobs/alpha/metrics", "Bearer tok1", {"epoch": 3, "epoch_seconds": 1.5,
                                                  "workers": 2})]


def test_a_failed_report_returns_false_and_never_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("VODA_JOB", "alpha")
    monkeypatch.setenv("VODA_REPORT", "http://127.0.0.1:9/")  # discard port: refused
    assert voda.training.report.epoch(1, 1.0, 1) is False
    monkeypatch.setenv("VODA_REPORT", str(tmp_path / "missing-dir" / "r.jsonl"))
    assert voda.training.report.epoch(1, 1.0, 1) is False
    assert "could not report epoch 1" in capsys.readouterr().err


def test_under_torchrun_the_failed_worker_exit_code_is_reported(
    tmp_path: Path, clock: Callable[[], float]
) -> None:
    command = write_script(tmp_path, "fails.py",
                           "import os, sys\n"
                           # one write() per line, so the two ranks' lines cannot interleave
                           "os.write(1, f\"rank {os.environ['RANK']} failing\\n\".encode())\n"
                           "sys.exit(3)\n")
    backend = LocalBackend(slots=2, run_dir=tmp_path / "runs", clock=clock,
                           commands={"tr": command}, launcher="torchrun")
    try:
        backend.start(Job("tr", 1, 2), (("local", 2),))
        events = wait_for_events(backend, lambda ev: any(
            e.kind is EventKind.JOB_FAILED for e in ev), timeout=60)
    finally:
        backend.close()
    failed = next(e for e in events if e.kind is EventKind.JOB_FAILED)
    assert failed.data["exit_code"] == 3  # torchrun itself exits 1
    # The failed rank's own output is in the job's log. Which rank fails first is the
    # machine's to say: torchrun stops the other one, which may not have written yet.
    log = backend.log_path("tr").read_text()
    assert "rank 0 failing" in log or "rank 1 failing" in log, log


def test_the_service_settings_or_environment_configure_the_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VODA_SLOTS", "4")
    monkeypatch.setenv("VODA_NODES", "2x2")
    monkeypatch.setenv("VODA_RUN_DIR", str(tmp_path / "env-runs"))
    backend = from_settings(object())
    try:
        assert [(n.name, n.gpus) for n in backend.nodes()] == [("local-0", 2), ("local-1", 2)]
        assert backend.run_dir == tmp_path / "env-runs" and backend.name == "local"
    finally:
        backend.close()

    monkeypatch.delenv("VODA_NODES")

    class Settings:
        slots = 3
        nodes = ""
        run_dir = str(tmp_path / "settings-runs")

    backend = from_settings(Settings())
    try:
        assert [(n.name, n.gpus) for n in backend.nodes()] == [("local", 3)]
    finally:
        backend.close()
    monkeypatch.setenv("VODA_SLOTS", "four")
    with pytest.raises(ValueError, match=r"^slots:"):
        from_settings(object())


SLOW_STOPPER = (
    "import json, os, signal, sys, time\n"
    "out = os.path.join(os.environ['VODA_CHECKPOINT_DIR'], 'launches.jsonl')\n"
    "def note(what):\n"
    "    with open(out, 'a') as f:\n"
    "        f.write(json.dumps({'what': what, 'time': time.time(),\n"
    "                            'rank': os.environ['RANK'],\n"
    "                            'world': os.environ['WORLD_SIZE'],\n"
    "                            'placement': os.environ['VODA_PLACEMENT']}) + '\\n')\n"
    "def stop(*_):\n"
    "    time.sleep(0.5)  # checkpointing takes a while\n"
    "    note('stopped')\n"
    "    sys.exit(75)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "note('started')\n"
    "time.sleep(60)\n"
)


def test_a_launch_waits_for_slots_being_freed_and_a_migration_restarts_in_place(
    tmp_path: Path, clock: Callable[[], float]
) -> None:
    command = write_script(tmp_path, "slow_stopper.py", SLOW_STOPPER)
    backend = LocalBackend(nodes="2x2", run_dir=tmp_path / "runs", clock=clock,
                           commands={"a": command, "b": command}, launcher="fork", preload=())
    a, b = Job("a", 1, 4), Job("b", 1, 2)

    def notes(job: str) -> list[dict]:
        path = backend.checkpoint_dir(job) / "launches.jsonl"
        return read_jsonl(path) if path.exists() else []

    def wait_until(condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 90
        while not condition():
            assert time.monotonic() < deadline, backend.log_path("a").read_text()
            time.sleep(0.05)

    try:
        backend.start(a, (("local-0", 2), ("local-1", 2)))
        wait_until(lambda: len(notes("a")) == 4)
        # Plan order: a scales in, then b starts on the slots a gives up.
        backend.scale(a, (("local-0", 2),))
        backend.start(b, (("local-1", 2),))
        wait_until(lambda: len(notes("b")) == 2 and len(notes("a")) == 10)
        a_stopped = max(n["time"] for n in notes("a") if n["what"] == "stopped")
        b_started = min(n["time"] for n in notes("b"))
        assert b_started >= a_stopped, "b started before a had released its slots"
        assert {n["world"] for n in notes("a")[-2:]} == {"2"}
        # Same size, other node: a migration is a stop and a launch with the new placement.
        backend.halt(b)
        wait_until(lambda: backend.running().keys() == {"a"} and backend.world_size("b") == 0)
        backend.scale(a, (("local-1", 2),))
        wait_until(lambda: len(notes("a")) == 14)
        assert {n["placement"] for n in notes("a")[-2:]} == {"local-1:2"}
        assert backend.launches("a") == 3
    finally:
        backend.close()
    assert backend.events() == []  # stops asked for: no completion, no failure


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(["python", "train.py", "--epochs", "2"], ["train.py", "--epochs", "2"],
                     id="a python script is forked"),
        pytest.param(["python3", "-u", "-m", "pkg.train"], ["-m", "pkg.train"],
                     id="a module, after harmless options, is forked"),
        pytest.param(["python", "-c", "print(1)"], None, id="inline code runs directly"),
        pytest.param(["python", "-X", "dev", "t.py"], None, id="other options run directly"),
        pytest.param(["./train.sh"], None, id="a program that is not python runs directly"),
    ],
)
def test_which_commands_the_fork_launcher_runs(argv: list[str],
                                               expected: list[str] | None) -> None:
    assert forkable(argv) == expected
