"""The local demonstration: real elastic training jobs scheduled on this machine.

`run_local_demo` submits the example jobs of `examples/local/` one after the
other, prints a line when a job starts, is scaled up or down, completes or
fails, and returns each job's JCT and number of rescales. When `voda serve`
offers the local backend, the demo starts it on a free port with a throw-away
SQLite store and submits the jobs over HTTP; otherwise it drives the
ElasticFIFO scheduler and a LocalBackend in this process. Either way the jobs
are real processes with real checkpoints.

    python -m voda.cli.demo_local [--slots 4] [--nodes 2x2] [--in-process]
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from voda.backends.local import LocalBackend, detect_gpus, free_port, read_tail
from voda.core.model import ActionKind, Job, JobStatus, Plan, validate_job
from voda.engine.scheduler import JobRecord, Scheduler, SchedulerObserver, SchedulerSettings

PROJECT_ROOT = Path(__file__).resolve().parents[2]
STEP_SECONDS = 0.25


@dataclass(frozen=True)
class LocalJobSpec:
    """What the demo needs of a compact job spec: the job and its command line."""

    job: Job
    command: str
    path: Path


class SpecError(ValueError):
    pass


def load_job_spec(path: Path) -> LocalJobSpec:
    """Read one compact spec (name, command, min, max, epochs, ...); errors name the field."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"{path}: cannot read the spec: {exc}") from None
    if not isinstance(document, dict):
        raise SpecError(f"{path}: expected a mapping of fields")
    for field_name in ("name", "command"):
        if not isinstance(document.get(field_name), str) or not document[field_name].strip():
            raise SpecError(f"{path}: {field_name}: required, a non-empty string")
    values: dict[str, int] = {}
    for field_name, default in (("min", 1), ("max", None), ("epochs", 1), ("priority", 0)):
        value = document.get(field_name, default if default is not None else document.get("min", 1))
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{path}: {field_name}: must be an integer, got {value!r}")
        values[field_name] = value
    job = Job(
        name=document["name"].strip(),
        min_workers=values["min"],
        max_workers=values["max"],
        epochs=values["epochs"],
        priority=values["priority"],
        category=str(document.get("category") or document["name"]),
    )
    problems = validate_job(job)
    if problems:
        raise SpecError(f"{path}: " + "; ".join(problems))
    return LocalJobSpec(job, document["command"].strip(), path)


def load_job_specs(jobs_dir: Path | str) -> list[LocalJobSpec]:
    directory = Path(jobs_dir)
    if not directory.is_absolute() and not directory.exists():
        directory = PROJECT_ROOT / directory
    paths = sorted(directory.glob("*.yaml"))
    if not paths:
        raise SpecError(f"jobs_dir: no *.yaml job specs in {directory}")
    return [load_job_spec(p) for p in paths]


class _Progress(SchedulerObserver):
    """Turns the scheduler's plans and status changes into one line each."""

    def __init__(self, say: Callable[[float, str], None]) -> None:
        self._say = say

    def on_plan(self, plan: Plan, now: float, seconds: float, allocation_seconds: float) -> None:
        for action in plan.actions:
            before, after = action.workers_before, action.workers_after
            if action.kind is ActionKind.START:
                self._say(now, f"{action.job}: started on {after} worker(s)")
            elif action.kind is ActionKind.SCALE_OUT:
                self._say(now, f"{action.job}: scaled up {before} -> {after}")
            elif action.kind is ActionKind.SCALE_IN:
                self._say(now, f"{action.job}: scaled down {before} -> {after}")
            elif action.kind is ActionKind.HALT:
                self._say(now, f"{action.job}: preempted (waits with its checkpoint)")
            else:
                self._say(now, f"{action.job}: migrated ({after} worker(s))")

    def on_status(self, record: JobRecord, old: JobStatus, new: JobStatus, now: float) -> None:
        if new is JobStatus.COMPLETED:
            self._say(now, f"{record.name}: completed {record.epochs} epochs "
                      f"(JCT {now - record.submit_time:.1f} s, {record.rescales} rescale(s))")
        elif new is JobStatus.FAILED:
            reason = (record.failure_reason or "").splitlines()[0:1]
            self._say(now, f"{record.name}: FAILED {''.join(reason)}")


def run_local_demo(
    console: Console,
    slots: int = 4,
    jobs_dir: str | Path = "examples/local",
    *,
    nodes: str | None = None,
    run_dir: str | Path | None = None,
    submit_interval: float = 2.0,
    timeout: float = 300.0,
    algorithm: str = "ElasticFIFO",
    use_service: bool | None = None,
) -> dict[str, dict[str, Any]]:
    """Run the example jobs on the local backend; returns {job: {jct, rescales, status, ...}}.

    `use_service`: None runs through `voda serve --backend local` when that backend exists.
    """
    specs = load_job_specs(jobs_dir)
    on_cpus = too_few_gpus(slots, detect_gpus())
    if on_cpus:
        console.print(f"{on_cpus}: the demo runs on {slots} CPU slots (gloo)", soft_wrap=True)
    if use_service is None:
        use_service = service_offers_local_backend()
    if use_service:
        return _run_through_service(console, specs, slots, nodes, submit_interval, timeout,
                                    algorithm, on_cpus=bool(on_cpus))
    started = time.monotonic()

    def clock() -> float:
        return time.monotonic() - started

    with tempfile.TemporaryDirectory(prefix="voda-demo-") as scratch:
        backend = LocalBackend(slots=slots, nodes=nodes, run_dir=run_dir or scratch,
                               cwd=PROJECT_ROOT, stop_timeout=15.0, clock=clock,
                               gpus=[] if on_cpus else None)
        try:
            return _drive(console, backend, specs, clock, algorithm, submit_interval, timeout)
        finally:
            backend.close()


def too_few_gpus(slots: int, gpus: list[str]) -> str:
    """Why the demo's slots cannot be this machine's GPUs ('' when they can, or when there
    are none): each slot is one GPU, and the example jobs need the demo's slots to run."""
    if gpus and len(gpus) < slots:
        return f"{len(gpus)} GPU(s) visible, fewer than {slots} slots"
    return ""


def _drive(console: Console, backend: LocalBackend, specs: list[LocalJobSpec],
           clock: Callable[[], float], algorithm: str, submit_interval: float,
           timeout: float) -> dict[str, dict[str, Any]]:
    def say(at: float, message: str) -> None:
        console.print(f"[dim]{at:6.1f}s[/dim]  {message}", soft_wrap=True)

    scheduler = Scheduler(backend, SchedulerSettings(algorithm=algorithm, rate_limit_seconds=0),
                          observers=[_Progress(say)])
    say(clock(), f"warming up the {backend.launcher} launcher (imports torch once)")
    if not backend.wait_ready():
        raise RuntimeError(f"the fork launcher did not start; see {backend.run_dir}/launcher.log")
    say(clock(), f"{backend.slots} slots on {len(backend.nodes())} node(s); "
        f"{len(specs)} jobs, one every {submit_interval:g} s; logs in {backend.run_dir}")
    pending = list(specs)
    next_submit = clock()
    while True:
        now = clock()
        if pending and now >= next_submit:
            spec = pending.pop(0)
            backend.set_command(spec.job.name, spec.command)
            scheduler.submit(Job(**{**_job_fields(spec.job), "submit_time": now}))
            say(now, f"{spec.job.name}: submitted ({spec.job.min_workers}-"
                f"{spec.job.max_workers} workers, {spec.job.epochs} epochs)")
            next_submit = now + submit_interval
        scheduler.step(now)
        if not pending and not scheduler.active:
            break
        if now > timeout:
            say(now, f"timeout after {timeout:g} s; stopping the jobs left")
            break
        time.sleep(STEP_SECONDS)
    return _summary(console, scheduler)


def _job_fields(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in job.__slots__}


def _summary(console: Console, scheduler: Scheduler) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for name, record in scheduler.jobs.items():
        jct = None if record.finish_time is None else record.finish_time - record.submit_time
        results[name] = {"status": str(record.status), "jct": jct, "rescales": record.rescales,
                         "epochs": record.completed_epochs,
                         "epoch_seconds": dict(record.epoch_time_by_workers)}
    _print_results(console, results)
    return results


def _print_results(console: Console, results: dict[str, dict[str, Any]]) -> None:
    for name, result in results.items():
        jct = "-" if result["jct"] is None else f"{result['jct']:.1f} s"
        speeds = ", ".join(f"{w}w {s:.2f}s" for w, s in sorted(result["epoch_seconds"].items()))
        console.print(f"{name:10} {result['status']:10} JCT {jct:>8}  "
                      f"rescales {result['rescales']}  epoch time: {speeds}", soft_wrap=True)


# ----- through `voda serve --backend local` ----------------------------------------------
def service_offers_local_backend() -> bool:
    try:
        from voda.api.backends import backend_names
    except ImportError:
        return False
    return "local" in backend_names()


def _run_through_service(console: Console, specs: list[LocalJobSpec], slots: int,
                         nodes: str | None, submit_interval: float, timeout: float,
                         algorithm: str, *, on_cpus: bool = False
                         ) -> dict[str, dict[str, Any]]:
    import httpx

    started = time.monotonic()

    def say(message: str) -> None:
        console.print(f"[dim]{time.monotonic() - started:6.1f}s[/dim]  {message}",
                      soft_wrap=True)

    with tempfile.TemporaryDirectory(prefix="voda-demo-") as scratch:
        port = free_port()
        token = secrets.token_urlsafe(24)  # the demo's administrator
        env = {**os.environ, "VODA_SLOTS": str(slots), "VODA_NODES": nodes or "",
               "VODA_RUN_DIR": str(Path(scratch) / "runs"), "VODA_TOKENS": f"demo:{token}:admin",
               "VODA_CONFIG": str(Path(scratch) / "config.toml")}
        if on_cpus:
            env["CUDA_VISIBLE_DEVICES"] = ""
        server_log = Path(scratch) / "serve.log"
        command = [sys.executable, "-m", "voda.cli.main", "serve", "--backend", "local",
                   "--host", "127.0.0.1", "--port", str(port), "--algorithm", algorithm,
                   "--db", f"sqlite:///{Path(scratch) / 'voda.db'}", "--rate-limit", "0",
                   "--step-interval", "0.25"]
        with open(server_log, "wb") as out:
            server = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=out,
                                      stderr=subprocess.STDOUT)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                              headers={"Authorization": f"Bearer {token}"}) as client:
                _wait_until_up(client, server, server_log)
                say(f"voda serve --backend local on port {port}: {slots} slots; "
                    f"{len(specs)} jobs, one every {submit_interval:g} s")
                return _submit_and_watch(client, specs, say, submit_interval, timeout, console)
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _wait_until_up(client: Any, server: subprocess.Popen[bytes], server_log: Path) -> None:
    import httpx

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"voda serve exited with code {server.returncode}:\n"
                               f"{read_tail(server_log)}")
        try:
            if client.get("/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"voda serve did not answer within 90 s:\n{read_tail(server_log)}")


def _submit_and_watch(client: Any, specs: list[LocalJobSpec], say: Callable[[str], None],
                      submit_interval: float, timeout: float,
                      console: Console) -> dict[str, dict[str, Any]]:
    pending = list(specs)
    names: dict[str, str] = {}  # uid -> spec name
    seen: dict[str, tuple[str, int]] = {}
    details: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    next_submit = 0.0
    while True:
        now = time.monotonic() - started
        if pending and now >= next_submit:
            spec = pending.pop(0)
            response = client.post("/v1/jobs", content=spec.path.read_bytes(),
                                   headers={"Content-Type": "application/yaml"})
            if response.status_code != 201:
                raise RuntimeError(f"{spec.path}: the service refused it: {response.text}")
            names[response.json()["uid"]] = spec.job.name
            say(f"{spec.job.name}: submitted ({spec.job.min_workers}-{spec.job.max_workers} "
                f"workers, {spec.job.epochs} epochs)")
            next_submit = now + submit_interval
        for name, short in names.items():
            if name in details and details[name]["status"] in _TERMINAL:
                continue
            detail = client.get(f"/v1/jobs/{name}").json()
            details[name] = detail
            state = (detail["status"], int(detail["workers"]))
            before = seen.get(name)
            if state != before:
                _say_change(say, short, before, state, detail)
                seen[name] = state
        if not pending and all(d["status"] in _TERMINAL for d in details.values()):
            break
        if now > timeout:
            say(f"timeout after {timeout:g} s")
            break
        time.sleep(STEP_SECONDS * 2)
    results: dict[str, dict[str, Any]] = {}
    for name, detail in details.items():
        finish = detail.get("finish_time")
        results[names[name]] = {
            "status": detail["status"], "rescales": detail["rescales"],
            "jct": None if finish is None else finish - detail["submit_time"],
            "epochs": detail["completed_epochs"],
            "epoch_seconds": {int(k): v for k, v in detail["epoch_time_by_workers"].items()},
        }
    _print_results(console, results)
    return results


_TERMINAL = {str(s) for s in JobStatus if s.is_terminal}


def _say_change(say: Callable[[str], None], name: str, before: tuple[str, int] | None,
                after: tuple[str, int], detail: dict[str, Any]) -> None:
    status, workers = after
    was_workers = before[1] if before else 0
    if status == str(JobStatus.COMPLETED):
        jct = detail["finish_time"] - detail["submit_time"]
        say(f"{name}: completed {detail['epochs']} epochs (JCT {jct:.1f} s, "
            f"{detail['rescales']} rescale(s))")
    elif status == str(JobStatus.FAILED):
        say(f"{name}: FAILED {(detail.get('failure_reason') or '').splitlines()[:1]}")
    elif workers and not was_workers:
        say(f"{name}: started on {workers} worker(s)")
    elif workers > was_workers:
        say(f"{name}: scaled up {was_workers} -> {workers}")
    elif workers and workers < was_workers:
        say(f"{name}: scaled down {was_workers} -> {workers}")
    elif was_workers and not workers:
        say(f"{name}: preempted (waits with its checkpoint)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Real elastic jobs scheduled on this machine.")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--nodes", default=None, help="virtual nodes, e.g. 2x2")
    parser.add_argument("--jobs-dir", default="examples/local")
    parser.add_argument("--submit-interval", type=float, default=2.0)
    parser.add_argument("--in-process", action="store_true",
                        help="drive the scheduler here instead of through voda serve")
    args = parser.parse_args(argv)
    try:
        results = run_local_demo(Console(), args.slots, args.jobs_dir, nodes=args.nodes,
                                 submit_interval=args.submit_interval,
                                 use_service=False if args.in_process else None)
    except (SpecError, ValueError, RuntimeError) as exc:
        print(f"voda demo: {exc}", file=sys.stderr)
        return 2
    return 0 if all(r["status"] == str(JobStatus.COMPLETED) for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
