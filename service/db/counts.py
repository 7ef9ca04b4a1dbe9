"""What `/metrics` counts for operators at scrape time, read from the database so the figures
are right however many API and worker processes run: decisions by outcome, open holds with
their ages, assay durations, sandbox refusals, webhook attempts, and the tenants whose code
queues exist."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from service.db import webhook as hooks
from service.db.models import Assay, Event, Hold, HoldStatus, Tenant, as_utc

#: What refuses work inside an assay, by metric label: the sandbox world refused an effect out
#: of scope, the injector refused a disturbance, a worker refused to run tenant code.
REFUSAL_KINDS = {"sandbox": "sandbox.refused", "injector": "injection.refused"}
CODE_REFUSED = "tenant code refused%"


@dataclass(frozen=True)
class Durations:
    """Seconds from submission to decision of every finished assay, bucketed (cumulative)."""

    buckets: list[tuple[float, int]]
    count: int
    total: float


@dataclass(frozen=True)
class OperatorCounts:
    decisions: dict[str, int]
    # When each hold awaiting review opened (a decision `hold`; a block's hold is not one).
    hold_opened: list[datetime]
    durations: Durations
    refusals: dict[str, int]
    webhook_attempts: dict[str, int]
    webhook_deliveries: dict[str, int]


def _seconds(session: Session, start: Any, end: Any) -> Any:
    if session.get_bind().dialect.name == "sqlite":
        return (func.julianday(end) - func.julianday(start)) * 86400.0
    return func.extract("epoch", end - start)


def durations(session: Session, bounds: Sequence[float]) -> Durations:
    seconds = _seconds(session, col(Assay.created_at), col(Assay.finished_at))
    columns = [func.sum(sa.case((seconds <= b, 1), else_=0)) for b in bounds]
    row: Any = session.execute(
        sa.select(func.count(), func.coalesce(func.sum(seconds), 0.0), *columns).where(
            col(Assay.finished_at).is_not(None)
        )
    ).one()
    count, total, *per = row
    return Durations(
        [(b, int(n or 0)) for b, n in zip(bounds, per, strict=True)], int(count), float(total)
    )


def _blocks(reasons: Sequence[dict[str, Any]]) -> bool:
    return any(r.get("severity") == "block" for r in reasons)


def operator_counts(session: Session, bounds: Sequence[float]) -> OperatorCounts:
    decisions: Any = session.exec(
        select(Assay.decision, func.count())
        .where(col(Assay.decision).is_not(None))
        .group_by(col(Assay.decision))
    ).all()
    open_rows = session.exec(
        select(Hold.created_at, Hold.reasons).where(Hold.status == HoldStatus.OPEN.value)
    ).all()
    # A block opens a hold too (a reviewer may reject it), but no review can make it ship: it is
    # not a hold awaiting review, and counting it would fire "a hold nobody reviews" for every
    # block (issue 47).
    opened = [t for t, reasons in open_rows if not _blocks(reasons)]
    refusals: dict[str, int] = {}
    for label, kind in REFUSAL_KINDS.items():
        total = session.execute(
            sa.select(func.coalesce(func.sum(col(Event.data)["count"].as_integer()), 0)).where(
                col(Event.kind) == kind
            )
        ).scalar_one()
        refusals[label] = int(total)
    refusals["code"] = int(
        session.execute(
            sa.select(func.count()).where(
                col(Event.kind) == "assay.failed",
                col(Event.data)["error"].as_string().like(CODE_REFUSED),
            )
        ).scalar_one()
    )
    return OperatorCounts(
        decisions={str(d): int(n) for d, n in decisions},
        hold_opened=[as_utc(t) for t in opened],
        durations=durations(session, bounds),
        refusals=refusals,
        webhook_attempts=hooks.attempts_by_outcome(session),
        webhook_deliveries=hooks.deliveries_by_status(session),
    )


def code_tenants(session: Session) -> list[str]:
    """The tenants allowed to run code: each has its own code queue."""
    return list(
        session.exec(
            select(Tenant.name).where(col(Tenant.code_allowed).is_(True)).order_by(col(Tenant.name))
        ).all()
    )
