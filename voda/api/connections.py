"""Bounds on connections that uvicorn leaves open: a deadline for each request's head (and,
under TLS, for the handshake: `bounded_loop`) and a cap on open connections.

uvicorn's keep-alive timer starts only after a response and is cancelled by any byte, so
a connection that sends nothing, or dribbles its head a byte at a time (slowloris), would
hold its socket for ever. `DeadlineProtocol` arms a deadline when the connection is made
and again after each response, cancelled only when a whole request head has come; when
it passes, the connection is closed. A request whose head has come is the app's: its body
has the guard's deadline (voda.api.guard, body_timeout_seconds) and a response in progress,
such as a dashboard event stream, has none. Beyond `max_connections` open connections a
new one is answered 503 and closed at once, and so is one from an address that holds
`max_connections_per_address` already (one client cannot take every slot); a trusted
proxy's address is exempt, as all its clients come through it.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Sequence
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from voda.api.guard import error_body


def _busy_answer(reason: str) -> bytes:
    _, body = error_body(503, "connections", reason)
    return (f"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n"
            f"\r\n").encode() + body


BUSY_ANSWER = _busy_answer("the service has too many open connections (max_connections); "
                           "try again later")
ADDRESS_BUSY_ANSWER = _busy_answer("your address has too many open connections "
                                   "(max_connections_per_address); close some and try again")


class DeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a head deadline and a connection cap (see the module)."""

    header_timeout: float = 10.0
    max_connections: int = 1000
    max_per_address: int = 1000
    exempt: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        over = len(self.connections) >= self.max_connections
        super().connection_made(transport)
        refusal = BUSY_ANSWER if over else ADDRESS_BUSY_ANSWER if self._address_full() else None
        if refusal is not None:
            transport.write(refusal)
            transport.close()
            return
        self._arm()

    def _address_full(self) -> bool:
        """Whether this connection's address held its share already (self included)."""
        host = self.client[0] if self.client else None
        if host is None or self._exempt(host):
            return False
        same = sum(1 for c in self.connections
                   if isinstance(c, DeadlineProtocol) and c.client and c.client[0] == host)
        return same > self.max_per_address

    def _exempt(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self.exempt)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head has come (or an error)
            self._disarm()
        elif self.head_deadline is None and not self.transport.is_closing():
            self._arm()  # the rest of a body answered early: the next head has its deadline

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()  # waiting for the next request's head

    def _arm(self) -> None:
        self._disarm()
        self.head_deadline = self.loop.call_later(self.header_timeout, self._expired)

    def _disarm(self) -> None:
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None

    def _expired(self) -> None:
        self.head_deadline = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.transport.close()


# The TLS handshake's deadline in `bounded_loop`'s loops (set by `voda serve` before it
# starts uvicorn, which makes the loop with no arguments).
handshake_seconds = 10.0


def bounded_loop() -> asyncio.AbstractEventLoop:
    """uvicorn's loop (uvloop when installed) whose servers give a TLS handshake
    `handshake_seconds` (asyncio's own 60 s would let a client that opens connections and
    never says hello hold each for a minute, uncounted: a protocol sees a connection only
    once its handshake is done)."""
    try:
        import uvloop

        base: type[asyncio.AbstractEventLoop] = uvloop.Loop
    except ImportError:  # pragma: no cover - uvloop is a dependency of uvicorn[standard]
        base = asyncio.SelectorEventLoop

    class HandshakeBoundLoop(base):  # type: ignore[valid-type,misc]
        async def create_server(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("ssl") is not None:
                kwargs.setdefault("ssl_handshake_timeout", handshake_seconds)
            return await super().create_server(*args, **kwargs)

    return HandshakeBoundLoop()


def protocol(header_timeout: float, max_connections: int,
             max_per_address: int | None = None,
             trusted_proxies: Sequence[str] = ()) -> type[DeadlineProtocol]:
    """A DeadlineProtocol class with these bounds (uvicorn makes one per connection);
    `trusted_proxies` (IPs, CIDRs) are exempt from `max_per_address`."""
    return type("BoundedProtocol", (DeadlineProtocol,), {
        "header_timeout": header_timeout, "max_connections": max_connections,
        "max_per_address": max_connections if max_per_address is None else max_per_address,
        "exempt": tuple(ipaddress.ip_network(p, strict=False) for p in trusted_proxies)})
