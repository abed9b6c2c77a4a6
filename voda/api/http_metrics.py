"""Time every HTTP answer into voda_http_request_duration_seconds (a pure ASGI middleware,
so streamed answers pass through untouched).

Routes are labelled by their path template (`/v1/jobs/{name}`), never by the path a
caller sent, so the label set stays bounded. The dashboard's event streams stay open
for as long as a page does and are not timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]
UNTIMED_PREFIXES = ("/ui/stream/", "/ui/static/")
OTHER_ROUTE = "other"


class RequestTimer:
    def __init__(self, app: Any, observe: Callable[[str, str, int, float], None]) -> None:
        self.app = app
        self.observe = observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(UNTIMED_PREFIXES):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def timed_send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            route = getattr(scope.get("route"), "path", None) or OTHER_ROUTE
            self.observe(scope["method"], route, status, time.perf_counter() - started)
