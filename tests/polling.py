"""Waiting for a condition in tests that drive real processes and servers."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(check: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll `check` every 0.1 s until it holds; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")
