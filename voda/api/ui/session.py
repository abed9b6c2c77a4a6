"""Who is looking at the dashboard: the token login, kept in a cookie.

The browser cannot put a bearer token on a page load or an EventSource, so the login
form stores the token in a cookie (HttpOnly: page scripts cannot read it; SameSite=
Strict: other sites' pages cannot send it) and every dashboard request resolves it
with the same token table as the API's bearer authentication. With no tokens
configured the caller is the local administrator, as for the API. Forms that change
something are also refused when their Origin is another site.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import HTTPException, Request

from voda.api.auth import user_for_token
from voda.config import User

COOKIE = "voda_token"
COOKIE_PATH = "/ui"
MAX_TOKEN_LENGTH = 512


class LoginRequired(Exception):
    """Raised by `page_user`; the app answers with a redirect to the login page."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


def cookie_user(request: Request) -> User | None:
    token = request.cookies.get(COOKIE, "")
    if len(token) > MAX_TOKEN_LENGTH:
        return None
    return user_for_token(request, token)


async def page_user(request: Request) -> User:
    """The dashboard user of a page load, or a redirect to the login page."""
    user = cookie_user(request)
    if user is None:
        raise LoginRequired(request.url.path + (f"?{request.url.query}" if request.url.query
                                                else ""))
    return user


async def stream_user(request: Request) -> User:
    """The dashboard user of a fragment or an event stream (401 without a valid login)."""
    user = cookie_user(request)
    if user is None:
        raise HTTPException(401, "authorization: log in at /ui/login")
    return user


def check_same_origin(request: Request) -> None:
    """Refuse a form posted from another site (the cookie alone must not be enough)."""
    origin = request.headers.get("origin")
    if origin is None:  # not a browser's cross-site form: those always carry an Origin
        return
    host = request.headers.get("host", "")
    if urlsplit(origin).netloc != host:
        raise HTTPException(403, f"origin: {origin!r} is not this site")


def safe_next(path: str | None) -> str:
    """Where to go after logging in: a dashboard path only (no open redirect)."""
    if path and path.startswith("/ui") and not path.startswith("//") and "\\" not in path:
        return path
    return "/ui/cluster"
