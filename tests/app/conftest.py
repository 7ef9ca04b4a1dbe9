"""Application use cases run against a schema the real migrations built, on PostgreSQL; each
test's writes are rolled back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from service.core.dossier import Signer
from service.db import migrate
from service.db.session import make_engine
from service.keys import KeyRing
from service.settings import Settings
from tests.support.service import postgres_database


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sa.Engine]:
    with postgres_database("app") as url:
        settings = Settings(data_dir=Path(tmp_path_factory.mktemp("app")), database_url=url)
        migrate.upgrade(settings)
        engine = make_engine(settings)
        yield engine
        engine.dispose()


@pytest.fixture(scope="session")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    return KeyRing(Path(tmp_path_factory.mktemp("keys"))).load_or_create()


@pytest.fixture
def session(engine: sa.Engine) -> Iterator[Session]:
    with engine.connect() as connection:
        transaction = connection.begin()
        # Commits inside the code under test become savepoints of this outer transaction.
        with Session(bind=connection, join_transaction_mode="create_savepoint") as session:
            yield session
        transaction.rollback()
