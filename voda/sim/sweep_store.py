"""`voda sweep`'s output directory: one JSON line per finished run, appended as it finishes.

`runs.jsonl` holds {"key", "request", "seconds", "result"} per run, the key a hash of the
run's parameters (its RunRequest), so a sweep started again in the same directory skips
the runs already there, whatever grid they came from. A process killed while writing
leaves at most one partial last line: it is cut off when the file is next opened.
Each line is flushed and synced before the next run is counted as done. One sweep at a
time writes to a directory (an advisory lock on OUT/.lock, released when it exits).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from voda.sim.compare import RunRequest
from voda.sim.report import JobResult, SimResult

RUNS_FILE = "runs.jsonl"
LOCK_FILE = ".lock"


class StoreBusy(RuntimeError):
    """Another sweep holds the output directory."""


def run_key(request: RunRequest) -> str:
    """A stable name for a run's parameters (16 hex digits of their SHA-256)."""
    text = json.dumps(dataclasses.asdict(request), sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def result_record(result: SimResult) -> dict[str, Any]:
    """Everything in a SimResult, as JSON values (NaN kept: the file is Python's own)."""
    return dataclasses.asdict(result)


def result_of(record: dict[str, Any]) -> SimResult:
    fields = dict(record)
    fields["jobs"] = tuple(JobResult(**j) for j in record["jobs"])
    fields["timeline"] = tuple(tuple(t) for t in record["timeline"])
    fields["queue"] = tuple(tuple(q) for q in record["queue"])
    return SimResult(**fields)


class RunStore:
    """The finished runs of an output directory, and the file new ones are appended to."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / RUNS_FILE
        self.records: dict[str, dict[str, Any]] = {}
        self._file: IO[str] | None = None
        # One sweep at a time per directory; the lock goes with the process, killed or not.
        self._lock = (self.directory / LOCK_FILE).open("a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise StoreBusy(f"another voda sweep is writing to {self.directory}") from None
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a line cut short by a killed process: drop it
            with self.path.open("r+b") as f:
                f.truncate(end)
        for line in data[:end].decode("utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            self.records[record["key"]] = record

    def done(self, key: str) -> bool:
        return key in self.records

    def add(self, record: dict[str, Any]) -> None:
        if self._file is None:
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.records[record["key"]] = record

    def results(self, requests: Iterable[RunRequest]) -> list[SimResult]:
        """The results of `requests`, in their order (each must be done)."""
        return [result_of(self.records[run_key(r)]["result"]) for r in requests]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._lock.close()
