"""A PostgreSQL database, a Redis queue, two real worker processes and the API on a real port,
shared by the API tests (package fixtures: they end with the directory's last test; the
directory runs as one unit, tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from service.asgi import create_app
from service.db import migrate
from service.db.session import make_engine
from service.settings import Settings
from tests.support.keys import KeyBook
from tests.support.service import (
    ApiServer,
    WorkerProcess,
    flush_redis_prefix,
    postgres_database,
    quiet,
    row_counts,
    session_settings,
)


@pytest.fixture(scope="package")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    with postgres_database("api") as url:
        settings = session_settings(url, tmp_path_factory.mktemp("api"), "api", trials_per_shard=50)
        migrate.upgrade(settings)
        yield settings
        flush_redis_prefix(settings)


@pytest.fixture(scope="package")
def engine(settings: Settings) -> Iterator[sa.Engine]:
    engine = make_engine(settings)
    yield engine
    engine.dispose()


@pytest.fixture(scope="package")
def workers(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[WorkerProcess]]:
    log_dir = tmp_path_factory.mktemp("workers")
    started = [WorkerProcess(settings, f"api-{n}", log_dir) for n in (1, 2)]
    try:
        for worker in started:
            worker.wait_ready()
        yield started
    finally:
        for worker in started:
            worker.stop()


@pytest.fixture(scope="package")
def api_url(settings: Settings, workers: list[WorkerProcess]) -> Iterator[str]:
    with ApiServer(create_app(settings)) as server:
        yield server.url


@pytest.fixture(scope="package")
def keys(engine: sa.Engine) -> KeyBook:
    """Keys by name and tenant; the default client acts as `ci` of tenant `acme` (every role)."""
    return KeyBook(engine)


@pytest.fixture
def client(api_url: str, keys: KeyBook) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_url, timeout=30.0, headers=keys.headers("ci")) as client:
        yield client


@pytest.fixture
def anonymous(api_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_url, timeout=30.0) as client:
        yield client


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def unchanged(engine: sa.Engine) -> Iterator[None]:
    """The test writes no row. `quiet` first: an earlier test's assay finishing on the shared
    workers would change the counts without the code under test writing anything."""
    quiet(engine)
    before = row_counts(engine)
    yield
    assert row_counts(engine) == before
