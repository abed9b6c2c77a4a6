"""The token `voda serve` generates when none is configured, as Jupyter does, and the
key report tokens are signed with.

The token is kept in a file only its owner may read (mode 0600), where the CLI looks
for it (`token` beside config.toml, or VODA_TOKEN_FILE), and reused on the next start so
clients keep working; a file others could read is replaced by a new token.

The report-token key (voda.api.report_tokens) is kept out of the store, so that reading
the store does not let anyone sign a report token: VODA_REPORT_KEY (or config.toml
`report_key`), as replicas on several machines share it (a Kubernetes Secret), else a
file of its own, `report-key` beside the token file (or `report_key_file`,
VODA_REPORT_KEY_FILE), generated on the first start with mode 0600 and reused after;
a key file others could read is replaced by a new key (the tokens signed with the old
one stop working). The store keeps only a hash of the key, to notice that it changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import stat
from dataclasses import replace
from pathlib import Path

from voda.client_settings import read_token_file, token_path
from voda.config import MIN_TOKEN_LENGTH, ServerSettings, User, hash_token

log = logging.getLogger(__name__)

LOCAL_ADMIN = "local"
REPORT_KEY_FILE = "report-key"
MIN_REPORT_KEY_LENGTH = 16


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


def report_key_path(settings: ServerSettings) -> Path:
    if settings.report_key_file:
        return Path(settings.report_key_file).expanduser()
    return token_path(settings.token_file).parent / REPORT_KEY_FILE


def ensure_report_key(settings: ServerSettings) -> tuple[str, Path | None]:
    """The report-token key and the file that holds it (None: from the settings). Two
    services starting at once on one key file end with the same key: the file is
    created by a link that fails when another made it first, and the other's is read."""
    if settings.report_key:
        if len(settings.report_key) < MIN_REPORT_KEY_LENGTH:
            raise ValueError(f"report_key: at least {MIN_REPORT_KEY_LENGTH} characters")
        return settings.report_key, None
    path = report_key_path(settings)
    for _ in range(3):
        found = _peek_key(path)
        if found is not None and found is not UNUSABLE:
            return str(found), path
        if found is UNUSABLE:
            log.warning("report key %s is readable by others or not a key: replaced by a "
                        "new one (report tokens signed with the old key stop working)", path)
        key = secrets.token_urlsafe(32)
        if _write_private(path, key, exclusive=found is None):
            return key, path
    raise OSError(f"{path}: no usable report key after three tries")


UNUSABLE = object()


def _peek_key(path: Path) -> str | object | None:
    """The key in `path`; None when there is no file; UNUSABLE for a file others may read
    or one that holds no key."""
    if not (path.exists() or path.is_symlink()):
        return None
    return _reusable(path, MIN_REPORT_KEY_LENGTH) or UNUSABLE


def key_check(key: str) -> str:
    """What the store keeps of the report-token key: a hash that shows it changed, of
    no use for signing."""
    return hashlib.sha256(b"voda report key check\0" + key.encode()).hexdigest()


def _reusable(path: Path, min_length: int = MIN_TOKEN_LENGTH) -> str | None:
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if mode & (stat.S_IRWXG | stat.S_IRWXO) or not stat.S_ISREG(mode):
        return None
    token = read_token_file(path)
    return token if token and len(token) >= min_length else None


def _write_private(path: Path, token: str, exclusive: bool = False) -> bool:
    """Write `token` to `path`, mode 0600 from the start; `exclusive`: only where no file
    is (False when another was there first)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, f"{token}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        if not exclusive:
            os.replace(temporary, path)
            return True
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(OSError):  # linked or not taken; gone when replaced
            temporary.unlink()
