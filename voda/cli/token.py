"""`voda token`: a new random token and its hashed entry for config.toml (runs locally)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from voda.cli.common import EXIT_USAGE, die


def register(app: typer.Typer) -> None:
    @app.command("token")
    def token_(
        user: Annotated[str, typer.Option(help="The user the token is for.")] = "admin",
        admin: Annotated[bool, typer.Option(help="An administrator's token.")] = False,
    ) -> None:
        """Print a new random token and its entry for `tokens` in config.toml (hashed)."""
        import secrets

        from voda.config import USER_RE, hash_token

        if not USER_RE.match(user):
            die(f"user: {user!r} is not a user name", EXIT_USAGE)
        new = secrets.token_urlsafe(32)
        entry = f"{user}:sha256:{hash_token(new)}{':admin' if admin else ''}"
        sys.stdout.write(f"token: {new}\nconfig: {entry}\n")
