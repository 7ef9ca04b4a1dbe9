"""What an operator reads of the service: whether the database answers (`/readyz`), and the
work counts `/metrics` reports at scrape time."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.db import counts, queries
from service.db.counts import OperatorCounts
from service.db.queries import Totals
from service.db.session import DATABASE_ERRORS, ping


def database(engine: Engine) -> str:
    """`ok`, or `unreachable (<the error's class>)`."""
    try:
        ping(engine)
    except DATABASE_ERRORS as exc:
        return f"unreachable ({exc.__class__.__name__})"
    return "ok"


def work(engine: Engine) -> Totals | None:
    """Assays by status, shards done and trials run; None when the database does not answer."""
    try:
        with Session(engine) as session:
            return queries.totals(session)
    except DATABASE_ERRORS:
        return None


def operator(engine: Engine, bounds: Sequence[float]) -> OperatorCounts | None:
    """Decisions, open holds, assay durations (bucketed by `bounds`), refusals, webhook attempts
    and the tenants with code queues; None when the database does not answer."""
    try:
        with Session(engine) as session:
            return counts.operator_counts(session, bounds)
    except DATABASE_ERRORS:
        return None


def code_tenants(engine: Engine) -> list[str] | None:
    """The tenants with a code queue; None when the database does not answer."""
    try:
        with Session(engine) as session:
            return counts.code_tenants(session)
    except DATABASE_ERRORS:
        return None
