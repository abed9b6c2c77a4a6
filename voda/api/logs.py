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
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO

from voda.api.slots import Slots

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


def follow_slots() -> Slots:
    """The bound on followed logs: MAX_FOLLOWS_PER_USER a user, MAX_FOLLOWS in all."""
    return Slots(MAX_FOLLOWS_PER_USER, MAX_FOLLOWS, "followed logs", "follow", "follow")


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
