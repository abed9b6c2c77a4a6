"""Bearer-token authentication. A token is always required (see voda.api.token_file).

Tokens are kept as SHA-256 digests and compared with `hmac.compare_digest` against
every configured digest, so neither the comparison nor the number of tokens tried
leaks through timing. A request with no token at all is simply 401.

Failed attempts are counted per client address: an address that presented unknown
tokens `auth_failures_per_minute` times within a minute has its next unknown tokens
answered 429 with Retry-After for the rest of the window. A presented token is always
verified first, and a valid one is accepted whatever its address did: many users share
an address (a NAT, a proxy, a login host), and one guesser there must not lock them
all out, the dashboard's login included. The client address is the connection's peer,
or what X-Forwarded-For says only when the peer is one of `trusted_proxies` (uvicorn's
proxy headers are off otherwise, voda.cli.service), so a client cannot pick the address
its failures are charged to.

Accepting a valid token from a held-back address gives a guesser nothing: what keeps
a token from being guessed is its strength, not this limit. A held-back guesser does
learn whether a guess was right (200 rather than 429), but a configured token has at
least voda.config.MIN_TOKEN_LENGTH (16) characters - `voda serve` refuses to start with
a shorter one - and the tokens `voda token` and `voda serve` generate are 32 random
bytes (256 bits): even 16 random URL-safe characters (96 bits) at a million guesses a
second take about 10^15 years. Choose tokens at random (`voda token`); the length is
a floor, not a measure of a token typed by hand. What the 429 still does is keep a
guesser cheap to answer and visible (the counter, Retry-After), without refusing the
users who hold a token.

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
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
READ_POSTS = frozenset({"/v1/forecast"})  # a what-if: posts a job, changes nothing

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
    if request.method not in READ_METHODS and request.url.path not in READ_POSTS:
        check_may_change(user)
    return user


def check_may_change(user: User) -> None:
    """A viewer's token reads; anything that would change something is 403 (the API's
    writes and the dashboard's forms alike)."""
    if user.viewer:
        raise HTTPException(403, f"authorization: {user.name} is a viewer: it may look, "
                            "not change anything")


def user_for_token(request: Request, token: str, reporting: bool = False) -> User | None:
    """The user a presented token names, or None (a failed attempt, counted against the
    client). The token is verified first: a valid one is accepted even from a client
    held back after too many failed attempts (see the module's docstring); an unknown
    one from such a client is 429. The dashboard's login goes through here too. A valid
    report token is 403 unless `reporting`."""
    authenticator: Authenticator = request.app.state.authenticator
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
    if user is not None:
        return user
    client = client_address(request)
    wait = authenticator.retry_after(client)
    if wait is not None:  # held back: not counted again, so the window ends
        raise HTTPException(429, "authorization: too many failed attempts; try again later",
                            headers={"Retry-After": str(int(wait + 0.999))})
    authenticator.failed(client)
    return None


def client_address(request: Request) -> str:
    """The address failed attempts are charged to: the peer, or the client a trusted
    proxy names (uvicorn rewrites the peer only for `trusted_proxies`)."""
    return request.client.host if request.client else "unknown"


def _report_keys(request: Request) -> ReportKeys:
    return request.app.state.service.report_keys  # type: ignore[no-any-return]


def can_see(user: User, owner: str) -> bool:
    return user.admin or user.name == owner
