"""Where the local backend keeps its files: the run dir, one directory per job, and its files."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import IO

import platformdirs

from voda.owner_only import PRIVATE_DIR, PRIVATE_FILE, narrow

# The checkout's root: put on the ranks' PYTHONPATH so they can import voda.
PROJECT_ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_TRAIN_SCRIPT = PROJECT_ROOT / "examples" / "local" / "train.py"
# Per job, under <run_dir>/<job>/:
LOG_FILE = "log.txt"  # all ranks, appended across restarts
REPORT_FILE = "reports.jsonl"  # epoch and goodput reports (see voda.training.report)
STATE_FILE = "state.json"  # while processes run: what a later backend adopts
CHECKPOINT_DIR = "checkpoint"
# Directly under <run_dir>: the fork launcher's own output.
LAUNCHER_LOG = "launcher.log"
LOG_TAIL_LINES = 20
LOG_TAIL_CHARS = 4000
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


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


# Everything under the run dir is the service user's alone: logs, reports, checkpoints.
def private_dir(path: Path) -> Path:
    """`path` made (with its parents) and owner-only (0700); one of ours that others could
    enter is narrowed. Jobs' logs and checkpoints are no other local account's to read."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    narrow(path, PRIVATE_DIR)
    return path


def open_private(path: Path) -> IO[bytes]:
    """`path` opened to append, unbuffered, created 0600 (an existing file narrowed)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
    with contextlib.suppress(OSError):
        st = os.fstat(fd)
        if st.st_mode & 0o077 and st.st_uid == os.geteuid():
            os.fchmod(fd, PRIVATE_FILE)
    return os.fdopen(fd, "ab", buffering=0)


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
