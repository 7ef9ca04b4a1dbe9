"""A migrated PostgreSQL database of its own, and a session whose writes are rolled back: what the
database and application tests stand on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlmodel import Session

from service.db import migrate
from service.db.session import make_engine
from service.settings import Settings
from tests.support.service import postgres_database


@contextmanager
def migrated_engine(name: str, data_dir: Path) -> Iterator[sa.Engine]:
    """An engine on a new database `name`, its schema built by the real migrations."""
    with postgres_database(name) as url:
        settings = Settings(data_dir=data_dir, database_url=url, db_pool_size=3)
        migrate.upgrade(settings)
        engine = make_engine(settings)
        try:
            yield engine
        finally:
            engine.dispose()


@contextmanager
def rolled_back(engine: sa.Engine) -> Iterator[Session]:
    """A session in a transaction that is rolled back when the block ends."""
    with engine.connect() as connection:
        transaction = connection.begin()
        # Commits inside the code under test become savepoints of this outer transaction.
        with Session(bind=connection, join_transaction_mode="create_savepoint") as session:
            yield session
        transaction.rollback()
