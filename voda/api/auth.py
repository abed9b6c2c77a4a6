"""Bearer-token authentication. No tokens configured: every caller is the local admin.

`authenticate` is async: it never blocks, so it runs on the event loop (no thread hop).
"""

from __future__ import annotations

from fastapi import HTTPException, Request

from voda.config import User

LOCAL_USER = User("local", admin=True)


async def authenticate(request: Request) -> User:
    tokens = request.app.state.settings.tokens
    if not tokens:
        return LOCAL_USER
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HTTPException(401, "authorization: a bearer token is required",
                            headers={"WWW-Authenticate": "Bearer"})
    user = user_for_token(request, token.strip())
    if user is None:
        raise HTTPException(401, "authorization: unknown token",
                            headers={"WWW-Authenticate": "Bearer"})
    return user


def user_for_token(request: Request, token: str) -> User | None:
    """The user a token names, or None; with no tokens configured, the local admin."""
    tokens = request.app.state.settings.tokens
    if not tokens:
        return LOCAL_USER
    return tokens.get(token)


def can_see(user: User, owner: str) -> bool:
    return user.admin or user.name == owner
