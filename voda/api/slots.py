"""Bounds on long-running answers of one kind (dashboard event streams, followed logs):
at most so many per user and so many in all, a slot held for as long as the answer runs.
"""

from __future__ import annotations

import threading
from collections import Counter


class Slots:
    """How many answers of a kind are open, per user and in all. `take` is called from the
    event loop or from a route's thread: the counts are under a lock."""

    def __init__(self, per_user: int, total: int, what: str, per_user_field: str,
                 total_field: str) -> None:
        """`what`: the answers, as a message names them ("event streams"); the fields name
        the bounds in a refusal (the settings that set them)."""
        self.per_user, self.total = per_user, total
        self.what, self.per_user_field, self.total_field = what, per_user_field, total_field
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()

    def take(self, user: str) -> tuple[str, str] | None:
        """Take a slot for `user`; None, or (field, reason) when a bound is reached."""
        with self._lock:
            if self._open[user] >= self.per_user:
                return self.per_user_field, (
                    f"{self._open[user]} {self.what} of this user are open, the limit is "
                    f"{self.per_user}; close one or try again later")
            if sum(self._open.values()) >= self.total:
                return self.total_field, (f"{self.total} {self.what} are open, the service's "
                                          "limit; try again later")
            self._open[user] += 1
            return None

    def give_back(self, user: str) -> None:
        with self._lock:
            self._open[user] -= 1
            if self._open[user] <= 0:
                del self._open[user]

    def count(self, user: str | None = None) -> int:
        with self._lock:
            return self._open[user] if user is not None else sum(self._open.values())
