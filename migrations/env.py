"""Alembic environment. The URL comes from the caller (`assaygate db upgrade`, the tests) through
`config.attributes["url"]`, else from ASSAYGATE_DATABASE_URL via the service settings."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context
from sqlmodel import SQLModel

# Imported for what they register: every table on SQLModel.metadata.
import service.db.models
import service.db.webhook  # noqa: F401
from service.settings import get_settings

config = context.config
target_metadata = SQLModel.metadata


def _url() -> str:
    url = config.attributes.get("url")
    return str(url) if url else get_settings().database_url


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = sa.create_engine(_url(), poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        _run(connection)
    engine.dispose()


def _run(connection: sa.Connection) -> None:
    # SQLite cannot ALTER most things in place; batch mode rebuilds the table instead.
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
