"""Clocks are injected so tests and the simulator never sleep."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...


class WallClock:
    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told to: the simulator's and the tests'."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError(f"time cannot go back from {self._now} to {t}")
        self._now = t

    def advance(self, seconds: float) -> None:
        self.set(self._now + seconds)
