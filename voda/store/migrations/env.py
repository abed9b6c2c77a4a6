"""Alembic environment: runs on the connection handed in by voda.store.db.migrate."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from voda.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        url = config.get_main_option("sqlalchemy.url")
        if not url:
            raise RuntimeError("no connection and no sqlalchemy.url for migrations")
        with create_engine(url).begin() as conn:
            context.configure(connection=conn, target_metadata=target_metadata)
            context.run_migrations()
        return
    context.configure(connection=connection, target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
