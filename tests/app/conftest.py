"""Application use cases run against a schema the real migrations built, on PostgreSQL; each
test's writes are rolled back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from service.core.signing.dossier import Signer
from service.keys import KeyRing
from tests.support.database import migrated_engine, rolled_back


@pytest.fixture(scope="package")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sa.Engine]:
    with migrated_engine("app", Path(tmp_path_factory.mktemp("app"))) as engine:
        yield engine


@pytest.fixture(scope="package")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    return KeyRing(Path(tmp_path_factory.mktemp("keys"))).load_or_create()


@pytest.fixture
def session(engine: sa.Engine) -> Iterator[Session]:
    with rolled_back(engine) as session:
        yield session
