"""Each database test runs in a transaction of its own, rolled back afterwards, on a schema the
real migrations built."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from tests.support.database import migrated_engine, rolled_back


@pytest.fixture(scope="package")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sa.Engine]:
    with migrated_engine("db", Path(tmp_path_factory.mktemp("db"))) as engine:
        yield engine


@pytest.fixture
def session(engine: sa.Engine) -> Iterator[Session]:
    with rolled_back(engine) as session:
        yield session
