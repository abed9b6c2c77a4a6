"""`LocalBackend`: the Backend protocol over local process groups (see the package docstring).

The public methods only record what the scheduler wants and wake the monitor thread;
the monitor's `_tick` reads reports, reaps exits, stops what must stop and launches
what may launch, all under one lock.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from voda.backends.local.launch import (
    LAUNCHERS,
    environment,
    popen,
    python_argv,
    rank_environments,
    start_direct,
    start_forked,
    torchrun_argv,
)
from voda.backends.local.nodes import (
    Slot,
    assign_slots,
    detect_gpus,
    make_nodes,
    map_slots_to_gpus,
)
from voda.backends.local.outcome import Completed, Stopped, judge_exit
from voda.backends.local.paths import (
    CHECKPOINT_DIR,
    EXAMPLE_TRAIN_SCRIPT,
    LAUNCHER_LOG,
    LOG_FILE,
    STATE_FILE,
    default_run_dir,
    job_dir,
    open_private,
    private_dir,
    read_tail,
)
from voda.backends.local.process import Process, describe_exit, signal_groups
from voda.backends.local.run import (
    Run,
    adopt_run,
    close_log,
    new_reports,
    remove_state,
    write_log,
    write_state,
)
from voda.backends.local.zygote import FORK_PRELOAD, ZYGOTE_START_TIMEOUT, Zygote, forkable
from voda.core.model import Job, JobPlacement, Node
from voda.engine.events import Event, EventKind

MAX_LAUNCHER_FAILURES = 3
MAX_REFUSAL_CHARS = 2_000  # of a refused report's reasons, in the job's log

CommandSource = Callable[[Job], "str | Sequence[str] | None"]


class LocalBackend:
    """Runs jobs as local process groups; see the docstring of `voda.backends.local`.

    `commands` maps a job name to its command line; a job without one runs
    `command_of(job)` or else `default_command` (the example training script).
    """

    name = "local"

    def __init__(
        self,
        slots: int | None = None,
        nodes: str | int | None = None,
        run_dir: Path | str | None = None,
        *,
        launcher: str | None = None,
        python: str = sys.executable,
        commands: Mapping[str, str | Sequence[str]] | None = None,
        command_of: CommandSource | None = None,
        default_command: str | Sequence[str] | None = None,
        report_url: str | None = None,
        report_token: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        stop_timeout: float = 20.0,
        poll_interval: float = 0.1,
        gpus: Sequence[str] | None = None,
        preload: Sequence[str] = FORK_PRELOAD,
        clock: Callable[[], float] = time.time,
        adopt: bool = True,
    ) -> None:
        if launcher is not None and launcher not in LAUNCHERS:
            raise ValueError(f"launcher: expected one of {', '.join(LAUNCHERS)}, got {launcher!r}")
        if stop_timeout <= 0:
            raise ValueError(f"stop_timeout: must be positive, got {stop_timeout}")
        self._gpus = list(detect_gpus() if gpus is None else gpus)
        if launcher is None:  # see docs/design/005-local-backend.md, "Why a warm fork launcher"
            launcher = "direct" if self._gpus else "fork"
        self._nodes = make_nodes(slots, nodes, self._gpus)
        self.slots = sum(n.gpus for n in self._nodes)
        self.run_dir = Path(run_dir) if run_dir is not None else default_run_dir()
        self.launcher = launcher
        self.preload = tuple(preload)
        self.python = python
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()
        self.stop_timeout = stop_timeout
        self.poll_interval = poll_interval
        self.report_url = report_url
        self.report_token = report_token
        self.extra_env = dict(extra_env or {})
        self.commands: dict[str, str | Sequence[str]] = dict(commands or {})
        self._command_of = command_of
        if default_command is None and EXAMPLE_TRAIN_SCRIPT.exists():
            default_command = ["python", str(EXAMPLE_TRAIN_SCRIPT)]
        self._default_command = default_command
        self._clock = clock
        self._runs: dict[str, Run] = {}
        self._events: list[Event] = []
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._slot_gpu = map_slots_to_gpus(self._nodes, self._gpus)
        private_dir(self.run_dir)
        self._zygote: Zygote | None = None
        self._zygote_failures = 0
        if self.launcher == "fork":
            self._zygote = self._start_zygote()  # warms up while nothing runs yet
        if adopt:
            self._adopt_left_running()

    # ----- Backend protocol -------------------------------------------------------
    def start(self, job: Job, placement: JobPlacement) -> None:
        self._want(job, placement)

    def scale(self, job: Job, placement: JobPlacement) -> None:
        self._want(job, placement)

    def halt(self, job: Job) -> None:
        with self._lock:
            run = self._runs.get(job.name)
            if run is None:
                return
            run.job = job
            run.desired, run.desired_slots = (), ()
            self._tick()
        self._wake.set()

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def events(self) -> list[Event]:
        with self._lock:
            if self._thread is None:
                self._tick()
            out, self._events = self._events, []
        return out

    # ----- nodes changed at run time -----------------------------------------
    def add_node(self, node: Node) -> None:
        """More slots on this machine, as a (virtual) node; on GPUs, only GPUs still free."""
        with self._lock:
            if any(n.name == node.name for n in self._nodes):
                raise ValueError(f"name: node {node.name!r} exists")
            mapped = set(self._slot_gpu.values())
            free = [g for g in self._gpus if g not in mapped]
            if self._gpus and node.gpus > len(free):
                raise ValueError(f"gpus: {node.gpus} asked, {len(free)} GPUs of this machine "
                                 "are not in a node")
            self._nodes.append(node)
            self.slots += node.gpus
            for i, gpu in zip(range(node.gpus), free, strict=False):
                self._slot_gpu[(node.name, i)] = gpu

    def remove_node(self, name: str) -> None:
        """Forget a node; jobs with workers on it (none after a drain) are stopped."""
        with self._lock:
            for run in self._runs.values():
                if any(node == name for node, _ in run.desired):
                    run.desired, run.desired_slots = (), ()
            removed = [n for n in self._nodes if n.name == name]
            self._nodes = [n for n in self._nodes if n.name != name]
            self.slots -= sum(n.gpus for n in removed)
            self._slot_gpu = {s: g for s, g in self._slot_gpu.items() if s[0] != name}
            self._tick()
        self._wake.set()

    # ----- optional capabilities ----------------------------------------------
    def delete(self, job: str) -> None:
        """Stop the job and remove its checkpoint (its log stays); no event follows."""
        with self._lock:
            run = self._runs.get(job)
            if run is None:
                with contextlib.suppress(ValueError):
                    shutil.rmtree(job_dir(self.run_dir, job) / CHECKPOINT_DIR, ignore_errors=True)
                return
            run.deleting = True
            run.desired, run.desired_slots = (), ()
            self._tick()
        self._wake.set()

    def running(self) -> dict[str, JobPlacement]:
        """Jobs with processes running now (or about to run), with their placement."""
        with self._lock:
            return {
                name: run.desired or run.launched
                for name, run in self._runs.items()
                if not run.finished and not run.deleting and (run.desired or run.live)
            }

    # ----- extras -------------------------------------------------------------
    def set_command(self, job: str, command: str | Sequence[str]) -> None:
        """The command line of `job` (e.g. 'python train.py --epochs 6'), before it starts."""
        with self._lock:
            self.commands[job] = command

    def log_path(self, job: str) -> Path:
        return job_dir(self.run_dir, job) / LOG_FILE

    def checkpoint_dir(self, job: str) -> Path:
        return job_dir(self.run_dir, job) / CHECKPOINT_DIR

    def launches(self, job: str) -> int:
        """How many times the job's processes were launched by this backend."""
        with self._lock:
            run = self._runs.get(job)
            return run.launches if run else 0

    def world_size(self, job: str) -> int:
        """Ranks running now (0 when none)."""
        with self._lock:
            run = self._runs.get(job)
            return sum(c for _, c in run.launched) if run and run.live else 0

    def wait_ready(self, timeout: float = ZYGOTE_START_TIMEOUT) -> bool:
        """Wait until a launch would start at once (the fork launcher has warmed up)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            zygote = self._zygote
            if self.launcher != "fork" or (zygote is not None and zygote.ready):
                return True
            if zygote is None or not zygote.alive():
                return False
            time.sleep(0.05)
        return False

    def idle(self) -> bool:
        """No process runs and none is waiting to run."""
        with self._lock:
            return not any(run.live or run.desired for run in self._runs.values())

    def close(self, timeout: float | None = None) -> None:
        """Stop every job gracefully (they keep their checkpoints) and the monitor thread."""
        timeout = self.stop_timeout if timeout is None else timeout
        with self._lock:
            for run in self._runs.values():
                run.desired, run.desired_slots = (), ()
            self._tick()
        deadline = time.monotonic() + timeout + 5
        while time.monotonic() < deadline:
            with self._lock:
                self._tick()
                if not any(run.live for run in self._runs.values()):
                    break
            time.sleep(self.poll_interval)
        with self._lock:
            for run in self._runs.values():
                if run.live:
                    self._signal(run, signal.SIGKILL)
                close_log(run)
            self._closed = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None

    def detach(self) -> None:
        """Stop watching, leaving the jobs running: a later backend on this run dir adopts them."""
        with self._lock:
            self._closed = True
            for run in self._runs.values():
                close_log(run)
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self._zygote is not None:
            self._zygote.close()  # the ranks it forked live on
            self._zygote = None

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- desired state ------------------------------------------------------
    def _want(self, job: Job, placement: JobPlacement) -> None:
        with self._lock:
            run = self._runs.get(job.name)
            if run is None or run.finished:
                try:
                    directory = job_dir(self.run_dir, job.name)
                except ValueError as exc:
                    self._emit_failure(job.name, None, str(exc))
                    return
                run = Run(job.name, job, directory)
                self._runs[job.name] = run
                self._skip_old_reports(run)
            run.job = job
            run.deleting = False
            run.desired = tuple((n, c) for n, c in placement if c > 0)
            run.desired_slots = self._assign_slots(run, run.desired)
            self._ensure_thread()
        self._wake.set()  # the monitor thread stops and launches

    def _assign_slots(self, run: Run, placement: JobPlacement) -> tuple[Slot, ...]:
        taken = {s for other in self._runs.values() if other is not run
                 for s in other.desired_slots}
        held = set(run.desired_slots) | set(run.launched_slots if run.live else ())
        return assign_slots(run.name, placement, self._nodes, taken, held)

    # ----- the monitor --------------------------------------------------------
    def _ensure_thread(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._monitor, name="voda-local-backend",
                                            daemon=True)
            self._thread.start()

    def _monitor(self) -> None:
        while True:
            self._wake.wait(self.poll_interval)
            self._wake.clear()
            with self._lock:
                if self._closed:
                    return
                self._tick()

    def _tick(self) -> None:
        """One pass: read reports, reap exits, stop what must stop, launch what may launch."""
        now = time.monotonic()
        for run in list(self._runs.values()):
            self._read_reports(run)
            if run.live:
                self._check_processes(run, now)
        for run in list(self._runs.values()):
            self._converge(run, now)

    def _check_processes(self, run: Run, now: float) -> None:
        codes = [p.poll() for p in run.procs]
        bad = [c for c in codes if c not in (None, 0)]
        if None not in codes:
            self._exited(run, codes)
            return
        if bad and not run.stopping and run.crash_code is None:
            # A rank died: the others would wait for it forever. Stop them.
            run.crash_code = bad[0]
            self._begin_stop(run, now, timeout=min(self.stop_timeout, 5.0))
        elif 0 in codes and not run.stopping and run.crash_code is None:
            if run.partial_exit_since is None:
                run.partial_exit_since = now
            elif now - run.partial_exit_since > self.stop_timeout:
                # Some ranks finished and the others hang: stop them; the job restarts from
                # its checkpoint (and, if it had finished, completes at once).
                write_log(run, "some ranks exited and the others did not: stopping them")
                self._begin_stop(run, now, timeout=1.0)
        if (run.stopping or run.crash_code is not None) and not run.killed and (
            now >= run.stop_deadline
        ):
            self._signal(run, signal.SIGKILL)
            run.killed = True

    def _exited(self, run: Run, codes: list[int | None]) -> None:
        requested = run.stopping
        self._release(run)
        self._read_reports(run)
        outcome = judge_exit([int(c) for c in codes if c is not None], requested=requested,
                             crash_code=run.crash_code, last_epoch=run.last_epoch,
                             epochs=run.job.epochs)
        if isinstance(outcome, Completed):
            self._complete(run)
        elif isinstance(outcome, Stopped):
            write_log(run, f"stopped ({outcome.how})")
        elif outcome.rank_exit:
            self._fail(run, self._worker_exit_code(run, outcome.code))
        else:
            self._fail(run, outcome.code, outcome.reason)
        if run.deleting:
            shutil.rmtree(run.dir / CHECKPOINT_DIR, ignore_errors=True)
            self._runs.pop(run.name, None)

    def _worker_exit_code(self, run: Run, code: int) -> int:
        """torchrun exits 1 when a worker fails; the worker's own code is in its summary."""
        if self.launcher != "torchrun" or code != 1:
            return code
        found = re.findall(r"exitcode\s*:\s*(-?\d+)", read_tail(run.dir / LOG_FILE, 80, 16000))
        return int(found[-1]) if found else code

    def _converge(self, run: Run, now: float) -> None:
        if run.deleting and not run.live:
            shutil.rmtree(run.dir / CHECKPOINT_DIR, ignore_errors=True)
            close_log(run)
            self._runs.pop(run.name, None)
            return
        if run.finished:
            return
        if run.live:
            if not run.stopping and run.crash_code is None and (
                run.launched_slots != run.desired_slots or run.launched != run.desired
            ):
                self._begin_stop(run, now, timeout=self.stop_timeout)
            return
        if not run.desired:
            return
        busy = {s for other in self._runs.values() if other.live for s in other.launched_slots}
        if busy.isdisjoint(run.desired_slots) and self._launcher_ready(run.job):
            self._launch(run)

    def _launcher_ready(self, job: Job) -> bool:
        """False while the fork launcher warms up (never wait for it holding the lock)."""
        argv = self._command(job)
        if self.launcher != "fork" or not argv or forkable(argv) is None:
            return True
        if self._zygote is not None and self._zygote.alive():
            return self._zygote.ready
        if self._zygote is not None:
            self._zygote.close()
            self._zygote_failures += 1
        if self._zygote_failures >= MAX_LAUNCHER_FAILURES:
            self.launcher = "direct"
            write_log(self._runs[job.name], "the fork launcher keeps failing (see "
                      f"{self.run_dir / LAUNCHER_LOG}); launching directly instead")
            return True
        self._zygote = self._start_zygote()
        return False

    # ----- processes ----------------------------------------------------------
    def _command(self, job: Job) -> list[str] | None:
        command: str | Sequence[str] | None = self.commands.get(job.name)
        if command is None and self._command_of is not None:
            command = self._command_of(job)
        if command is None:
            command = self._default_command
        if command is None:
            return None
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        return argv or None

    def _launch(self, run: Run) -> None:
        job = run.job
        argv = self._command(job)
        if argv is None:
            self._fail(run, None, f"job {job.name!r}: no command to run (set one with the spec's "
                       "'command' field)")
            return
        world = sum(c for _, c in run.desired)
        private_dir(run.dir)
        private_dir(run.dir / CHECKPOINT_DIR)
        if run.log is None:
            run.log = open_private(run.dir / LOG_FILE)  # kept open
        where = ", ".join(f"{n}:{c}" for n, c in run.desired)
        write_log(run, f"launch {run.launches + 1}: {world} worker(s) on {where} "
                  f"({self.launcher})")
        try:
            started = self._start_ranks(run, argv, world, run.log)
        except OSError as exc:
            self._fail(run, None, f"could not start {argv[0]!r}: {exc}")
            return
        if started is None:
            return
        run.procs, run.pgids = started
        run.launched, run.launched_slots = run.desired, run.desired_slots
        run.launched_at = time.monotonic()
        run.launches += 1
        run.stopping = run.killed = False
        run.crash_code = run.partial_exit_since = None
        write_state(run)

    def _start_ranks(self, run: Run, argv: list[str], world: int,
                     log: IO[bytes]) -> tuple[list[Process], list[int]] | None:
        """The ranks' processes and the process groups to signal, as this backend's launcher
        starts them (output to `log`); None when the fork launcher failed: the launch is
        retried on a later pass, with a new launcher."""
        env = self._environment(run, world)
        gpus = [self._slot_gpu[s] for s in run.desired_slots if s in self._slot_gpu]
        if self.launcher == "torchrun":
            if gpus:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
            agent = popen(torchrun_argv(self.python, argv, world), env, self.cwd, log, None)
            return [agent], [agent.pid]
        if self.launcher == "fork" and (python_args := forkable(argv)) is not None:
            try:
                procs = start_forked(self._zygote, python_args,
                                     rank_environments(env, world, gpus), self.cwd,
                                     run.dir / LOG_FILE)
            except OSError as exc:  # the launcher's fault, not the job's: try again
                write_log(run, f"the fork launcher failed ({exc}); retrying")
                if self._zygote is not None:
                    self._zygote.proc.kill()
                return None
            return procs, [p.pid for p in procs]  # each forked rank leads its own group
        procs = start_direct(python_argv(self.python, argv), rank_environments(env, world, gpus),
                             self.cwd, log)
        return procs, [procs[0].pid]  # all ranks joined the first one's group

    def _start_zygote(self) -> Zygote:
        env = self._environment(None, 0)
        env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # is_available() without cuInit
        return Zygote(self.python, self.preload, env, self.run_dir / LAUNCHER_LOG)

    def _environment(self, run: Run | None, world: int) -> dict[str, str]:
        env = environment(self.extra_env, self.report_token, run, world, self.report_url)
        if not self._gpus:  # CPU slots: ranks must not all open GPU 0 (NCCL refuses that)
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def _begin_stop(self, run: Run, now: float, timeout: float) -> None:
        run.stopping = True
        run.stop_deadline = now + timeout
        self._signal(run, signal.SIGTERM)

    def _signal(self, run: Run, sig: signal.Signals) -> None:
        signal_groups(run.pgids, sig)

    def _release(self, run: Run) -> None:
        run.procs = []
        run.pgids = []
        run.launched, run.launched_slots = (), ()
        run.stopping = False
        run.partial_exit_since = None
        remove_state(run)

    # ----- outcomes -----------------------------------------------------------
    def _complete(self, run: Run) -> None:
        run.finished = True
        run.desired, run.desired_slots = (), ()
        write_log(run, "completed")
        close_log(run)
        if not run.deleting:
            self._events.append(Event(EventKind.JOB_COMPLETED, self._clock(), job=run.name))

    def _fail(self, run: Run, code: int | None, reason: str | None = None) -> None:
        run.finished = True
        run.desired, run.desired_slots = (), ()
        what = reason or describe_exit(code if code is not None else 1)
        write_log(run, f"failed: {what}")
        close_log(run)
        if not run.deleting:
            self._emit_failure(run.name, code, what, read_tail(run.dir / LOG_FILE))

    def _emit_failure(self, job: str, code: int | None, what: str, tail: str = "") -> None:
        reason = f"{what}; log tail:\n{tail}" if tail else what
        self._events.append(Event(EventKind.JOB_FAILED, self._clock(), job=job, data={
            "exit_code": code, "reason": reason, "log_tail": tail}))

    # ----- reports ------------------------------------------------------------
    def _skip_old_reports(self, run: Run) -> None:
        """A job resumed from an earlier run dir: old lines are history, not news."""
        for record in new_reports(run):
            run.last_epoch = max(run.last_epoch, int(record.get("epoch", 0)))

    def _read_reports(self, run: Run) -> None:
        goodput: list[object] = []
        for record in new_reports(run):
            if "goodput" in record:
                goodput.append(record["goodput"])
                continue
            try:
                epoch = int(record["epoch"])
                seconds = float(record["epoch_seconds"])
                workers = int(record["workers"])
            except (KeyError, TypeError, ValueError):
                continue
            run.last_epoch = max(run.last_epoch, epoch)
            data: dict[str, float] = {"epoch": epoch, "epoch_seconds": seconds, "workers": workers}
            throughput = record.get("samples_per_second")
            if isinstance(throughput, int | float) and throughput > 0:
                data["samples_per_second"] = float(throughput)
            self._events.append(Event(EventKind.EPOCH_REPORTED, self._clock(), job=run.name,
                                      data=data))
        if goodput:
            self._goodput_reported(run, goodput)

    def _goodput_reported(self, run: Run, lines: list[object]) -> None:
        """Goodput reports from the job's report file: checked as the service checks a
        POSTed one, refusals to the job's log naming the fields, and the newest good one
        fitted (a fit takes milliseconds: one per read of the file, however many lines a
        job writes)."""
        # Here, not at the top: `voda logs` imports this package and must not pay for SciPy.
        from voda.blas import serial_blas
        from voda.core.goodput_report import (
            GoodputReport,
            ReportRefused,
            model_of,
            problems,
            report_from_values,
        )

        newest: GoodputReport | None = None
        for values in lines:
            try:
                report = report_from_values(values, run.job.max_workers)
                found = problems(report, run.job.max_workers)
                if found:
                    raise ReportRefused(found)
                newest = report
            except ReportRefused as refused:
                write_log(run, f"goodput report refused: {str(refused)[:MAX_REFUSAL_CHARS]}")
        if newest is None:
            return
        try:
            with serial_blas():
                model = model_of(newest, run.job.max_workers)
        except ReportRefused as refused:
            write_log(run, f"goodput report refused: {str(refused)[:MAX_REFUSAL_CHARS]}")
            return
        except Exception as exc:  # a report line must never stop the monitor
            write_log(run, f"goodput report not fitted: {type(exc).__name__}: "
                      f"{str(exc)[:MAX_REFUSAL_CHARS]}")
            return
        self._events.append(Event(EventKind.GOODPUT_REPORTED, self._clock(), job=run.name,
                                  data={"goodput": model}))

    # ----- adoption -----------------------------------------------------------
    def _adopt_left_running(self) -> None:
        """Take over process groups an earlier backend left running in this run dir."""
        known = {n.name for n in self._nodes}
        for state_path in sorted(self.run_dir.glob(f"*/{STATE_FILE}")):
            run = adopt_run(state_path, known)
            if run is None:
                continue
            self._skip_old_reports(run)
            self._runs[run.name] = run
        if self._runs:
            self._ensure_thread()
