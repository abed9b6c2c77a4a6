"""Bounds on the dashboard's open event streams: `max_streams_per_user` for each user and
`max_streams` in all. A stream holds its slot for as long as its response runs and gives
it back however the response ends (the client went away, an error, a shutdown), so one
user's open pages cannot take the service's threads and event loop from the others."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterable
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

RETRY_AFTER_SECONDS = 5  # what a refused stream is told to wait before it tries again


class StreamSlots:
    """How many event streams are open, per user and in all (the event loop's own: no lock)."""

    def __init__(self, per_user: int, total: int) -> None:
        self.per_user, self.total = per_user, total
        self.open: Counter[str] = Counter()

    def take(self, user: str) -> tuple[str, str] | None:
        """Take a slot for `user`; None, or (field, reason) when a bound is reached."""
        if self.open[user] >= self.per_user:
            return "max_streams_per_user", (
                f"{self.open[user]} event streams of this user are open, the limit is "
                f"{self.per_user}; close a dashboard page or try again later")
        if sum(self.open.values()) >= self.total:
            return "max_streams", (f"{self.total} event streams are open, the service's "
                                   "limit; try again later")
        self.open[user] += 1
        return None

    def give_back(self, user: str) -> None:
        self.open[user] -= 1
        if self.open[user] <= 0:
            del self.open[user]

    def count(self, user: str | None = None) -> int:
        return self.open[user] if user is not None else sum(self.open.values())


class BoundedStream(StreamingResponse):
    """An event stream that runs only while it holds one of `slots`: otherwise a JSON 429
    naming the bound, with Retry-After, and the connection is closed."""

    def __init__(self, content: AsyncIterable[str], slots: StreamSlots, user: str,
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.slots, self.user = slots, user

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.slots.take(self.user)
        if refusal is not None:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:  # never started: nothing of it runs
                await close()
            field, reason = refusal
            body = json.dumps({"error": f"{field}: {reason}",
                               "errors": [{"field": field, "reason": reason}]}).encode()
            await send({"type": "http.response.start", "status": 429, "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(RETRY_AFTER_SECONDS).encode()),
                (b"cache-control", b"no-store"),
                (b"connection", b"close")]})  # a refused page holds no connection either
            await send({"type": "http.response.body", "body": body})
            return
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slots.give_back(self.user)
