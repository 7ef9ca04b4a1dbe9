"""An engine's pool on real PostgreSQL: `db_pool_size` connections kept, `db_pool_overflow` more
under load, closed when they come back."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest
import sqlalchemy as sa

from service.db.session import make_engine
from service.settings import Settings, SettingsInvalid, get_settings
from tests.support.service import postgres_database


def connections(engine: sa.Engine) -> int:
    """Backends on the engine's database other than the one asking."""
    with sa.create_engine(engine.url, poolclass=sa.NullPool).connect() as probe:
        return probe.execute(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ).scalar_one()


def burst(engine: sa.Engine, at_once: int) -> int:
    """Open `at_once` connections together and return them; how many were open at the top."""
    with ExitStack() as stack:
        for _ in range(at_once):
            stack.enter_context(engine.connect()).execute(sa.text("SELECT 1"))
        return connections(engine)


def test_a_burst_beyond_the_pool_is_served_and_only_the_pool_size_stays_open(
    tmp_path: Path,
) -> None:
    with postgres_database("pool") as url:
        settings = Settings(data_dir=tmp_path, database_url=url, db_pool_size=1, db_pool_overflow=4)
        engine = make_engine(settings)
        try:
            assert burst(engine, 5) == 5
            assert connections(engine) == 1
        finally:
            engine.dispose()


def test_without_an_overflow_an_engine_opens_twice_its_pool_size_and_keeps_its_pool_size(
    tmp_path: Path,
) -> None:
    with postgres_database("pool") as url:
        # A short wait for a free connection, so the sixth is refused at once.
        settings = Settings(
            data_dir=tmp_path, database_url=url, db_pool_size=2, readiness_timeout=0.1
        )
        engine = make_engine(settings)
        try:
            assert burst(engine, 4) == 4
            assert connections(engine) == 2
            with pytest.raises(sa.exc.TimeoutError):
                burst(engine, 5)
        finally:
            engine.dispose()


def test_a_negative_overflow_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ASSAYGATE_DB_POOL_OVERFLOW", "-1")
    get_settings.cache_clear()
    try:
        with pytest.raises(SettingsInvalid, match="ASSAYGATE_DB_POOL_OVERFLOW"):
            get_settings()
    finally:
        get_settings.cache_clear()
