"""Webhooks and their outbox: a tenant's subscriptions (`webhook`), one row per event and webhook
to deliver (`webhook_delivery`, written in the transaction of the event that causes it), and each
attempt to deliver it (`webhook_attempt`). The rules (what is sent, when to retry) are
`service.app.notify`'s; these are the rows and the queries."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, Session, SQLModel, col, func, or_, select

from service.db.models import BIGINT_ID, utcnow


class DeliveryStatus(StrEnum):
    PENDING = "pending"  # not delivered yet; `next_attempt_at` says when to try
    DELIVERED = "delivered"  # a 2xx answered
    FAILED = "failed"  # every attempt failed (`webhook_max_attempts`)
    DROPPED = "dropped"  # its webhook was removed before it was delivered


class AttemptOutcome(StrEnum):
    DELIVERED = "delivered"
    FAILED = "failed"  # a non-2xx answer, a timeout, a refused connection
    REFUSED = "refused"  # the egress policy refused the target: never sent


class Webhook(SQLModel, table=True):
    """A tenant's subscription: these events (of one system, or of all) go to this URL."""

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    tenant_id: uuid.UUID = Field(foreign_key="tenant.id", index=True)
    # None: every system of the tenant.
    system_id: uuid.UUID | None = Field(default=None, foreign_key="system.id")
    url: str = Field(max_length=2000)
    format: str = Field(max_length=16)
    events: list[str] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))
    # The signing secret, in clear: the workers sign with it (as GitHub and Stripe keep theirs).
    # Returned once, at creation; never listed, logged or audited.
    secret: str = Field(max_length=100)
    created_by: str = Field(max_length=200)
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    # Removed webhooks stay, so their delivery log stays readable; nothing new is sent.
    deleted_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )


class WebhookDelivery(SQLModel, table=True):
    """The outbox: one event for one webhook, with the exact body every attempt sends. Its id is
    the `Assaygate-Delivery` header, the same on every attempt, so receivers dedupe on it."""

    __tablename__ = "webhook_delivery"
    # The sweep's read: pending rows by when they are due.
    __table_args__ = (sa.Index("ix_webhook_delivery_status_next", "status", "next_attempt_at"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    webhook_id: uuid.UUID = Field(foreign_key="webhook.id", index=True)
    event: str = Field(max_length=32)
    candidate_id: uuid.UUID | None = Field(default=None)
    body: str = Field(sa_column=sa.Column(sa.Text(), nullable=False))
    status: str = Field(default=DeliveryStatus.PENDING.value, max_length=16)
    attempts: int = Field(default=0)
    next_attempt_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    # Set while a worker is sending it, so a second copy of the task (or the sweep) waits.
    leased_until: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    delivered_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )


class WebhookAttempt(SQLModel, table=True):
    __tablename__ = "webhook_attempt"

    id: int | None = Field(
        default=None, sa_column=sa.Column(BIGINT_ID, primary_key=True, autoincrement=True)
    )
    delivery_id: uuid.UUID = Field(foreign_key="webhook_delivery.id", index=True)
    number: int
    at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    outcome: str = Field(max_length=16)
    status_code: int | None = None
    error: str | None = Field(default=None, max_length=500)
    duration_ms: int = 0


# ----------------------------------------------------------------------------- subscriptions


def active(session: Session, tenant_id: uuid.UUID) -> Sequence[Webhook]:
    return session.exec(
        select(Webhook)
        .where(Webhook.tenant_id == tenant_id, col(Webhook.deleted_at).is_(None))
        .order_by(col(Webhook.created_at), col(Webhook.id))
    ).all()


def of_tenant(session: Session, tenant_id: uuid.UUID, webhook_id: uuid.UUID) -> Webhook | None:
    found = session.get(Webhook, webhook_id)
    return found if found is not None and found.tenant_id == tenant_id else None


def subscribers(
    session: Session, tenant_id: uuid.UUID, system_id: uuid.UUID, event: str
) -> list[Webhook]:
    """The tenant's live webhooks for `event` on this system (or on all its systems)."""
    rows = session.exec(
        select(Webhook).where(
            Webhook.tenant_id == tenant_id,
            col(Webhook.deleted_at).is_(None),
            or_(col(Webhook.system_id).is_(None), col(Webhook.system_id) == system_id),
        )
    ).all()
    return [w for w in rows if event in w.events]


def drop_pending(session: Session, webhook_id: uuid.UUID) -> None:
    session.execute(
        sa.update(WebhookDelivery)
        .where(
            col(WebhookDelivery.webhook_id) == webhook_id,
            col(WebhookDelivery.status) == DeliveryStatus.PENDING.value,
        )
        .values(status=DeliveryStatus.DROPPED.value)
    )


# ----------------------------------------------------------------------------------- outbox


def due(session: Session, now: datetime, limit: int = 100) -> list[uuid.UUID]:
    """Pending deliveries whose time has come and that no worker is sending."""
    return list(
        session.exec(
            select(WebhookDelivery.id)
            .where(
                WebhookDelivery.status == DeliveryStatus.PENDING.value,
                col(WebhookDelivery.next_attempt_at) <= now,
                or_(
                    col(WebhookDelivery.leased_until).is_(None),
                    col(WebhookDelivery.leased_until) < now,
                ),
            )
            .order_by(col(WebhookDelivery.next_attempt_at))
            .limit(limit)
        ).all()
    )


def lock_delivery(session: Session, delivery_id: uuid.UUID) -> WebhookDelivery | None:
    """The delivery, locked; None if another transaction holds it (it is being claimed)."""
    return session.exec(
        select(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id)
        .with_for_update(skip_locked=True)
    ).first()


@dataclass(frozen=True)
class DeliveryLog:
    delivery: WebhookDelivery
    attempts: list[WebhookAttempt]


def deliveries(session: Session, webhook_id: uuid.UUID, limit: int) -> list[DeliveryLog]:
    """A webhook's deliveries, newest first, each with its attempts in order."""
    rows = session.exec(
        select(WebhookDelivery)
        .where(WebhookDelivery.webhook_id == webhook_id)
        .order_by(col(WebhookDelivery.created_at).desc(), col(WebhookDelivery.id))
        .limit(limit)
    ).all()
    ids = [r.id for r in rows]
    attempts: dict[uuid.UUID, list[WebhookAttempt]] = {i: [] for i in ids}
    if ids:
        for a in session.exec(
            select(WebhookAttempt)
            .where(col(WebhookAttempt.delivery_id).in_(ids))
            .order_by(col(WebhookAttempt.delivery_id), col(WebhookAttempt.number))
        ).all():
            attempts[a.delivery_id].append(a)
    return [DeliveryLog(r, attempts[r.id]) for r in rows]


def attempts_by_outcome(session: Session) -> dict[str, int]:
    """Every attempt ever made, by outcome (the metric `assaygate_webhook_attempts`)."""
    rows: Any = session.exec(
        select(WebhookAttempt.outcome, func.count()).group_by(col(WebhookAttempt.outcome))
    ).all()
    return {str(outcome): int(n) for outcome, n in rows}


def deliveries_by_status(session: Session) -> dict[str, int]:
    rows: Any = session.exec(
        select(WebhookDelivery.status, func.count()).group_by(col(WebhookDelivery.status))
    ).all()
    return {str(status): int(n) for status, n in rows}
