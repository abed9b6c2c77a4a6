"""What a store error means: try again later (the store is unwell) or never (this row).

Transient: the database cannot be reached, is locked, full or read-only; everything
unwritten is kept and retried. Permanent: the database refuses these values (a
constraint, a width, a value it cannot hold); the row is set aside so that it never
blocks the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import exc as sa_exc

_REASONS = (
    ("database or disk is full", "database or disk is full"),
    ("no space left", "disk is full"),
    ("could not extend file", "disk is full"),
    ("database is locked", "locked"),
    ("database table is locked", "locked"),
    ("readonly database", "read-only"),
    ("read-only", "read-only"),
    ("unable to open database", "cannot open the database file"),
    ("disk i/o error", "disk I/O error"),
    ("connection refused", "unreachable"),
    ("could not connect", "unreachable"),
    ("server closed the connection", "unreachable"),
    ("terminating connection", "unreachable"),
    ("the database system is shutting down", "unreachable"),
    ("the database system is starting up", "unreachable"),
    ("connection is closed", "unreachable"),
    ("connection timeout", "unreachable"),
    ("timeout expired", "unreachable"),
    ("consuming input failed", "unreachable"),
)


@dataclass(frozen=True, slots=True)
class StoreFault:
    transient: bool
    reason: str  # short, for `503 store: REASON`

    def __str__(self) -> str:
        return f"store: {self.reason}"


def classify(error: BaseException) -> StoreFault:
    original = getattr(error, "orig", None) or error
    text = " ".join(str(original).split()).lower()
    reason = next((short for needle, short in _REASONS if needle in text), None)
    transient = isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError
                           | sa_exc.DisconnectionError | sa_exc.TimeoutError | OSError
                           | ConnectionError) or reason is not None
    if isinstance(error, sa_exc.DataError | sa_exc.IntegrityError):
        transient = False
    if reason is None:
        reason = " ".join(str(original).split())[:160] or type(original).__name__
    return StoreFault(transient, reason)
