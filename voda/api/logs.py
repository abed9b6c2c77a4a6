"""A job's log over the API: GET /v1/jobs/{name}/logs (text/plain).

The local backend appends every rank's output, across restarts, to the job's log file
(owner-only, under the run dir); the service reads it for the job's owner and the
administrators, so `voda logs` works from any machine and no other local account needs
to read the file. `tail=N` starts at the last N lines (at most MAX_TAIL_LINES, found in
the last MAX_TAIL_SCAN bytes); `follow=true` keeps the answer open and sends what is
appended until the job ends (completed, failed, canceled: the backend's final line is
written before the service sees the end) or the client goes away. At most MAX_FOLLOWS
answers follow at once, MAX_FOLLOWS_PER_USER of one user's: past that, 429.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO

from voda.api.errors import Busy

MAX_TAIL_LINES = 100_000
MAX_TAIL_SCAN = 32 << 20  # bytes read back from the end looking for the tail's lines
READ_BYTES = 256 << 10  # one read of the log, one chunk of the answer
FOLLOW_POLL_SECONDS = 0.25
MAX_FOLLOWS = 32
MAX_FOLLOWS_PER_USER = 4


def tail_offset(path: Path, lines: int) -> int:
    """Where the last `lines` lines of `path` start (0: the whole file; a missing file
    has nothing to skip). A last line without its newline counts as a line."""
    if lines <= 0:
        return 0
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            end = size
            if size and _byte_at(f, size - 1) == b"\n":
                end -= 1  # the final newline ends the last line; it starts none
            position, seen = end, 0
            while position > 0 and size - position < MAX_TAIL_SCAN:
                start = max(0, position - READ_BYTES)
                f.seek(start)
                block = f.read(position - start)
                index = len(block)
                while True:
                    index = block.rfind(b"\n", 0, index)
                    if index < 0:
                        break
                    seen += 1
                    if seen == lines:
                        return start + index + 1
                position = start
            return position
    except OSError:
        return 0


def _byte_at(f: IO[bytes], offset: int) -> bytes:
    f.seek(offset)
    return f.read(1)


def read_from(path: Path, offset: int, limit: int = READ_BYTES) -> bytes:
    """Up to `limit` bytes of `path` from `offset` (none when it is missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except OSError:
        return b""


class Follows:
    """How many answers follow a log now, in all and per user; over a bound, Busy (429)."""

    def __init__(self, total: int = MAX_FOLLOWS, per_user: int = MAX_FOLLOWS_PER_USER) -> None:
        self.total, self.per_user = total, per_user
        self._lock = threading.Lock()
        self._by_user: dict[str, int] = {}

    def acquire(self, user: str) -> None:
        with self._lock:
            if sum(self._by_user.values()) >= self.total:
                raise Busy("follow", f"{self.total} logs are followed already; retry later")
            if self._by_user.get(user, 0) >= self.per_user:
                raise Busy("follow", f"you follow {self.per_user} logs already; stop one "
                           "or retry later")
            self._by_user[user] = self._by_user.get(user, 0) + 1

    def release(self, user: str) -> None:
        with self._lock:
            left = self._by_user.get(user, 0) - 1
            if left > 0:
                self._by_user[user] = left
            else:
                self._by_user.pop(user, None)

    def count(self) -> int:
        with self._lock:
            return sum(self._by_user.values())


async def log_chunks(path: Path, offset: int, follow: bool, ended: Callable[[], bool],
                     release: Callable[[], None] | None = None,
                     poll: float = FOLLOW_POLL_SECONDS) -> AsyncIterator[bytes]:
    """The log from `offset`: to its current end, or (`follow`) on until `ended()` and
    everything written before it is sent. `release` runs when the stream stops, the
    client's going away (a cancellation) included."""
    try:
        while True:
            done = not follow or ended()  # before the read: nothing written after is lost
            chunk = await asyncio.to_thread(read_from, path, offset)
            if chunk:
                offset += len(chunk)
                yield chunk
                continue
            if done:
                return
            await asyncio.sleep(poll)
    finally:
        if release is not None:
            release()
