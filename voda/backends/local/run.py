"""What the backend knows of one job (`Run`), and the job's files it writes and reads.

The backend's own lines go to the job's log; epoch reports are read from the report
file as it grows; `state.json` records the running processes so that a later backend
on the same run dir can adopt them.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from voda.backends.local.nodes import Slot
from voda.backends.local.paths import (
    LOG_FILE,
    PRIVATE_FILE,
    REPORT_FILE,
    STATE_FILE,
    open_private,
    private_dir,
)
from voda.backends.local.process import AdoptedProcess, Process, is_alive
from voda.core.model import Job, JobPlacement

MAX_REPORT_READ = 1 << 20  # bytes of a job's report file read per pass


@dataclass
class Run:
    """What the backend knows of one job."""

    name: str
    job: Job
    dir: Path
    desired: JobPlacement = ()
    desired_slots: tuple[Slot, ...] = ()
    procs: list[Process] = field(default_factory=list)
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


# ----- the log ----------------------------------------------------------------
def write_log(run: Run, message: str) -> None:
    """Append a `[voda <time>] message` line to the job's log (best effort)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    line = f"[voda {stamp}] {message}\n".encode()
    try:
        if run.log is not None:
            run.log.write(line)
        else:
            private_dir(run.dir)
            with open_private(run.dir / LOG_FILE) as f:
                f.write(line)
    except OSError:
        pass


def close_log(run: Run) -> None:
    if run.log is not None:
        with contextlib.suppress(OSError):
            run.log.close()
        run.log = None


# ----- reports ----------------------------------------------------------------
def new_reports(run: Run) -> list[dict[str, object]]:
    """The complete report lines written since the last call (JSON objects only), at most
    MAX_REPORT_READ bytes of them: the rest on the next call."""
    path = run.dir / REPORT_FILE
    try:
        with open(path, "rb") as f:
            f.seek(run.report_offset)
            data = f.read(MAX_REPORT_READ)
    except OSError:
        return []
    end = data.rfind(b"\n") + 1  # complete lines only
    if end == 0 and len(data) == MAX_REPORT_READ:
        end = len(data)  # a line longer than one read: dropped (its tail parses as nothing)
    run.report_offset += end
    records = []
    for line in data[:end].splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


# ----- state.json: processes a later backend may adopt ------------------------
def write_state(run: Run) -> None:
    state = {
        "job": run.name, "pgids": run.pgids, "pids": [p.pid for p in run.procs],
        "placement": [list(p) for p in run.launched],
        "slots": [list(s) for s in run.launched_slots],
        "epochs": run.job.epochs, "min": run.job.min_workers, "max": run.job.max_workers,
    }
    tmp = run.dir / f".{STATE_FILE}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), PRIVATE_FILE)
        f.write(json.dumps(state))
    os.replace(tmp, run.dir / STATE_FILE)


def remove_state(run: Run) -> None:
    with contextlib.suppress(FileNotFoundError):
        (run.dir / STATE_FILE).unlink()


def adopt_run(state_path: Path, known_nodes: Collection[str]) -> Run | None:
    """The run recorded in `state_path` if its processes still run on nodes we have.

    None for an unreadable file (left as it is) or a run that is over or placed on
    unknown nodes (its file is removed).
    """
    try:
        state = json.loads(state_path.read_text())
        pids = [int(p) for p in state["pids"]]
        placement = tuple((str(n), int(c)) for n, c in state["placement"])
        slots = tuple((str(n), int(i)) for n, i in state["slots"])
        name = str(state["job"])
        job = Job(name, int(state.get("min", 1)), int(state.get("max", 1)),
                  epochs=int(state.get("epochs", 1)))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    procs: list[Process] = [AdoptedProcess(pid) for pid in pids]
    if not any(is_alive(pid) for pid in pids) or not {n for n, _ in placement} <= set(known_nodes):
        with contextlib.suppress(OSError):
            state_path.unlink()
        return None
    return Run(name, job, state_path.parent, desired=placement, desired_slots=slots,
               procs=procs, pgids=[int(g) for g in state["pgids"]], launched=placement,
               launched_slots=slots, launched_at=time.monotonic())
