"""A PostgreSQL database and a Redis queue of their own; each test starts the workers it needs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from service.db import migrate
from service.db.session import make_engine
from service.settings import Settings
from tests.mcp.conftest import sandbox
from tests.support.service import (
    WorkerProcess,
    flush_redis_prefix,
    postgres_database,
    session_settings,
)

# The warehouse example's real MCP servers, for the mcp engine's world locks.
__all__ = ["sandbox"]


@pytest.fixture(scope="package")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    with postgres_database("worker") as url:
        # Shards of a few tenths of a second, so a kill lands in the middle of one.
        settings = session_settings(
            url, tmp_path_factory.mktemp("worker"), "worker", trials_per_shard=3000
        )
        migrate.upgrade(settings)
        yield settings
        flush_redis_prefix(settings)


@pytest.fixture(scope="package")
def engine(settings: Settings) -> Iterator[sa.Engine]:
    engine = make_engine(settings)
    yield engine
    engine.dispose()


@pytest.fixture
def start_worker(settings: Settings, tmp_path: Path) -> Iterator[Callable[[str], WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(name: str) -> WorkerProcess:
        worker = WorkerProcess(settings, name, tmp_path)
        started.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in started:
        worker.stop()
