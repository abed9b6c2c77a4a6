"""kube-apiserver's request deadline: a request that is not a watch must complete
within the `timeout` query parameter (a Go duration; the server's own maximum, 60 s,
when absent or larger), counted from when the server received it. A write still
waiting when its deadline passes is answered 504 and not applied: the deadline rides
the request's context down to storage (apiserver endpoints/filters/request_deadline.go).
"""

from __future__ import annotations

import re
import time

from voda_testing.kube.errors import ApiError

MAXIMUM_SECONDS = 60.0  # kube-apiserver --request-timeout default
INVALID = "invalid timeout specified in the request URL"
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Seconds of a Go duration ("1.5s", "300ms", "1m30s"); ValueError when malformed."""
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(body):
        match = _PART.match(body, pos)
        if match is None:
            raise ValueError(f'time: invalid duration "{text}"')
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not body:
        raise ValueError(f'time: invalid duration "{text}"')
    return -total if text.startswith("-") else total


def request_deadline(timeout: str | None, received: float) -> float:
    """The monotonic moment a request received at `received` must have completed by."""
    seconds = MAXIMUM_SECONDS
    if timeout:
        try:
            asked = parse_go_duration(timeout)
        except ValueError as exc:
            raise ApiError(400, f"{INVALID} - {exc}") from None
        if 0 < asked < MAXIMUM_SECONDS:
            seconds = asked
    return received + seconds


def check_deadline(deadline: float) -> None:
    """504 when the request's deadline has passed (nothing is applied)."""
    if time.monotonic() >= deadline:
        raise ApiError(504, "request did not complete within requested timeout - "
                            "context deadline exceeded", reason="Timeout")
