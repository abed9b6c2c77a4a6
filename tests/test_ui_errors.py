"""What the dashboard says when something is wrong: a job that is not there is a page of
the dashboard (404, its header, a way back), not the API's JSON; and an open page says
when it lost the service, and stops saying so when the service is back."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
from browser import screenshot
from dashboard_server import (
    cookies,
    dashboard_server,
    login,
    mark_no_reload,
    not_reloaded,
    submit,
)
from polling import wait_for

from tests.conftest import TOKENS, ServeProcess, free_port
from voda.api.ui.routes import sse_message

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path) -> Iterator[ServeProcess]:
    process = dashboard_server(tmp_path)
    process.start()
    yield process
    process.kill()


def test_an_unknown_job_is_a_page_of_the_dashboard(server: ServeProcess, page) -> None:
    theirs = submit(server, "bob", "bob-private", min=1, max=1)
    login(page, server, "alice", "/ui/jobs")
    for name in ("no-such-job", theirs):  # another user's job is not found either, as in the API
        answer = page.goto(f"{server.url}/ui/jobs/{name}")
        assert answer.status == 404
        assert answer.headers["content-type"].startswith("text/html")
        assert "content-security-policy" in answer.headers
        assert page.title() == "Job not found · Voda"
        assert f"No job named '{name}'" in page.inner_text("#not-found")
        assert page.locator("header.top nav a").all_inner_texts() == [  # the dashboard's header
            "Cluster", "Jobs", "History", "Queues", "Scheduler"]
        assert page.inner_text("#user-name") == "alice"
    screenshot(page, "job-not-found")
    page.click("#not-found a")
    page.wait_for_url(re.compile(r"/ui/jobs$"))
    # A name too long to repeat whole is shortened.
    long = httpx.get(f"{server.url}/ui/jobs/{'x' * 5000}", cookies=cookies(page))
    assert long.status_code == 404 and "x" * 101 not in long.text

    # A stream the service ends on purpose (its job is gone, voda.api.ui.routes._events):
    # the page says so and stops listening; nothing was lost, no banner.
    mine = submit(server, "alice", "alice-gone", min=1, max=1)
    page.route("**/ui/stream/jobs/*", lambda route: route.fulfill(
        status=200, headers={"Content-Type": "text/event-stream"},
        body=sse_message("update", '<p class="error">job not found</p>')
        + sse_message("end", "gone")))
    page.goto(f"{server.url}/ui/jobs/{mine}")
    page.locator("#live-dot.ended").wait_for(timeout=15000)
    assert page.inner_text("#live .error") == "job not found"
    assert page.inner_text("#connection") == ""


class Relay:
    """A TCP relay from a port of its own to the service's: stopped, it cuts every
    connection through it and takes no more, as if the service had gone away, while the
    service (and the sessions it keeps) stays."""

    def __init__(self, target: int) -> None:
        self.target, self.port = target, free_port()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._running = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Relay:
        listener = socket.create_server(("127.0.0.1", self.port))  # SO_REUSEADDR
        listener.settimeout(0.1)
        self._running.set()
        self._thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._running.clear()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        with listener:
            while self._running.is_set():
                try:
                    client, _ = listener.accept()
                except TimeoutError:
                    continue
                try:
                    upstream = socket.create_connection(("127.0.0.1", self.target))
                except OSError:
                    client.close()
                    continue
                with self._lock:
                    self._open |= {client, upstream}
                for source, sink in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def test_a_lost_connection_is_said_until_it_is_back_and_the_updates_resume(
        server: ServeProcess, page) -> None:
    relay = Relay(server.port).start()
    try:
        through = dataclasses.replace(server, url=f"http://127.0.0.1:{relay.port}")
        login(page, through, "alice", "/ui/cluster")
        page.locator("#live-dot.on").wait_for(timeout=15000)
        banner = page.locator("#connection")
        assert banner.inner_text() == ""
        mark_no_reload(page)
        relay.stop()
        page.locator("#connection", has_text="Connection lost — retrying").wait_for(
            timeout=15000)
        relay.start()  # the service never left: the session holds
        wait_for(lambda: banner.inner_text() == "", timeout=30)
        page.locator("#live-dot.on").wait_for(timeout=15000)
        pushed = submit(server, "alice", "alice-after", min=1, max=1)
        page.locator(f".gpu[data-job='{pushed}']").first.wait_for(timeout=15000)
        assert not_reloaded(page)  # the same page, updated live again
    finally:
        relay.stop()


def test_a_lost_service_is_said_on_the_page_until_it_is_back(server: ServeProcess,
                                                             page) -> None:
    login(page, server, "alice", "/ui/cluster")
    page.locator("#live-dot.on").wait_for(timeout=15000)
    banner = page.locator("#connection")
    assert banner.inner_text() == ""
    # The service goes away (killed) and comes back.
    server.kill()
    page.locator("#connection", has_text="Connection lost — retrying").wait_for(
        timeout=15000)
    assert banner.get_attribute("role") == "status"
    assert page.locator("#live-dot.on").count() == 0
    screenshot(page, "connection-lost")

    server.start()  # the same port and store; its sessions (in memory) are gone
    page.locator("#connection", has_text="session has ended").wait_for(timeout=30000)
    assert "Connection lost" not in banner.inner_text()
    screenshot(page, "connection-back-session-ended")
    page.click("#connection-login")
    page.wait_for_url(re.compile(r"/ui/login\?next=%2Fui%2Fcluster$"))
    page.fill("input[name=token]", TOKENS["alice"])
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/ui/cluster$"))
    page.locator("#live-dot.on").wait_for(timeout=15000)
    assert banner.inner_text() == ""
