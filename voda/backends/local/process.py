"""Handles on running ranks, whoever started them, and how to signal and describe them."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from typing import Protocol

# Exit code given to ranks of an adopted process group, whose real status cannot be read.
UNKNOWN_EXIT = -1000


class Process(Protocol):
    """A rank: a `subprocess.Popen`, a rank forked by the fork launcher, or an adopted one."""

    pid: int

    def poll(self) -> int | None: ...


class AdoptedProcess:
    """A rank left running by an earlier backend: not our child, so only liveness is known."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._code: int | None = None

    def poll(self) -> int | None:
        if self._code is None and not is_alive(self.pid):
            self._code = UNKNOWN_EXIT
        return self._code


def is_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not)."""
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


def describe_exit(code: int) -> str:
    if code == UNKNOWN_EXIT:
        return "exited (status unknown: processes adopted from an earlier backend)"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def kill_all(procs: Iterable[Process]) -> None:
    """SIGKILL each process (not its group): undoes a launch that failed half-way."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p.pid, signal.SIGKILL)


def signal_groups(pgids: Iterable[int], sig: signal.Signals) -> None:
    """Send `sig` to each process group that still exists."""
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
