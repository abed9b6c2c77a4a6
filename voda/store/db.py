"""Engines, sessions and start-up migration."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker

from voda.owner_only import PRIVATE_DIR, PRIVATE_FILE, narrow

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"
# The newest revision in migrations/versions (a test checks it against Alembic's head).
HEAD_REVISION = "0011"


# How long a write waits for another holder of a SQLite lock, or for a PostgreSQL
# connection, before it fails (and the service answers 503 and retries later).
LOCK_WAIT_SECONDS = 2.0
CONNECT_TIMEOUT_SECONDS = 3


def make_engine(url: str, max_bytes: int = 0) -> Engine:
    """An engine for a SQLite file (WAL, waits briefly on locks; `max_bytes` caps the
    file's size when positive) or a PostgreSQL URL."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:" and not _sqlite_uri(parsed):
            private_sqlite_file(Path(parsed.database))
        engine = create_engine(
            url, connect_args={"timeout": LOCK_WAIT_SECONDS, "check_same_thread": False},
            pool_size=16,
        )
        event.listen(engine, "connect", lambda c, r: _sqlite_pragmas(c, max_bytes))
        return engine
    return create_engine(url, pool_size=16, max_overflow=8, pool_pre_ping=True,
                         connect_args={"connect_timeout": CONNECT_TIMEOUT_SECONDS})


# SQLite's side files: the write-ahead log, its shared-memory index, a rollback journal.
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def private_sqlite_file(path: Path) -> None:
    """Make the store file owner-only before SQLite opens it: created 0600 (in a 0700
    folder when the folder is new), an existing file readable by others narrowed to
    0600, and so its side files. SQLite creates -wal, -shm and -journal with the
    database file's own permissions, so they are private too. The store holds every
    job, and reading it must not be a way to act as the service (the report-token key
    is kept outside it: voda.api.token_file)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        pass
    except OSError as exc:  # a read-only folder: SQLite says what it can do with it
        log.debug("store file %s not created here: %s", path, exc)
    else:
        os.close(fd)
    for candidate in (path, *(path.with_name(path.name + s) for s in SQLITE_SIDE_FILES)):
        if candidate.is_file() and narrow(candidate, PRIVATE_FILE):
            log.warning("%s was readable by others: now 0600 (owner only)", candidate)


def _sqlite_uri(parsed: URL) -> bool:
    """Whether SQLite reads the database as a URI ("file:PATH?mode=ro" with uri=true): its
    path is not a file name, and a read-only store must not have directories made for it."""
    return str(parsed.query.get("uri", "")).lower() in ("true", "1")


def _sqlite_pragmas(dbapi_connection: Any, max_bytes: int) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    if max_bytes > 0:
        page_size = int(cursor.execute("PRAGMA page_size").fetchone()[0])
        cursor.execute(f"PRAGMA max_page_count={max(1, max_bytes // page_size)}")
    cursor.close()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return None
        return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (run at start-up).

    A store already at HEAD_REVISION is left alone without loading Alembic, which
    keeps restarts quick."""
    current = current_revision(engine)
    if current == HEAD_REVISION:
        return
    log.info("store schema: migrating from %s to %s", current or "empty", HEAD_REVISION)
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
