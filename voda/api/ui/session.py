"""Who is looking at the dashboard: the token login, a server-side session kept in a
cookie, and what keeps other sites out.

The browser cannot put a bearer token on a page load or an EventSource, so the login
form checks the token once (voda.api.auth.user_for_token, as the API checks a bearer
token: hashed tokens, failed attempts counted against the client and held back with
429) and starts a session: a random id (`secrets.token_urlsafe(32)`, 256 bits) that the
service keeps with the user, an expiry (`session_hours`, 12 by default) and a form
token. The cookie holds only that id, never the token: HttpOnly (page scripts cannot
read it), SameSite=Strict (other sites' pages cannot send it), Path=/, and under HTTPS
Secure with the `__Host-` name prefix (no Domain, not settable over plain HTTP). Its
name carries the service's port, so two services on one host do not overwrite each
other's login; a browser still sends every cookie of a host to all its ports, which is
why the cookie is a session that expires and that logging out ends (the id is refused
from then on), not a token.

Sessions are kept in memory (`Sessions`): they end when the service restarts (or when
another replica takes the lead on Kubernetes), and the dashboard asks to log in again.
They are bounded: at most MAX_SESSIONS_PER_USER per user and MAX_SESSIONS in all, the
oldest ended first. They are keyed by the SHA-256 of the id, so a lookup's timing says
nothing about the ids kept. An unknown session id is not counted as a failed token (it
cannot be guessed, and a restart would otherwise charge every open page to its
address); its cookie is cleared so the browser stops presenting it.

Before any of this, voda.api.guard refuses a request whose Host is not the service's
(DNS rebinding) and a cross-origin one. Forms that change something also carry the
session's form token (`FORM_TOKEN_FIELD`), which another site cannot know, and are
refused when their Origin is not this site. Pages are served with a
Content-Security-Policy that runs only the vendored scripts and our own.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import HTTPException, Request, Response

from voda.api.guard import same_origin
from voda.config import User

COOKIE = "voda_session"
LEGACY_COOKIE = "voda_token"  # earlier versions' cookie: the token; forgotten at login
SECURE_PREFIX = "__Host-"  # under HTTPS: Secure, Path=/, no Domain (browsers enforce it)
COOKIE_PATH = "/"
FORM_TOKEN_FIELD = "form_token"
MAX_SESSIONS_PER_USER = 20
MAX_SESSIONS = 10_000
# Scripts and styles from this service only (no inline code, no eval), no framing.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True, slots=True)
class Session:
    user: User
    expires: float
    form_token: str


class Sessions:
    """The dashboard's logins, in memory: id -> user until it expires or is revoked."""

    def __init__(self, hours: float, per_user: int = MAX_SESSIONS_PER_USER,
                 total: int = MAX_SESSIONS, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = hours * 3600.0
        self._per_user = max(1, per_user)
        self._total = max(1, total)
        self._clock = clock
        self._lock = threading.Lock()  # pages are rendered in threads, logins on the loop
        # Oldest first; every session lives as long, so also the first to expire.
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._by_user: dict[str, OrderedDict[str, None]] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, user: User) -> str:
        """A new session of `user`; its id (the cookie's value)."""
        session_id = secrets.token_urlsafe(32)
        key = _key(session_id)
        with self._lock:
            self._expire()
            mine = self._by_user.get(user.name)
            while mine and len(mine) >= self._per_user:
                self._drop(next(iter(mine)))
            while len(self._sessions) >= self._total:
                self._drop(next(iter(self._sessions)))
            self._sessions[key] = Session(user, self._clock() + self.seconds,
                                          secrets.token_urlsafe(32))
            self._by_user.setdefault(user.name, OrderedDict())[key] = None
        return session_id

    def get(self, session_id: str) -> Session | None:
        if not session_id or len(session_id) > 100:
            return None
        key = _key(session_id)
        with self._lock:
            session = self._sessions.get(key)
            if session is not None and session.expires <= self._clock():
                self._drop(key)
                return None
            return session

    def revoke(self, session_id: str) -> None:
        with self._lock:
            self._drop(_key(session_id))

    def _expire(self) -> None:
        now = self._clock()
        while self._sessions:
            key, session = next(iter(self._sessions.items()))
            if session.expires > now:
                break
            self._drop(key)

    def _drop(self, key: str) -> None:
        session = self._sessions.pop(key, None)
        if session is None:
            return
        mine = self._by_user.get(session.user.name)
        if mine is not None:
            mine.pop(key, None)
            if not mine:
                del self._by_user[session.user.name]


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()


def sessions_of(request: Request) -> Sessions:
    return request.app.state.sessions  # type: ignore[no-any-return]


def cookie_name(request: Request) -> str:
    """`voda_session_PORT`, with the `__Host-` prefix under HTTPS."""
    port = request.app.state.settings.port
    prefix = SECURE_PREFIX if request.url.scheme == "https" else ""
    return f"{prefix}{COOKIE}_{port}"


def set_session_cookie(request: Request, response: Response, session_id: str) -> None:
    if LEGACY_COOKIE in request.cookies:  # the token itself, as earlier versions kept it
        response.delete_cookie(LEGACY_COOKIE, path="/ui")
    response.set_cookie(cookie_name(request), session_id, max_age=int(
        sessions_of(request).seconds), path=COOKIE_PATH, httponly=True, samesite="strict",
        secure=request.url.scheme == "https")


def clear_cookie(request: Request) -> str:
    """A Set-Cookie value that makes the browser forget the session cookie."""
    secure = "; Secure" if request.url.scheme == "https" else ""
    return (f"{cookie_name(request)}=; Path={COOKIE_PATH}; Max-Age=0; HttpOnly; "
            f"SameSite=Strict{secure}")


class LoginRequired(Exception):
    """Raised by `page_user`; the app answers with a redirect to the login page."""

    def __init__(self, next_path: str, clear_cookie: bool = False) -> None:
        super().__init__(next_path)
        self.next_path = next_path
        self.clear_cookie = clear_cookie


def cookie_session_id(request: Request) -> str:
    return request.cookies.get(cookie_name(request), "")


def current_session(request: Request) -> Session | None:
    """The session of the request's cookie, or None (none, unknown, expired, ended)."""
    session_id = cookie_session_id(request)
    return sessions_of(request).get(session_id) if session_id else None


async def page_user(request: Request) -> User:
    """The dashboard user of a page load, or a redirect to the login page."""
    session = current_session(request)
    if session is None:
        raise LoginRequired(request.url.path + (f"?{request.url.query}" if request.url.query
                                                else ""),
                            clear_cookie=bool(cookie_session_id(request)))
    return session.user


async def stream_user(request: Request) -> User:
    """The dashboard user of a fragment, an event stream or a form (401 without a valid
    login)."""
    session = current_session(request)
    if session is None:
        headers = {"Set-Cookie": clear_cookie(request)} if cookie_session_id(request) else None
        raise HTTPException(401, "authorization: log in at /ui/login", headers=headers)
    return session.user


def form_token(request: Request) -> str:
    """What a form of this session carries: random, kept with the session, so a page of
    another site cannot know it."""
    session = current_session(request)
    return session.form_token if session is not None else ""


def check_form(request: Request, fields: dict[str, str]) -> None:
    """Refuse a form of a logged-in user that does not come from this site's own page."""
    check_same_origin(request)
    expected = form_token(request)
    sent = fields.get(FORM_TOKEN_FIELD, "")
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise HTTPException(403, f"{FORM_TOKEN_FIELD}: missing or wrong; reload the page")


def check_same_origin(request: Request) -> None:
    """Refuse a form posted from another site (the guard does too, unless that origin is
    allowed for the API; the dashboard's forms allow none)."""
    origin = request.headers.get("origin")
    if origin is None:  # not a browser's cross-site form: those always carry an Origin
        return
    if not same_origin(origin, request.url.scheme, request.headers.get("host", "")):
        raise HTTPException(403, f"Origin: {origin[:100]!r} is not this site")


def safe_next(path: str | None) -> str:
    """Where to go after logging in: a dashboard path only (no open redirect)."""
    if path and path.startswith("/ui") and not path.startswith("//") and "\\" not in path:
        return path
    return "/ui/cluster"
