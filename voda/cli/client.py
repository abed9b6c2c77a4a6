"""The client commands' HTTP client, on the standard library's http.client.

A client command runs once and exits, so what it imports is most of its run time:
http.client costs a few milliseconds where a full HTTP library costs a hundred or more.
The client speaks only JSON with `voda serve`; errors become exit codes (see common).
"""

from __future__ import annotations

import http.client
import json
import re
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from voda.cli.common import (
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_SERVER,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    die,
)
from voda.client_settings import ConfigError, load_client_settings

TIMEOUT_SECONDS = 30.0
MAX_SEGMENT = 200
# Job and node names (as the service allows them), and GPU types.
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
TOKEN = re.compile(r"^[A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?$")
NAME_RULE = "lowercase letters, digits and '-'"
TOKEN_RULE = "letters, digits, '-', '_' and '.'"


class Unreachable(OSError):
    """No answer from the service (refused, reset, timed out)."""


def segment(value: str, what: str = "name", kind: re.Pattern[str] = NAME) -> str:
    """A checked, percent-encoded path segment: no name can reach another endpoint
    (`voda describe ../../healthz` exits with a usage error and sends nothing)."""
    if not value or len(value) > MAX_SEGMENT or not kind.match(value):
        rule = NAME_RULE if kind is NAME else TOKEN_RULE
        die(f"{what}: {value[:60]!r} is not a {what} ({rule})", EXIT_USAGE)
    return quote(value, safe="")


class Client:
    def __init__(self, url: str | None, token: str | None,
                 timeout: float = TIMEOUT_SECONDS) -> None:
        try:
            settings = load_client_settings(url, token)
        except ConfigError as exc:
            die(str(exc), EXIT_USAGE)
        self.url = settings.url
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            die(f"url: expected http://HOST:PORT or https://HOST:PORT, got {self.url!r}",
                EXIT_USAGE)
        self.https = parts.scheme == "https"
        self.ca_bundle = settings.verify if isinstance(settings.verify, str) else None
        self.host, self.port = parts.hostname, parts.port
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.headers = {"Accept": "application/json", "User-Agent": "voda-cli"}
        if settings.token:
            self.headers["Authorization"] = f"Bearer {settings.token}"
        self._connection: http.client.HTTPConnection | None = None

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            if self.https:
                self._connection = http.client.HTTPSConnection(
                    self.host, self.port, timeout=self.timeout, context=self._tls())
            else:
                self._connection = http.client.HTTPConnection(self.host, self.port,
                                                              timeout=self.timeout)
        return self._connection

    def _tls(self) -> Any:
        """The TLS context: the system's trust, or a private CA's bundle (VODA_CA_BUNDLE or
        [client] ca_bundle) for a service with its own certificate."""
        import ssl  # only for https: a few milliseconds the plain-HTTP commands skip

        try:
            return ssl.create_default_context(cafile=self.ca_bundle)
        except (OSError, ssl.SSLError) as exc:
            die(f"ca_bundle: cannot read {self.ca_bundle}: {exc}", EXIT_USAGE)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def request(self, method: str, path: str, params: dict[str, Any] | None = None,
                json_body: Any = None, content: bytes | None = None,
                content_type: str | None = None) -> tuple[int, bytes]:
        """(status, body); a dropped keep-alive connection is retried once on a new one."""
        target = self.prefix + path + (f"?{urlencode(params)}" if params else "")
        headers = dict(self.headers)
        body = content
        if json_body is not None:
            body = json.dumps(json_body).encode()
            content_type = "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            try:
                connection = self._connect()
                connection.request(method, target, body=body, headers=headers)
                response = connection.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError) as exc:
                self.close()
                if attempt == 2:
                    raise Unreachable(f"cannot reach the service at {self.url}: {exc}") from exc
            except (TimeoutError, OSError, http.client.HTTPException) as exc:
                self.close()
                raise Unreachable(f"cannot reach the service at {self.url}: {exc}") from exc
        raise AssertionError("unreachable")

    def open(self, method: str, path: str,
             params: dict[str, Any] | None = None) -> http.client.HTTPResponse:
        """The response, its body still to read (a stream: a followed log)."""
        target = self.prefix + path + (f"?{urlencode(params)}" if params else "")
        headers = {**self.headers, "Accept": "text/plain, application/json"}
        try:
            connection = self._connect()
            connection.request(method, target, headers=headers)
            return connection.getresponse()
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            self.close()
            raise Unreachable(f"cannot reach the service at {self.url}: {exc}") from exc

    def wait_forever(self) -> None:
        """No read timeout from now on (the connection stays open while a log is quiet)."""
        if self._connection is not None and self._connection.sock is not None:
            self._connection.sock.settimeout(None)

    def call(self, method: str, path: str, context: str | None = None, **kwargs: Any) -> Any:
        """The JSON answer; no answer or an error answer exits with its message and code
        (after `context`, when given: which of several requests it was)."""
        try:
            status, body = self.request(method, path, **kwargs)
        except Unreachable as exc:
            die(str(exc), EXIT_UNREACHABLE)
        if status >= 400:
            where = f"{context}: " if context else ""
            die(f"{where}error {status}: {error_message(body)}",
                EXIT_NOT_FOUND if status == 404 else EXIT_SERVER if status >= 500
                else EXIT_REFUSED)
        try:
            return json.loads(body)
        except ValueError:
            die(f"error: the service answered {status} with no JSON: {body[:200]!r}",
                EXIT_SERVER)


def error_message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body[:500].decode("utf-8", "replace")
    if not isinstance(data, dict):
        return str(data)[:500]
    message = str(data.get("error") or data)
    if data.get("valid"):
        message += f"\nvalid: {', '.join(map(str, data['valid']))}"
    return message
