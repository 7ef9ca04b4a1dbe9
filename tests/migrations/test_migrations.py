"""The schema exists only through the Alembic revisions: from empty, checked against the models,
and down and up again, on PostgreSQL and on SQLite."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from service.db import migrate
from service.settings import Settings
from tests.support.service import ROOT, TABLES, postgres_database

pytestmark = pytest.mark.integration


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    if request.param == "sqlite":
        yield Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'fresh.sqlite3'}")
        return
    with postgres_database("migrations") as url:
        yield Settings(data_dir=tmp_path, database_url=url)


def tables(settings: Settings) -> set[str]:
    engine = sa.create_engine(settings.database_url, poolclass=sa.pool.NullPool)
    try:
        return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_migrations_build_the_whole_schema_from_an_empty_database(
    empty_database: Settings,
) -> None:
    assert tables(empty_database) == set()
    migrate.upgrade(empty_database)
    assert tables(empty_database) == set(TABLES)
    migrate.check(empty_database)


def test_downgrade_and_upgrade_round_trip_to_the_same_schema(empty_database: Settings) -> None:
    migrate.upgrade(empty_database)
    migrate.downgrade(empty_database, "base")
    assert tables(empty_database) == set()
    migrate.upgrade(empty_database)
    migrate.check(empty_database)


def test_the_service_never_creates_tables_behind_the_migrations_back() -> None:
    sources = [*(ROOT / "service").rglob("*.py"), *(ROOT / "worker").rglob("*.py")]
    assert not [p for p in sources if "create_all(" in p.read_text()]


def test_the_db_upgrade_command_migrates_the_configured_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    env["ASSAYGATE_DATABASE_URL"] = url
    command = [sys.executable, "-m", "service.cli", "db", "upgrade"]
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
    assert tables(Settings(database_url=url)) == set(TABLES)
    check = subprocess.run([*command[:-1], "check"], cwd=ROOT, env=env, capture_output=True)
    assert check.returncode == 0
