"""The warm fork launcher ("zygote"): one process imports torch once and forks each rank.

The backend starts it as `python -m voda.backends.local zygote MODULE...` (see
docs/design/005-local-backend.md, "Why a warm fork launcher") and talks to it through
`Zygote`; `zygote_main` is the launcher's own side.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from voda.backends.local.paths import open_private
from voda.backends.local.process import UNKNOWN_EXIT, is_alive

# What the fork launcher imports once, so each rank starts without paying for it.
FORK_PRELOAD = ("torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo",
                "torch.optim", "voda.training.report")
ZYGOTE_START_TIMEOUT = 120.0
PYTHON_NAMES = re.compile(r"^python(\d+(\.\d+)?)?$")


class Zygote:
    """A warm launcher: one process that imported torch once and forks each rank from itself.

    It speaks JSON lines over its stdin/stdout: a request {"id", "argv", "env", "cwd", "log"}
    is answered {"id", "pid"} (or {"id", "error"}); when a rank ends it writes
    {"exit": pid, "code": code}. Ranks run in process groups of their own and outlive it.
    """

    def __init__(self, python: str, preload: Sequence[str], env: Mapping[str, str],
                 stderr_path: Path) -> None:
        self._stderr = open_private(stderr_path)  # lives as long as the process
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

    def spawn(self, argv: list[str], env: Mapping[str, str], cwd: Path, log: Path) -> ForkedRank:
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
        return ForkedRank(int(reply["pid"]), self)  # type: ignore[call-overload]

    def exit_code(self, pid: int) -> int | None:
        with self._cond:
            if pid in self._exits:
                return self._exits[pid]
        if self.alive():
            return None
        return None if is_alive(pid) else UNKNOWN_EXIT  # launcher gone: only liveness is known

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


class ForkedRank:
    """A rank the fork launcher forked: its exit code comes from the launcher."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
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
        log = os.open(str(request["log"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
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

