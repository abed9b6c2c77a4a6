"""The token `voda serve` generates when none is configured, as Jupyter does.

It is kept in a file only its owner may read (mode 0600), where the CLI looks for it
(`token` beside config.toml, or VODA_TOKEN_FILE), and reused on the next start so
clients keep working; a file others could read is replaced by a new token.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import replace
from pathlib import Path

from voda.config import (
    MIN_TOKEN_LENGTH,
    ServerSettings,
    User,
    hash_token,
    read_token_file,
    token_path,
)

LOCAL_ADMIN = "local"


def ensure_token(settings: ServerSettings) -> tuple[ServerSettings, str | None, Path | None]:
    """Settings with at least one token, the generated token (None when tokens were
    configured) and the file that holds it."""
    if settings.tokens:
        return settings, None, None
    path = token_path(settings.token_file)
    token = _reusable(path)
    if token is None:
        token = secrets.token_urlsafe(32)
        _write_private(path, token)
    tokens = {hash_token(token): User(LOCAL_ADMIN, admin=True)}
    return replace(settings, tokens=tokens), token, path


def _reusable(path: Path) -> str | None:
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if mode & (stat.S_IRWXG | stat.S_IRWXO) or not stat.S_ISREG(mode):
        return None
    token = read_token_file(path)
    return token if token and len(token) >= MIN_TOKEN_LENGTH else None


def _write_private(path: Path, token: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, f"{token}\n".encode())
    finally:
        os.close(fd)
    os.replace(temporary, path)
