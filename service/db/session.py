"""Engines and sessions. Built by the caller from settings; nothing connects at import time."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.core.evidence.quota import Quota, cut_event
from service.db.models import Event
from service.settings import Settings

EVENT_QUOTA = Quota()

#: What a database outage looks like, from SQLAlchemy and from psycopg itself (the API's hot
#: reads, `service.db.hotreads`): the API answers 503 for these.
DATABASE_ERRORS: tuple[type[Exception], ...] = (
    sa.exc.OperationalError,
    sa.exc.InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


def make_engine(settings: Settings, *, url: str | None = None) -> Engine:
    _cap_events()
    url = url or settings.database_url
    if url.startswith("sqlite"):
        return _sqlite_engine(url)
    return sa.create_engine(
        url,
        pool_size=settings.db_pool_size,
        max_overflow=(
            settings.db_pool_size
            if settings.db_pool_overflow is None
            else settings.db_pool_overflow
        ),
        pool_pre_ping=True,
        pool_timeout=settings.readiness_timeout * 2,
        connect_args={"connect_timeout": max(1, int(settings.readiness_timeout))},
    )


def _cap_events() -> None:
    """Every event's data within `Quota.event_bytes`, whoever writes it (an error, the reasons,
    a note a target's output made): cut before the insert, the cut said in the event's `cut`."""
    if not sa.event.contains(Event, "before_insert", _cut_event):
        sa.event.listen(Event, "before_insert", _cut_event)


def _cut_event(_mapper: Any, _connection: Any, event: Event) -> None:
    event.data = cut_event(event.data, EVENT_QUOTA)


def _sqlite_engine(url: str) -> Engine:
    engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # pysqlite's own BEGIN is deferred; two processes that read then write would then fail
        # with SQLITE_BUSY instead of waiting. We emit BEGIN IMMEDIATE ourselves (below).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One unit of work: committed when the block ends, rolled back if it raises."""
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def ping(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.execute(sa.text("SELECT 1"))


@contextmanager
def snapshot(engine: Engine) -> Iterator[Session]:
    """A session whose every statement reads one snapshot of the database, for a read model that
    answers from several statements: on PostgreSQL a REPEATABLE READ, read-only transaction (under
    READ COMMITTED a review committed between two of them would pair a waiver's dossier with its
    hold already reopened); SQLite's transactions read one snapshot already. Writes nothing."""
    with Session(engine, expire_on_commit=False) as session:
        if engine.dialect.name == "postgresql":
            options = {"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}
            session.connection(execution_options=options)
        yield session
