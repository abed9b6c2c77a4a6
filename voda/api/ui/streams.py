"""Bounds on the dashboard's open event streams: `max_streams_per_user` for each user and
`max_streams` in all. A stream holds its slot for as long as its response runs and gives
it back however the response ends (the client went away, an error, a shutdown), so one
user's open pages cannot take the service's threads and event loop from the others."""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from voda.api.guard import error_body
from voda.api.slots import Slots

RETRY_AFTER_SECONDS = 5  # what a refused stream is told to wait before it tries again


def stream_slots(per_user: int, total: int) -> Slots:
    return Slots(per_user, total, "event streams", "max_streams_per_user", "max_streams")


class BoundedStream(StreamingResponse):
    """An event stream that runs only while it holds one of `slots`: otherwise a JSON 429
    naming the bound, with Retry-After, and the connection is closed."""

    def __init__(self, content: AsyncIterable[str], slots: Slots, user: str,
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.slots, self.user = slots, user

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.slots.take(self.user)
        if refusal is not None:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:  # never started: nothing of it runs
                await close()
            _, body = error_body(429, *refusal)
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
