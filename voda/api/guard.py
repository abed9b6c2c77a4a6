"""The service's outer wall, before any route or parser sees a request (pure ASGI).

0. One copy of each header that means one value (Host, Origin, Content-Type,
   Authorization...): two copies are 400, since what reads the first and what reads the
   last would disagree.
1. Host: only the names the service is served under (DNS rebinding: a page of
   evil.example whose name resolves to 127.0.0.1 sends `Host: evil.example`).
2. Origin: a browser's cross-origin request is refused unless its origin is allowed.
3. Bodies: a Content-Type from the route's allow-list (a browser can send text/plain
   cross-site without a preflight), at most `max_body_bytes`, and JSON bodies read
   as checked documents (depth, duplicate keys, non-finite numbers) before FastAPI
   parses them; YAML bodies are checked by voda.spec when the job is parsed. A body
   that has not all come within `body_timeout_seconds` is 408 (the head's own deadline
   is voda.api.connections'). Only the
   dashboard's forms (POST /ui/...) come as application/x-www-form-urlencoded: they
   need its login cookie (SameSite=Strict) and a form token (voda.api.ui.session).
4. Errors: any exception becomes a JSON 500, never a dropped connection, and every
   5xx answer (and a 408, whose body is still on its way) says `Connection: close` so
   a client does not reuse the connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from voda.config import ServerSettings, split_list
from voda.spec import SpecError
from voda.spec.documents import is_json, is_yaml, load_document, media_type

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
DEFAULT_PORTS = {"http": 80, "https": 443}


FORM_TYPE = "application/x-www-form-urlencoded"
# Headers whose meaning is one value: two copies are refused, never one of them picked.
SINGLE_HEADERS = frozenset({b"host", b"origin", b"content-type", b"content-length",
                            b"authorization", b"cookie", b"idempotency-key"})


def accepts_yaml(method: str, path: str) -> bool:
    """Job submissions (and what-if forecasts of one) come as YAML or JSON; every other
    body is JSON."""
    return method == "POST" and path.rstrip("/") in ("/v1/jobs", "/v1/forecast")


def accepts_form(method: str, path: str) -> bool:
    """The dashboard's HTML forms (login, log out, an administrator's switch)."""
    return method == "POST" and path.startswith("/ui/")


def error_body(status: int, field: str, reason: str) -> tuple[int, bytes]:
    body = {"error": f"{field}: {reason}", "errors": [{"field": field, "reason": reason}]}
    return status, json.dumps(body).encode()


class HostCheck:
    """Which Host header names are the service's own."""

    def __init__(self, bind: str, allowed: Iterable[str]) -> None:
        self.any_host = "*" in allowed
        self.names = {name.lower().rstrip(".") for name in allowed if name != "*"}
        self.bind_ip = _ip(bind)
        self.wildcard = bind in WILDCARD_BINDS
        if self.wildcard:
            self.names |= LOOPBACK_NAMES | {socket.gethostname().lower(),
                                             socket.getfqdn().lower()}
        elif self.bind_ip is None:
            self.names.add(bind.lower().rstrip("."))
        if self.bind_ip is not None and self.bind_ip.is_loopback:
            self.names |= LOOPBACK_NAMES

    def allows(self, host_header: str) -> bool:
        if self.any_host:
            return True
        name, _ = split_host(host_header)
        if not name:
            return False
        address = _ip(name)
        if address is not None:  # an address cannot be rebound: is it one we serve?
            return self.wildcard or address == self.bind_ip or (
                address.is_loopback and self.bind_ip is not None and self.bind_ip.is_loopback)
        return name in self.names


def split_host(value: str) -> tuple[str, int | None]:
    """'Example.org:8470' -> ('example.org', 8470); '[::1]:80' -> ('::1', 80)."""
    value = value.strip().lower()
    port_text = ""
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        name, _, port_text = value.partition(":")
    else:
        name = value
    port = int(port_text) if port_text.isdigit() and len(port_text) <= 5 else None
    return name.rstrip("."), port


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def same_origin(origin: str, scheme: str, host_header: str) -> bool:
    try:
        parts = urlsplit(origin)
        origin_port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return False
    name, port = split_host(host_header)
    return (parts.scheme, (parts.hostname or "").rstrip("."), origin_port) == (
        scheme, name, port or DEFAULT_PORTS.get(scheme))


class RequestGuard:
    def __init__(self, app: ASGIApp, settings: ServerSettings) -> None:
        self.app = app
        self.hosts = HostCheck(settings.host, split_list(settings.allowed_hosts))
        self.origins = {o.rstrip("/").lower() for o in split_list(settings.allowed_origins)}
        self.max_body = settings.max_body_bytes
        self.body_timeout = settings.body_timeout_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if message["status"] >= 500 or message["status"] == 408:
                    headers = [(k, v) for k, v in message.get("headers", [])
                               if k.lower() != b"connection"]
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        try:
            refusal = self._refusal(scope)
            if refusal is None and scope["method"] in BODY_METHODS:
                refusal, receive = await self._checked_body(scope, receive)
            if refusal is not None:
                await _answer(guarded_send, *refusal)
                return
            await self.app(scope, receive, guarded_send)
        except Exception as exc:
            log.exception("internal error")
            if not started:
                body = {"error": f"internal error: {type(exc).__name__}", "errors": []}
                await _answer(guarded_send, 500, json.dumps(body).encode())

    def _refusal(self, scope: Scope) -> tuple[int, bytes] | None:
        repeated = _repeated(scope, SINGLE_HEADERS)
        if repeated is not None:
            return error_body(400, repeated, "sent more than once: one value is expected "
                              "(which copy a proxy, the guard and the route each read "
                              "could differ)")
        headers = _headers(scope)
        host = headers.get("host", "")
        if not self.hosts.allows(host):
            return error_body(403, "Host", f"{host[:100]!r} is not a name this service is "
                              "served under (set allowed_hosts to add one)")
        origin = headers.get("origin")
        if origin is not None and not same_origin(origin, scope.get("scheme", "http"), host) \
                and origin.rstrip("/").lower() not in self.origins:
            return error_body(403, "Origin", f"cross-origin requests from {origin[:100]!r} are "
                              "not allowed (set allowed_origins to allow one)")
        return None

    async def _checked_body(self, scope: Scope,
                            receive: Receive) -> tuple[tuple[int, bytes] | None, Receive]:
        headers = _headers(scope)
        media = media_type(headers.get("content-type"))
        yaml_ok = accepts_yaml(scope["method"], scope["path"])
        form_ok = accepts_form(scope["method"], scope["path"])
        if not (is_json(media) or (yaml_ok and is_yaml(media))
                or (form_ok and media == FORM_TYPE)):
            wanted = ("application/json or application/yaml" if yaml_ok else
                      f"{FORM_TYPE} or application/json" if form_ok else "application/json")
            return error_body(415, "Content-Type", f"expected {wanted}, got "
                              f"{(media or 'none')[:100]!r}"), receive
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            return error_body(413, "body", f"too large: {declared} bytes, the limit is "
                              f"{self.max_body}"), receive
        chunks: list[bytes] = []
        size = 0
        deadline = asyncio.get_running_loop().time() + self.body_timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                if left <= 0:
                    raise TimeoutError
                message = await asyncio.wait_for(receive(), left)
            except TimeoutError:
                return error_body(408, "body", f"not all received within "
                                  f"{self.body_timeout:g} s (body_timeout_seconds)"), \
                    receive
            if message["type"] == "http.disconnect":
                return error_body(400, "body", "the client went away"), receive
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return error_body(413, "body", f"too large: more than {self.max_body} "
                                  "bytes"), receive
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if is_json(media):
            try:
                load_document(body, media)
            except SpecError as exc:
                problems = [{"field": e.field, "reason": e.reason} for e in exc.errors]
                payload = {"error": str(exc), "errors": problems}
                return (exc.status, json.dumps(payload).encode()), receive
        return None, _replay(body, receive)


def _repeated(scope: Scope, names: frozenset[bytes]) -> str | None:
    """The first of `names` that the request carries more than once, or None."""
    seen: set[bytes] = set()
    for key, _ in scope["headers"]:
        name = key.lower()
        if name in names:
            if name in seen:
                return name.decode("latin-1").title()
            seen.add(name)
    return None


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
