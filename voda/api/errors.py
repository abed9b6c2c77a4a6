"""The errors the service raises, each answered by its own status (voda.api.app): NotFound
404, Forbidden 403, Conflict 409, Busy 429; StoreNotWritable stops `voda serve` at start-up.
Also importable from voda.api.service, where they were first defined."""

from __future__ import annotations


class NotFound(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class Forbidden(PermissionError):
    """403 naming a field: a limit of the user, or an administrator's action."""

    def __init__(self, field: str, reason: str) -> None:
        self.field, self.reason = field, reason
        super().__init__(f"{field}: {reason}")


class Conflict(ValueError):
    """409 naming a field: the request does not fit the job's state."""

    def __init__(self, field: str, reason: str) -> None:
        self.field, self.reason = field, reason
        super().__init__(f"{field}: {reason}")


class StoreNotWritable(RuntimeError):
    pass


class Busy(RuntimeError):
    """429 naming a field: too many requests of this kind at once; retry after a while."""

    def __init__(self, field: str, reason: str, retry_after: float = 1.0) -> None:
        self.field, self.reason, self.retry_after = field, reason, retry_after
        super().__init__(f"{field}: {reason}")
