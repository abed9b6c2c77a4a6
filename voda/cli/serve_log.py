"""The log of `voda serve`: one stderr handler on the root logger, in text or JSON lines.

Text: `2026-11-28T13:10:00.123Z INFO voda.activity submitted job ...`. JSON: one object
per line with `time` (RFC 3339, UTC), `level`, `logger` and `message`, plus the fields
a record carries (`extra=`: event, job, user, changes, ...) and `exception` when it
has one. uvicorn's loggers propagate to the same handler, at the same level.

Configured once, by `serve_logging`, and undone when it ends (`voda serve` also runs
in-process under the tests' CliRunner, where the root logger is shared).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

from voda.config import LOG_LEVELS

LEVELS: dict[str, int] = {name: logging.getLevelName(name.upper()) for name in LOG_LEVELS}
# What every LogRecord has: any other attribute came with `extra=` and is a field.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "taskName",
    "color_message",  # uvicorn's copy of the message with terminal colours
}
# Libraries whose INFO records only a debugger needs (Alembic's plugins, each migration
# step: voda.store.db says the migration in one line); debug shows them.
_CHATTY = ("alembic",)
# The program's own announcements (start, standby) when they are log records.
announcements = logging.getLogger("voda.serve")


def utc_time(record: logging.LogRecord) -> str:
    """RFC 3339 in UTC with milliseconds: 2026-11-28T13:10:00.123Z."""
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return utc_time(record)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {"time": utc_time(record), "level": record.levelname,
                                 "logger": record.name, "message": record.getMessage()}
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_"):
                entry.setdefault(key, value)
        if record.levelno >= logging.ERROR:
            entry.setdefault("event", "error")  # a library's error, or one said without fields
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # ASCII only: no U+2028 inside a line, which some line readers split on.
        try:
            return json.dumps(entry, default=str, allow_nan=False)
        except (TypeError, ValueError):  # a field JSON cannot hold (NaN, a tuple as a key)
            return json.dumps({key: value if isinstance(value, str) else repr(value)
                               for key, value in entry.items()})


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the sys.stderr of the moment, as logging's last resort does (a test
    runner may swap it)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr


@dataclass(frozen=True, slots=True)
class ServeLog:
    """How `voda serve` speaks: `json` when its log is JSON lines."""

    json: bool

    def announce(self, text: str, level: int = logging.INFO, **fields: Any) -> None:
        """A line for the operator: as it is on a text log (no timestamp, whatever the
        level), a record of logger voda.serve on a JSON one (no line that is not JSON)."""
        if self.json:
            announcements.log(level, text, extra=fields)
        else:
            sys.stderr.write(f"{text}\n")
            sys.stderr.flush()


@contextmanager
def serve_logging(log_format: str, log_level: str) -> Iterator[ServeLog]:
    """Log to stderr in `log_format` (text, json) at `log_level` (debug ... error) while
    it lasts; the root logger's handlers and level are put back afterwards."""
    root = logging.getLogger()
    chatty = [logging.getLogger(name) for name in _CHATTY]
    saved = (root.handlers[:], root.level, [logger.level for logger in chatty])
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root.handlers = [handler]
    root.setLevel(LEVELS[log_level])
    for logger in chatty:
        logger.setLevel(max(LEVELS[log_level], logging.WARNING))
    logging.captureWarnings(True)
    try:
        yield ServeLog(json=log_format == "json")
    finally:
        logging.captureWarnings(False)
        root.handlers, level, levels = saved
        root.setLevel(level)
        for logger, before in zip(chatty, levels, strict=True):
            logger.setLevel(before)
