"""While `voda serve --backend kubernetes` stands by for the lease it answers /healthz and
/livez alone (503 with "standby" elsewhere), so the kubelet sees the standby Ready and
alive and a rollout of a new image completes; it stops before the service's own server
binds the port. /livez fails as the service's does when the backend's loop is wedged."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StandbyHealth:
    def __init__(self, host: str, port: int, stalled: Callable[[], str | None],
                 tls_cert: str = "", tls_key: str = "") -> None:
        self.stalled = stalled
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0].rstrip("/")
                reason = outer.stalled()
                if path == "/healthz":
                    self._answer(200, {"status": "ok", "role": "standby"})
                elif path == "/livez":
                    self._answer(503 if reason else 200, {
                        "status": "wedged" if reason else "alive",
                        "reasons": [reason] if reason else []})
                else:
                    self._answer(503, {"detail": "standby: this replica waits for the "
                                                 "leader Lease; the Service routes to the "
                                                 "leader"})

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 503:
                    self.send_header("Retry-After", "1")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        server_class = type("Server", (ThreadingHTTPServer,), {
            "address_family": socket.AF_INET6 if ":" in host else socket.AF_INET,
            "daemon_threads": True})
        self.server = server_class((host, port), Handler)
        if tls_cert:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls_cert, tls_key or None)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self._thread = threading.Thread(target=self.server.serve_forever,
                                        name="standby-health", daemon=True)

    def start(self) -> StandbyHealth:
        self._thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)
