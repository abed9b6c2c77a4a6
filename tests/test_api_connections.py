"""Open connections cannot wear the service down, over real HTTP against `voda serve`:
dashboard event streams are bounded per user and in all (and a stream's slot comes back
when its client goes away), a request's head and body have deadlines (an idle or a
slowloris connection is closed, a slow body is 408) and open connections are capped.
The tests wait for what the server does; none of them times it."""

from __future__ import annotations

import json
import select
import socket
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from tests.conftest import TOKENS, ServeFactory, ServeProcess
from tests.polling import wait_for

STREAM = "/ui/stream/cluster"


def connect(server: ServeProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    return sock


def read_head(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and what came of the body so far."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a whole head: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, rest


def served(serve: ServeFactory, tmp_path: Path, server_settings: str) -> ServeProcess:
    """`voda serve` with tokens and these [server] settings."""
    return serve(f"sqlite:///{tmp_path / 'voda.db'}", tokens=True,
                 config=f"[server]\n{server_settings}")


_sessions: dict[tuple[int, str], str] = {}


def session_cookie(server: ServeProcess, user: str) -> str:
    """The Cookie header of `user`'s dashboard login (one login per server and user)."""
    key = (server.port, user)
    if key not in _sessions:
        cookies = server.dashboard_cookies(user)
        _sessions[key] = "; ".join(f"{name}={value}" for name, value in cookies.items())
    return _sessions[key]


def open_stream(server: ServeProcess, user: str) -> tuple[socket.socket, int, dict, bytes]:
    """GET an event stream with `user`'s dashboard login; the socket stays open."""
    sock = connect(server)
    sock.sendall((f"GET {STREAM} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                  f"Cookie: {session_cookie(server, user)}\r\nAccept: text/event-stream\r\n"
                  "\r\n").encode())
    status, headers, rest = read_head(sock)
    if status != 200:
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            rest += sock.recv(65536)
    return sock, status, headers, rest


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (what it sent before is read and dropped)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(65536) == b""
    except OSError:
        return True


def test_event_streams_are_bounded_per_user_and_in_all(serve: ServeFactory,
                                                       tmp_path: Path) -> None:
    server = served(serve, tmp_path, "max_streams_per_user = 2\nmax_streams = 3\n")
    with ExitStack() as held:
        for _ in range(2):
            sock, status, headers, _ = open_stream(server, "alice")
            held.callback(sock.close)
            assert status == 200 and headers["content-type"].startswith("text/event-stream")
        sock, status, headers, body = open_stream(server, "alice")
        sock.close()
        assert status == 429 and int(headers["retry-after"]) >= 1
        assert headers["connection"] == "close"
        assert json.loads(body)["errors"][0]["field"] == "max_streams_per_user"
        bob, status, _, _ = open_stream(server, "bob")  # another user still has a stream
        held.callback(bob.close)
        assert status == 200
        sock, status, headers, body = open_stream(server, "root")  # three open in all
        sock.close()
        assert status == 429 and "retry-after" in headers
        assert json.loads(body)["errors"][0]["field"] == "max_streams"
        with server.client("alice") as alice:  # the API answers beside the streams
            assert alice.get("/v1/jobs").status_code == 200


def test_a_streams_slot_comes_back_when_its_client_goes_away(serve: ServeFactory,
                                                             tmp_path: Path) -> None:
    server = served(serve, tmp_path, "max_streams_per_user = 1\n")
    first, status, _, _ = open_stream(server, "alice")
    assert status == 200
    refused, status, _, _ = open_stream(server, "alice")
    refused.close()
    assert status == 429
    first.close()  # the page is closed: its slot is given back
    held: list[socket.socket] = []

    def another_stream() -> bool:
        sock, status, _, _ = open_stream(server, "alice")
        if status == 200:
            held.append(sock)
        else:
            sock.close()
        return status == 200

    wait_for(another_stream)
    for sock in held:
        sock.close()


def test_idle_and_slowloris_connections_are_closed_streams_stay(serve: ServeFactory,
                                                                tmp_path: Path) -> None:
    server = served(serve, tmp_path, "header_timeout_seconds = 2\n")
    stream, status, _, _ = open_stream(server, "alice")
    assert status == 200
    idle = connect(server)
    slow = connect(server)
    slow.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Slow: ".encode())
    deadline = time.monotonic() + 60
    slow_closed = False
    while not slow_closed and time.monotonic() < deadline:
        try:
            slow.sendall(b"a")  # a byte of the head every second: never a whole head
        except OSError:
            slow_closed = True
            break
        select.select([slow], [], [], 1.0)
        slow_closed = closed_by_server(slow)
    assert slow_closed, "a slowloris connection stayed open"
    wait_for(lambda: closed_by_server(idle))
    # The event stream is a response in progress, not a request waiting: it stays open
    # past the head deadline that closed the others, and still receives.
    assert not closed_by_server(stream)
    with server.client("alice") as alice:
        assert alice.get("/healthz").status_code == 200
    for sock in (stream, idle, slow):
        sock.close()


def test_a_slow_body_is_408_and_connections_are_capped(serve: ServeFactory,
                                                       tmp_path: Path) -> None:
    server = served(serve, tmp_path, (
        "body_timeout_seconds = 1\nmax_connections = 4\n"
        "header_timeout_seconds = 600\n"))
    slow = connect(server)
    slow.sendall((f"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                  f"Authorization: Bearer {TOKENS['alice']}\r\n"
                  "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                  '{"name": "slow", ').encode())
    try:
        status, headers, rest = read_head(slow)
    except (AssertionError, OSError):  # closed without an answer: as good
        status = 0
    if status:
        assert status == 408
        assert headers.get("connection") == "close"
        length = int(headers["content-length"])
        while len(rest) < length:
            rest += slow.recv(65536)
        assert json.loads(rest)["errors"][0]["field"] == "body"
    wait_for(lambda: closed_by_server(slow))
    slow.close()
    # Four connections open (that have sent nothing): a fifth is answered 503 and closed.
    idle = [connect(server) for _ in range(4)]
    extra = connect(server)
    status, headers, _ = read_head(extra)
    assert status == 503 and headers.get("retry-after")
    wait_for(lambda: closed_by_server(extra))
    extra.close()
    for sock in idle:
        sock.close()
    with server.client("alice") as alice:  # room again once they went

        def answered() -> bool:
            try:
                return alice.get("/healthz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(answered)


def test_one_address_cannot_take_every_connection_a_trusted_proxy_may(
        serve: ServeFactory, tmp_path: Path) -> None:
    server = served(serve, tmp_path, (
        "max_connections_per_address = 3\nheader_timeout_seconds = 600\n"
        'trusted_proxies = "127.0.0.3"\n'))
    request = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode()

    def connect_from(host: str) -> socket.socket:
        return socket.create_connection(("127.0.0.1", server.port), timeout=30,
                                        source_address=(host, 0))

    hog = [connect_from("127.0.0.2") for _ in range(3)]
    extra = connect_from("127.0.0.2")
    status, _, rest = read_head(extra)
    assert status == 503
    while not rest.endswith(b"}"):
        rest += extra.recv(65536)
    assert "max_connections_per_address" in rest.decode()
    extra.close()
    # Others are served: another address, and a proxy beyond the per-address share.
    with server.client("alice") as alice:
        assert alice.get("/healthz").status_code == 200
    proxy = [connect_from("127.0.0.3") for _ in range(5)]
    for sock in proxy:
        sock.sendall(request)
        assert read_head(sock)[0] == 200
    for sock in hog:  # the address has its share back once its connections went
        sock.close()

    def served_again() -> bool:
        sock = connect_from("127.0.0.2")
        try:
            sock.sendall(request)
            return read_head(sock)[0] == 200
        except (AssertionError, OSError):
            return False
        finally:
            sock.close()

    wait_for(served_again)
    for sock in proxy:
        sock.close()
