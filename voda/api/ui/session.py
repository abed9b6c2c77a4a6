"""Who is looking at the dashboard: the token login, kept in a cookie, and what keeps
other sites out.

The browser cannot put a bearer token on a page load or an EventSource, so the login
form stores the token in a cookie (HttpOnly: page scripts cannot read it; SameSite=
Strict: other sites' pages cannot send it; Secure over HTTPS). Every dashboard request
resolves it through voda.api.auth.user_for_token, as the API resolves a bearer token:
hashed tokens, failed attempts counted against the client and held back (429).

Before any of this, voda.api.guard refuses a request whose Host is not the service's
(DNS rebinding) and a cross-origin one. Forms that change something also carry a
token derived from the login token (`form_token`), which another site cannot know,
and are refused when their Origin is not this site. Pages are served with a
Content-Security-Policy that runs only the vendored scripts and our own.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import HTTPException, Request

from voda.api.auth import user_for_token
from voda.api.guard import same_origin
from voda.config import User

COOKIE = "voda_token"
COOKIE_PATH = "/ui"
FORM_TOKEN_FIELD = "form_token"
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


# Forgets a login the service no longer knows, so the browser stops presenting it (each
# presentation of an unknown token counts as a failed attempt).
CLEAR_COOKIE = f"{COOKIE}=; Path={COOKIE_PATH}; Max-Age=0; HttpOnly; SameSite=Strict"


class LoginRequired(Exception):
    """Raised by `page_user`; the app answers with a redirect to the login page."""

    def __init__(self, next_path: str, clear_cookie: bool = False) -> None:
        super().__init__(next_path)
        self.next_path = next_path
        self.clear_cookie = clear_cookie


def cookie_token(request: Request) -> str:
    return request.cookies.get(COOKIE, "")


def cookie_user(request: Request) -> User | None:
    token = cookie_token(request)
    return user_for_token(request, token) if token else None


async def page_user(request: Request) -> User:
    """The dashboard user of a page load, or a redirect to the login page."""
    try:
        user = cookie_user(request)
    except HTTPException:  # held back after failed attempts: the login page says so
        user = None
    if user is None:
        raise LoginRequired(request.url.path + (f"?{request.url.query}" if request.url.query
                                                else ""), clear_cookie=bool(cookie_token(request)))
    return user


async def stream_user(request: Request) -> User:
    """The dashboard user of a fragment, an event stream or a form (401 without a valid
    login)."""
    user = cookie_user(request)
    if user is None:
        headers = {"Set-Cookie": CLEAR_COOKIE} if cookie_token(request) else None
        raise HTTPException(401, "authorization: log in at /ui/login", headers=headers)
    return user


def form_token(login_token: str) -> str:
    """What a form of this login carries: derived from the login token, so a page of
    another site cannot make it up (and the service keeps no state for it)."""
    return hmac.new(login_token.encode(), b"voda dashboard form", hashlib.sha256).hexdigest()


def check_form(request: Request, fields: dict[str, str]) -> None:
    """Refuse a form of a logged-in user that does not come from this site's own page."""
    check_same_origin(request)
    sent = fields.get(FORM_TOKEN_FIELD, "")
    if not hmac.compare_digest(sent.encode(), form_token(cookie_token(request)).encode()):
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
