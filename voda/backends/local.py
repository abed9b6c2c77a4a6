"""The local backend: real elastic training processes on this machine.

One slot per GPU (or, without GPUs, `os.cpu_count()` CPU slots) shown as one
node or as several virtual nodes (`nodes="2x2"`). A job placed on W slots runs
as W ranks of its command, with RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR /
MASTER_PORT set as torchrun sets them (a free port per launch), plus
VODA_JOB, VODA_CHECKPOINT_DIR, VODA_REPORT, VODA_EPOCHS,
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 and OMP_NUM_THREADS=1. Launchers:

- "fork" (default): a warm launcher process imports torch once and forks each
  rank of a Python command from itself, so a restart costs no interpreter or
  torch start-up (see docs/design/005-local-backend.md);
- "direct": one fresh `python` process per rank, in one process group;
- "torchrun": `python -m torch.distributed.run --standalone --nnodes=1
  --nproc-per-node=W`.

Actions:
- start: launch at the placement's size (resuming from the job's checkpoint
  when there is one);
- scale (rescale or migration): graceful stop - SIGTERM to the ranks' process
  groups, the job checkpoints and exits, SIGKILL after `stop_timeout` - then a
  launch at the new size, from the checkpoint;
- halt: graceful stop; delete: graceful stop, then the checkpoint is removed.

The calls return at once; a monitor thread carries them out, so a launch
waits until the slots it needs are released by the processes that held them
(frees before takes, as the plan orders them). The monitor also tails each
job's report file (see voda.report) into EPOCH_REPORTED events and turns exits
into JOB_COMPLETED (exit 0) or JOB_FAILED (a non-zero exit the backend did not
ask for, with the exit code and the log's last lines).

Per job, under `<run_dir>/<job>/`: `log.txt` (all ranks, appended across
restarts), `reports.jsonl`, `checkpoint/` and, while processes run,
`state.json` (process ids and placement), from which a new backend adopts
processes left running by a previous one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

import platformdirs

from voda.core.model import Job, JobPlacement, Node
from voda.engine.events import Event, EventKind
from voda.report import STOPPED_EXIT_CODE

EXAMPLE_TRAIN_SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "local" / "train.py"
LOG_FILE = "log.txt"
REPORT_FILE = "reports.jsonl"
STATE_FILE = "state.json"
CHECKPOINT_DIR = "checkpoint"
LOG_TAIL_LINES = 20
LOG_TAIL_CHARS = 4000
LAUNCHERS = ("fork", "direct", "torchrun")
# What the fork launcher imports once, so each rank starts without paying for it.
FORK_PRELOAD = ("torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo",
                "torch.optim", "voda.report")
ZYGOTE_START_TIMEOUT = 120.0
MAX_LAUNCHER_FAILURES = 3
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
PYTHON_NAMES = re.compile(r"^python(\d+(\.\d+)?)?$")
# Exit code given to ranks of an adopted process group, whose real status cannot be read.
UNKNOWN_EXIT = -1000

CommandSource = Callable[[Job], "str | Sequence[str] | None"]


def default_run_dir() -> Path:
    """VODA_RUN_DIR, else the user's state directory (…/voda/local)."""
    configured = os.environ.get("VODA_RUN_DIR")
    if configured:
        return Path(configured)
    return Path(platformdirs.user_state_dir("voda")) / "local"


def job_dir(run_dir: Path | str, job: str) -> Path:
    if not SAFE_NAME.match(job):
        raise ValueError(f"job name {job!r}: not usable as a directory name")
    return Path(run_dir) / job


def parse_nodes(spec: str | int | None, slots: int) -> list[Node]:
    """'2x2' -> two nodes of 2 slots; '4' or 4 -> four nodes of slots/4; None -> one node."""
    if spec is None or spec == "" or spec == 1 or spec == "1":
        return [Node("local", slots)]
    text = str(spec).strip().lower()
    match = re.fullmatch(r"(\d+)(?:x(\d+))?", text)
    if not match:
        raise ValueError(f"nodes: expected COUNT or COUNTxSLOTS such as '2x2', got {spec!r}")
    count = int(match.group(1))
    per_node = int(match.group(2)) if match.group(2) else (slots // count if count else 0)
    if count < 1 or per_node < 1:
        raise ValueError(f"nodes: need at least one node of at least one slot, got {spec!r}"
                         f" for {slots} slots")
    if match.group(2) is None and count * per_node != slots:
        raise ValueError(f"nodes: {slots} slots do not split evenly into {count} nodes")
    return [Node(f"local-{i}", per_node) for i in range(count)]


def detect_gpus() -> list[str]:
    """GPU ids usable here: CUDA_VISIBLE_DEVICES if set, else what nvidia-smi lists."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_tail(path: Path, lines: int = LOG_TAIL_LINES, chars: int = LOG_TAIL_CHARS) -> str:
    """The last `lines` lines of a text file (at most `chars` characters), '' if absent."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - chars))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def describe_exit(code: int) -> str:
    if code == UNKNOWN_EXIT:
        return "exited (status unknown: processes adopted from an earlier backend)"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _Process(Protocol):
    pid: int

    def poll(self) -> int | None: ...


class _AdoptedProcess:
    """A rank left running by an earlier backend: not our child, so only liveness is known."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._code: int | None = None

    def poll(self) -> int | None:
        if self._code is None and not _alive(self.pid):
            self._code = UNKNOWN_EXIT
        return self._code


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


class _Zygote:
    """A warm launcher: one process that imported torch once and forks each rank from itself.

    It speaks JSON lines over its stdin/stdout: a request {"id", "argv", "env", "cwd", "log"}
    is answered {"id", "pid"} (or {"id", "error"}); when a rank ends it writes
    {"exit": pid, "code": code}. Ranks run in process groups of their own and outlive it.
    """

    def __init__(self, python: str, preload: Sequence[str], env: Mapping[str, str],
                 stderr_path: Path) -> None:
        self._stderr = open(stderr_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [python, "-m", "voda.backends.local", "zygote", *preload],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env=dict(env), process_group=0, close_fds=True,
        )
        self._cond = threading.Condition()
        self._ready = False
        self._replies: dict[int, dict[str, object]] = {}
        self._exits: dict[int, int] = {}
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, name="voda-zygote-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            with self._cond:
                if message.get("ready"):
                    self._ready = True
                elif "exit" in message:
                    self._exits[int(message["exit"])] = int(message["code"])
                elif "id" in message:
                    self._replies[int(message["id"])] = message
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def ready(self) -> bool:
        with self._cond:
            return self._ready and self.alive()

    def spawn(self, argv: list[str], env: Mapping[str, str], cwd: Path, log: Path) -> _ForkedRank:
        with self._cond:
            if not self._cond.wait_for(lambda: self._ready or not self.alive(),
                                       ZYGOTE_START_TIMEOUT):
                raise OSError("the fork launcher did not become ready in time")
            if not self.alive():
                raise OSError(f"the fork launcher exited with code {self.proc.returncode}")
            self._next_id += 1
            request_id = self._next_id
        request = {"id": request_id, "argv": argv, "env": dict(env), "cwd": str(cwd),
                   "log": str(log)}
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise OSError(f"the fork launcher is gone: {exc}") from exc
        with self._cond:
            self._cond.wait_for(lambda: request_id in self._replies or not self.alive(), 30.0)
            reply = self._replies.pop(request_id, None)
        if reply is None:
            raise OSError("the fork launcher did not answer")
        if "error" in reply:
            raise OSError(str(reply["error"]))
        return _ForkedRank(int(reply["pid"]), self)  # type: ignore[call-overload]

    def exit_code(self, pid: int) -> int | None:
        with self._cond:
            if pid in self._exits:
                return self._exits[pid]
        if self.alive():
            return None
        return None if _alive(pid) else UNKNOWN_EXIT  # launcher gone: only liveness is known

    def close(self) -> None:
        if not self.ready:  # still importing: nothing of its own to finish
            self.proc.kill()
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            self._stderr.close()


class _ForkedRank:
    def __init__(self, pid: int, zygote: _Zygote) -> None:
        self.pid = pid
        self._zygote = zygote

    def poll(self) -> int | None:
        return self._zygote.exit_code(self.pid)


# Interpreter options that change nothing the fork launcher cares about.
_HARMLESS_FLAGS = frozenset({"-u", "-B", "-O", "-OO", "-E", "-s"})


def forkable(argv: Sequence[str]) -> list[str] | None:
    """`python [-u ...] script.py ARGS` or `python -m module ARGS` -> the part after the
    options; None for anything the fork launcher cannot run as a fresh interpreter would."""
    if not argv or not PYTHON_NAMES.match(Path(argv[0]).name):
        return None
    rest = list(argv[1:])
    while rest and rest[0] in _HARMLESS_FLAGS:
        rest.pop(0)
    if not rest or (rest[0].startswith("-") and rest[0] != "-m") or rest == ["-m"]:
        return None
    return rest


def zygote_main(preload: Sequence[str]) -> int:
    """The fork launcher's loop (`python -m voda.backends.local zygote MODULE...`)."""
    import importlib
    import select

    for name in preload:
        with contextlib.suppress(Exception):
            importlib.import_module(name)

    def reply(message: dict[str, object]) -> None:
        os.write(1, (json.dumps(message) + "\n").encode())

    reply({"ready": True})
    pending = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
        if readable:
            data = os.read(0, 1 << 16)
            if not data:
                return 0  # the backend is gone; the ranks live on
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                try:
                    request = json.loads(line)
                    request_id = request["id"]
                except (ValueError, KeyError, TypeError):
                    continue  # not a request of ours
                try:
                    reply({"id": request_id, "pid": _fork_rank(request)})
                except (OSError, KeyError, TypeError) as exc:
                    reply({"id": request_id, "error": str(exc)})
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            reply({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _fork_rank(request: Mapping[str, object]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        log = os.open(str(request["log"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(devnull)
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        code = _run_python(list(request["argv"]), dict(request["env"]),  # type: ignore[call-overload]
                           str(request["cwd"]))
    except SystemExit as exc:
        code = _exit_status(exc)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run_python(argv: list[str], env: dict[str, str], cwd: str) -> int:
    """Run `python ARGV...` in this (forked) interpreter, as a fresh one would."""
    import random
    import runpy

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    random.seed()
    torch = sys.modules.get("torch")
    if torch is not None and env.get("OMP_NUM_THREADS", "").isdigit():
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    if argv and argv[0] == "-m" and len(argv) > 1:
        sys.argv = [argv[1], *argv[2:]]
        sys.path[0] = cwd
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv and not argv[0].startswith("-"):
        script = os.path.abspath(argv[0])
        sys.argv = [script, *argv[1:]]
        sys.path[0] = os.path.dirname(script)
        runpy.run_path(script, run_name="__main__")
    else:
        print(f"voda: cannot run python {' '.join(argv)!r} in the fork launcher", flush=True)
        return 2
    return 0


def _exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


Slot = tuple[str, int]  # (node, index on the node)


@dataclass
class _Run:
    """What the backend knows of one job."""

    name: str
    job: Job
    dir: Path
    desired: JobPlacement = ()
    desired_slots: tuple[Slot, ...] = ()
    procs: list[_Process] = field(default_factory=list)
    pgids: list[int] = field(default_factory=list)  # process groups to signal
    launched: JobPlacement = ()
    launched_slots: tuple[Slot, ...] = ()
    launched_at: float = 0.0
    launches: int = 0
    stopping: bool = False
    stop_deadline: float = 0.0
    killed: bool = False
    crash_code: int | None = None
    partial_exit_since: float | None = None
    deleting: bool = False
    finished: bool = False  # completed or failed: nothing more will run
    report_offset: int = 0
    last_epoch: int = 0
    log: IO[bytes] | None = None

    @property
    def live(self) -> bool:
        return bool(self.procs)


class LocalBackend:
    """Runs jobs as local process groups; see the module docstring.

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
        self._nodes = self._make_nodes(slots, nodes)
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
        self._runs: dict[str, _Run] = {}
        self._events: list[Event] = []
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._slot_gpu = self._map_slots_to_gpus()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._zygote: _Zygote | None = None
        self._zygote_failures = 0
        if self.launcher == "fork":
            self._zygote = self._start_zygote()  # warms up while nothing runs yet
        if adopt:
            self._adopt_left_running()

    def _make_nodes(self, slots: int | None, nodes: str | int | None) -> list[Node]:
        shape = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*", str(nodes).lower()) if nodes else None
        if shape is not None:  # '2x2' says how many slots there are
            total = int(shape.group(1)) * int(shape.group(2))
            if slots is not None and slots != total:
                raise ValueError(f"slots: {slots} does not match nodes {nodes!r} ({total} slots)")
            slots = total
        if slots is None:
            slots = len(self._gpus) or os.cpu_count() or 1
        if slots < 1:
            raise ValueError(f"slots: must be at least 1, got {slots}")
        if self._gpus and slots > len(self._gpus):
            raise ValueError(f"slots: {slots} asked but only {len(self._gpus)} GPUs are visible")
        return parse_nodes(nodes, slots)

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
                self._close_log(run)
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
                self._close_log(run)
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
                run = _Run(job.name, job, directory)
                self._runs[job.name] = run
                self._skip_old_reports(run)
            run.job = job
            run.deleting = False
            run.desired = tuple((n, c) for n, c in placement if c > 0)
            run.desired_slots = self._assign_slots(run, run.desired)
            self._ensure_thread()
        self._wake.set()  # the monitor thread stops and launches

    def _assign_slots(self, run: _Run, placement: JobPlacement) -> tuple[Slot, ...]:
        capacity = {n.name: n.gpus for n in self._nodes}
        taken = {s for other in self._runs.values() if other is not run
                 for s in other.desired_slots}
        mine = set(run.desired_slots) | set(run.launched_slots if run.live else ())
        chosen: list[Slot] = []
        for node, count in placement:
            if node not in capacity:
                raise ValueError(f"job {run.name!r}: no node {node!r} on this backend "
                                 f"(nodes: {', '.join(capacity)})")
            free = [(node, i) for i in range(capacity[node]) if (node, i) not in taken]
            # Keep the slots the job holds so a rescale moves as little as possible.
            free.sort(key=lambda s: (s not in mine, s[1]))
            if len(free) < count:
                raise ValueError(f"node {node!r} over capacity: job {run.name!r} needs {count} "
                                 f"slots, {len(free)} free of {capacity[node]}")
            chosen.extend(sorted(free[:count]))
        return tuple(chosen)

    def _map_slots_to_gpus(self) -> dict[Slot, str]:
        mapping: dict[Slot, str] = {}
        index = 0
        for node in self._nodes:
            for i in range(node.gpus):
                if index < len(self._gpus):
                    mapping[(node.name, i)] = self._gpus[index]
                index += 1
        return mapping

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

    def _check_processes(self, run: _Run, now: float) -> None:
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
                self._write_log(run, "some ranks exited and the others did not: stopping them")
                self._begin_stop(run, now, timeout=1.0)
        if (run.stopping or run.crash_code is not None) and not run.killed and (
            now >= run.stop_deadline
        ):
            self._signal(run, signal.SIGKILL)
            run.killed = True

    def _exited(self, run: _Run, codes: list[int | None]) -> None:
        requested = run.stopping
        self._release(run)
        self._read_reports(run)
        exit_codes = [int(c) for c in codes if c is not None]
        if run.crash_code is not None:
            self._fail(run, run.crash_code)
        elif all(c == 0 for c in exit_codes) and (
            not requested or run.last_epoch >= run.job.epochs
        ):
            self._complete(run)
        elif requested:
            how = ", ".join(sorted({describe_exit(c) for c in exit_codes}))
            self._write_log(run, f"stopped ({how})")
        elif all(c == 0 for c in exit_codes) or (
            all(c == UNKNOWN_EXIT for c in exit_codes) and run.last_epoch >= run.job.epochs
        ):
            self._complete(run)
        elif all(c == STOPPED_EXIT_CODE for c in exit_codes):
            self._fail(run, STOPPED_EXIT_CODE, f"exit code {STOPPED_EXIT_CODE}: the job stopped "
                       "after a signal the backend did not send")
        else:
            self._fail(run, self._worker_exit_code(run, next(c for c in exit_codes if c != 0)))
        if run.deleting:
            shutil.rmtree(run.dir / CHECKPOINT_DIR, ignore_errors=True)
            self._runs.pop(run.name, None)

    def _worker_exit_code(self, run: _Run, code: int) -> int:
        """torchrun exits 1 when a worker fails; the worker's own code is in its summary."""
        if self.launcher != "torchrun" or code != 1:
            return code
        found = re.findall(r"exitcode\s*:\s*(-?\d+)", read_tail(run.dir / LOG_FILE, 80, 16000))
        return int(found[-1]) if found else code

    def _converge(self, run: _Run, now: float) -> None:
        if run.deleting and not run.live:
            shutil.rmtree(run.dir / CHECKPOINT_DIR, ignore_errors=True)
            self._close_log(run)
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
            self._write_log(self._runs[job.name], "the fork launcher keeps failing (see "
                            f"{self.run_dir / 'launcher.log'}); launching directly instead")
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

    def _launch(self, run: _Run) -> None:
        job = run.job
        argv = self._command(job)
        if argv is None:
            self._fail(run, None, f"job {job.name!r}: no command to run (set one with the spec's "
                       "'command' field)")
            return
        world = sum(c for _, c in run.desired)
        run.dir.mkdir(parents=True, exist_ok=True)
        (run.dir / CHECKPOINT_DIR).mkdir(exist_ok=True)
        if run.log is None:
            run.log = open(run.dir / LOG_FILE, "ab", buffering=0)  # noqa: SIM115 - kept open
        where = ", ".join(f"{n}:{c}" for n, c in run.desired)
        self._write_log(run, f"launch {run.launches + 1}: {world} worker(s) on {where} "
                        f"({self.launcher})")
        env = self._environment(run, world)
        gpus = [self._slot_gpu[s] for s in run.desired_slots if s in self._slot_gpu]
        try:
            if self.launcher == "torchrun":
                if gpus:
                    env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
                procs = [self._popen(self._torchrun_argv(argv, world), env, run.log, None)]
                pgids = [procs[0].pid]
            elif self.launcher == "fork" and (python_args := forkable(argv)) is not None:
                try:
                    procs = self._fork_ranks(python_args, world, env, run.dir / LOG_FILE, gpus)
                except OSError as exc:  # the launcher's fault, not the job's: try again
                    self._write_log(run, f"the fork launcher failed ({exc}); retrying")
                    if self._zygote is not None:
                        self._zygote.proc.kill()
                    return
                pgids = [p.pid for p in procs]
            else:
                procs = self._launch_ranks(argv, world, env, run.log, gpus)
                pgids = [procs[0].pid]
        except OSError as exc:
            self._fail(run, None, f"could not start {argv[0]!r}: {exc}")
            return
        run.procs = procs
        run.pgids = pgids
        run.launched, run.launched_slots = run.desired, run.desired_slots
        run.launched_at = time.monotonic()
        run.launches += 1
        run.stopping = run.killed = False
        run.crash_code = run.partial_exit_since = None
        self._write_state(run)

    @staticmethod
    def _rank_environments(env: dict[str, str], world: int,
                           gpus: list[str]) -> list[dict[str, str]]:
        """What torchrun would set for each rank, on a free port."""
        base = {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0",
                "ROLE_WORLD_SIZE": str(world), "TORCHELASTIC_RUN_ID": "voda"}
        envs = []
        for rank in range(world):
            rank_env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank),
                        "ROLE_RANK": str(rank)}
            if gpus:  # one GPU per rank, seen as device 0
                rank_env["CUDA_VISIBLE_DEVICES"] = gpus[rank]
                rank_env["LOCAL_RANK"] = "0"
            envs.append(rank_env)
        return envs

    def _launch_ranks(self, argv: list[str], world: int, env: dict[str, str], log: IO[bytes],
                      gpus: list[str]) -> list[_Process]:
        program = self._python_argv(argv)
        procs: list[_Process] = []
        for rank_env in self._rank_environments(env, world, gpus):
            try:
                procs.append(self._popen(program, rank_env, log, procs[0].pid if procs else None))
            except OSError:
                self._kill_all(procs)
                raise
        return procs

    def _fork_ranks(self, argv: list[str], world: int, env: dict[str, str], log: Path,
                    gpus: list[str]) -> list[_Process]:
        if self._zygote is None:
            raise OSError("the fork launcher is not running")
        procs: list[_Process] = []
        for rank_env in self._rank_environments(env, world, gpus):
            try:
                procs.append(self._zygote.spawn(argv, rank_env, self.cwd, log))
            except OSError:
                self._kill_all(procs)
                raise
        return procs

    def _start_zygote(self) -> _Zygote:
        env = self._environment(None, 0)
        env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # is_available() without cuInit
        return _Zygote(self.python, self.preload, env, self.run_dir / "launcher.log")

    @staticmethod
    def _kill_all(procs: Iterable[_Process]) -> None:
        for p in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, signal.SIGKILL)

    def _python_argv(self, argv: list[str]) -> list[str]:
        if PYTHON_NAMES.match(Path(argv[0]).name):
            return [self.python, *argv[1:]]
        return argv

    def _torchrun_argv(self, argv: list[str], world: int) -> list[str]:
        launch = [self.python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                  f"--nproc-per-node={world}"]
        if PYTHON_NAMES.match(Path(argv[0]).name):
            return [*launch, *argv[1:]]
        return [*launch, "--no-python", *argv]

    def _popen(self, argv: list[str], env: dict[str, str], log: IO[bytes],
               group: int | None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv, env=env, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, close_fds=True,
            # A new process group (in our session, so the other ranks may join it).
            process_group=0 if group is None else group,
        )

    def _environment(self, run: _Run | None, world: int) -> dict[str, str]:
        env = {**os.environ, **self.extra_env}
        voda_root = str(Path(__file__).resolve().parents[2])
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env.update(
            TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
            OMP_NUM_THREADS="1",
            PYTHONUNBUFFERED="1",
            PYTHONPATH=os.pathsep.join([voda_root, *[p for p in paths if p != voda_root]]),
        )
        if run is not None:
            env.update(
                VODA_JOB=run.name,
                VODA_CHECKPOINT_DIR=str((run.dir / CHECKPOINT_DIR).resolve()),
                VODA_REPORT=self.report_url or str((run.dir / REPORT_FILE).resolve()),
                VODA_EPOCHS=str(run.job.epochs),
                VODA_WORKERS=str(world),
                VODA_PLACEMENT=",".join(f"{n}:{c}" for n, c in run.desired),
            )
        if self.report_token:
            env["VODA_TOKEN"] = self.report_token
        return env

    def _begin_stop(self, run: _Run, now: float, timeout: float) -> None:
        run.stopping = True
        run.stop_deadline = now + timeout
        self._signal(run, signal.SIGTERM)

    def _signal(self, run: _Run, sig: signal.Signals) -> None:
        for pgid in run.pgids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)

    def _release(self, run: _Run) -> None:
        run.procs = []
        run.pgids = []
        run.launched, run.launched_slots = (), ()
        run.stopping = False
        run.partial_exit_since = None
        with contextlib.suppress(FileNotFoundError):
            (run.dir / STATE_FILE).unlink()

    # ----- outcomes -----------------------------------------------------------
    def _complete(self, run: _Run) -> None:
        run.finished = True
        run.desired, run.desired_slots = (), ()
        self._write_log(run, "completed")
        self._close_log(run)
        if not run.deleting:
            self._events.append(Event(EventKind.JOB_COMPLETED, self._clock(), job=run.name))

    def _fail(self, run: _Run, code: int | None, reason: str | None = None) -> None:
        run.finished = True
        run.desired, run.desired_slots = (), ()
        what = reason or describe_exit(code if code is not None else 1)
        self._write_log(run, f"failed: {what}")
        self._close_log(run)
        if not run.deleting:
            self._emit_failure(run.name, code, what, read_tail(run.dir / LOG_FILE))

    def _emit_failure(self, job: str, code: int | None, what: str, tail: str = "") -> None:
        reason = f"{what}; log tail:\n{tail}" if tail else what
        self._events.append(Event(EventKind.JOB_FAILED, self._clock(), job=job, data={
            "exit_code": code, "reason": reason, "log_tail": tail}))

    # ----- reports ------------------------------------------------------------
    def _skip_old_reports(self, run: _Run) -> None:
        """A job resumed from an earlier run dir: old lines are history, not news."""
        for record in self._new_reports(run):
            run.last_epoch = max(run.last_epoch, int(record.get("epoch", 0)))

    def _read_reports(self, run: _Run) -> None:
        for record in self._new_reports(run):
            try:
                epoch = int(record["epoch"])
                seconds = float(record["epoch_seconds"])
                workers = int(record["workers"])
            except (KeyError, TypeError, ValueError):
                continue
            run.last_epoch = max(run.last_epoch, epoch)
            self._events.append(Event(EventKind.EPOCH_REPORTED, self._clock(), job=run.name, data={
                "epoch": epoch, "epoch_seconds": seconds, "workers": workers}))

    def _new_reports(self, run: _Run) -> Iterable[dict[str, object]]:
        path = run.dir / REPORT_FILE
        try:
            with open(path, "rb") as f:
                f.seek(run.report_offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1  # complete lines only
        run.report_offset += end
        records = []
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records

    # ----- files --------------------------------------------------------------
    def _write_log(self, run: _Run, message: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        line = f"[voda {stamp}] {message}\n".encode()
        try:
            if run.log is not None:
                run.log.write(line)
            else:
                run.dir.mkdir(parents=True, exist_ok=True)
                with open(run.dir / LOG_FILE, "ab") as f:
                    f.write(line)
        except OSError:
            pass

    def _close_log(self, run: _Run) -> None:
        if run.log is not None:
            with contextlib.suppress(OSError):
                run.log.close()
            run.log = None

    def _write_state(self, run: _Run) -> None:
        state = {
            "job": run.name, "pgids": run.pgids, "pids": [p.pid for p in run.procs],
            "placement": [list(p) for p in run.launched],
            "slots": [list(s) for s in run.launched_slots],
            "epochs": run.job.epochs, "min": run.job.min_workers, "max": run.job.max_workers,
        }
        tmp = run.dir / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(state))
        os.replace(tmp, run.dir / STATE_FILE)

    def _adopt_left_running(self) -> None:
        """Take over process groups an earlier backend left running in this run dir."""
        for state_path in sorted(self.run_dir.glob(f"*/{STATE_FILE}")):
            try:
                state = json.loads(state_path.read_text())
                pids = [int(p) for p in state["pids"]]
                placement = tuple((str(n), int(c)) for n, c in state["placement"])
                slots = tuple((str(n), int(i)) for n, i in state["slots"])
                name = str(state["job"])
                job = Job(name, int(state.get("min", 1)), int(state.get("max", 1)),
                          epochs=int(state.get("epochs", 1)))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            known = {n.name for n in self._nodes}
            procs: list[_Process] = [_AdoptedProcess(pid) for pid in pids]
            if not any(_alive(pid) for pid in pids) or not {n for n, _ in placement} <= known:
                with contextlib.suppress(OSError):
                    state_path.unlink()
                continue
            run = _Run(name, job, state_path.parent, desired=placement, desired_slots=slots,
                       procs=procs, pgids=[int(g) for g in state["pgids"]], launched=placement,
                       launched_slots=slots, launched_at=time.monotonic())
            self._skip_old_reports(run)
            self._runs[name] = run
        if self._runs:
            self._ensure_thread()


def from_settings(settings: object) -> LocalBackend:
    """The backend `voda serve --backend local` runs.

    Read from the service settings when they have them, else from the environment:
    `slots` (VODA_SLOTS; 0 or unset: one per GPU, else one per CPU), `nodes` (VODA_NODES,
    e.g. '2x2'; unset: one node) and `run_dir` (VODA_RUN_DIR; unset: the user's state dir).
    """
    def setting(name: str, env: str) -> str:
        value = getattr(settings, name, None)
        return str(value) if value not in (None, "", 0) else os.environ.get(env, "")

    slots_text = setting("slots", "VODA_SLOTS").strip()
    if slots_text and not slots_text.isdigit():
        raise ValueError(f"slots: must be a whole number, got {slots_text!r}")
    slots = int(slots_text) if slots_text and int(slots_text) > 0 else None
    nodes = setting("nodes", "VODA_NODES").strip() or None
    run_dir = setting("run_dir", "VODA_RUN_DIR").strip() or None
    return LocalBackend(slots=slots, nodes=nodes, run_dir=run_dir)


if __name__ == "__main__":
    if sys.argv[1:2] == ["zygote"]:
        sys.exit(zygote_main(sys.argv[2:]))
    sys.exit("usage: python -m voda.backends.local zygote [MODULE...]")
