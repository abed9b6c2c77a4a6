"""Bearer-token authentication. A token is always required (see voda.api.token_file).

Tokens are kept as SHA-256 digests and compared with `hmac.compare_digest` against
every configured digest, so neither the comparison nor the number of tokens tried
leaks through timing. A client that presents unknown tokens too often is refused
with 429 for the rest of a one-minute window (by client address), whatever token it
presents next; a request with no token at all is simply 401.

A report token (voda.api.report_tokens) is accepted only by `authenticate_reporter`,
the report routes' dependency; anywhere else it is refused with 403.

`authenticate` is async: it never blocks, so it runs on the event loop (no thread hop).
"""

from __future__ import annotations

import hmac
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from voda.api.report_tokens import ReportKeys
from voda.config import User, hash_token

FAILURE_WINDOW_SECONDS = 60.0
MAX_TRACKED_CLIENTS = 10_000
MAX_TOKEN_LENGTH = 4096

bearer = HTTPBearer(auto_error=False, description="A token from VODA_TOKENS, config.toml "
                    "or the file `voda serve` generates (printed on start).")


class Authenticator:
    def __init__(self, tokens: Mapping[str, User], failures_per_minute: int = 10,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._digests = list(tokens.items())
        self.failures_per_minute = failures_per_minute
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def user_for(self, token: str) -> User | None:
        digest = hash_token(token)
        found = None
        for known, user in self._digests:
            if hmac.compare_digest(known, digest):
                found = user
        return found

    def retry_after(self, client: str) -> float | None:
        """Seconds until `client` may try again, or None when it is not held back."""
        if self.failures_per_minute <= 0:
            return None
        times = self._failures.get(client)
        if times is None:
            return None
        now = self._clock()
        while times and now - times[0] > FAILURE_WINDOW_SECONDS:
            times.popleft()
        if len(times) < self.failures_per_minute:
            return None
        return max(1.0, FAILURE_WINDOW_SECONDS - (now - times[0]))

    def failed(self, client: str) -> None:
        times = self._failures.pop(client, None) or deque(maxlen=max(1,
                                                                     self.failures_per_minute))
        times.append(self._clock())
        self._failures[client] = times
        while len(self._failures) > MAX_TRACKED_CLIENTS:
            self._failures.popitem(last=False)


def _unauthorized(reason: str) -> HTTPException:
    return HTTPException(401, f"authorization: {reason}", headers={"WWW-Authenticate": "Bearer"})


async def authenticate(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
) -> User:
    return _bearer_user(request, credentials, reporting=False)


async def authenticate_reporter(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
) -> User:
    """For the report routes: a user's token, or a report token (a `Reporter`, which the
    service holds to its one job)."""
    return _bearer_user(request, credentials, reporting=True)


def _bearer_user(request: Request, credentials: HTTPAuthorizationCredentials | None,
                 reporting: bool) -> User:
    if credentials is None or not credentials.credentials.strip():
        raise _unauthorized("a bearer token is required")
    user = user_for_token(request, credentials.credentials, reporting)
    if user is None:
        raise _unauthorized("unknown token")
    return user


def user_for_token(request: Request, token: str, reporting: bool = False) -> User | None:
    """The user a presented token names, or None (a failed attempt, counted against the
    client). 429 while the client is held back after too many failed attempts. The
    dashboard's login and its cookie go through here too. A valid report token is 403
    unless `reporting`."""
    authenticator: Authenticator = request.app.state.authenticator
    client = request.client.host if request.client else "unknown"
    wait = authenticator.retry_after(client)  # only tokens are held back: they are guesses
    if wait is not None:
        raise HTTPException(429, "authorization: too many failed attempts; try again later",
                            headers={"Retry-After": str(int(wait + 0.999))})
    token = token.strip()
    user = None
    if 0 < len(token) <= MAX_TOKEN_LENGTH:
        reporter = _report_keys(request).verify(token)
        if reporter is not None:
            if not reporting:
                raise HTTPException(403, "authorization: a report token may only report its "
                                    "own job's epochs and goodput (POST /v1/jobs/JOB/metrics "
                                    "or /goodput)")
            return reporter
        user = authenticator.user_for(token)
    if user is None:
        authenticator.failed(client)
    return user


def _report_keys(request: Request) -> ReportKeys:
    return request.app.state.service.report_keys  # type: ignore[no-any-return]


def can_see(user: User, owner: str) -> bool:
    return user.admin or user.name == owner
