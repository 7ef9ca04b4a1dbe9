"""A tenant's webhooks (admin only: add, list, remove, read the delivery log) and the outbox's
delivery states, which the workers drive (`worker.webhooks`): claim a due delivery, send it,
record the attempt; a failure is tried again after exponential back-off up to
`webhook_max_attempts`. The delivery's id is the same on every attempt, so a receiver that got
one twice (a worker lost after sending, before recording) drops the copy.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.app.errors import FieldInvalid, NotFound
from service.app.notify import HookEvent, HookFormat
from service.core.signing.webhook import backoff, new_secret
from service.db import queries
from service.db import webhook as stored
from service.db.apikey import Principal, audit
from service.db.models import System, Tenant, as_utc, utcnow
from service.db.session import session_scope
from service.db.webhook import (
    AttemptOutcome,
    DeliveryLog,
    DeliveryStatus,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
)
from service.net.egress import EgressPolicy, EgressRefused
from service.settings import Settings

__all__ = [
    "AttemptOutcome",
    "DeliveryLog",
    "DeliveryStatus",
    "Webhook",
    "WebhookAttempt",
    "WebhookDelivery",
]


@dataclass(frozen=True)
class Subscribe:
    """What an admin asks: send these events (of one system, or all) to this URL."""

    url: str
    format: str = HookFormat.JSON.value
    events: Sequence[str] | None = None  # None: every event
    system: str | None = None  # None: every system of the tenant


@dataclass(frozen=True)
class Subscribed:
    """A new webhook and its signing secret, which is shown this once."""

    webhook: Webhook
    secret: str


def check_target(settings: Settings, url: str, tenant: str, field: str = "url") -> None:
    """The egress policy's word on a tenant's webhook URL: the same rules as its manifests'
    URLs (the gate's own API, database and broker and metadata addresses are never targets;
    loopback only on the tenant's own ports)."""
    try:
        EgressPolicy.from_settings(settings, tenant=tenant).check_url(url, field)
    except EgressRefused as exc:
        raise FieldInvalid(f"egress refused: {exc.message}", field=field) from None


def create(
    session: Session, principal: Principal, settings: Settings, command: Subscribe
) -> Subscribed:
    check_target(settings, command.url, principal.tenant)
    if command.format not in {f.value for f in HookFormat}:
        known = ", ".join(f.value for f in HookFormat)
        raise FieldInvalid(f"format must be one of {known}", field="format")
    known_events = [e.value for e in HookEvent]
    events = list(dict.fromkeys(command.events)) if command.events is not None else known_events
    unknown = [e for e in events if e not in known_events]
    if unknown or not events:
        raise FieldInvalid(
            f"events must name at least one of {', '.join(known_events)}"
            + (f" (unknown: {', '.join(unknown)})" if unknown else ""),
            field="events",
        )
    system_id = None
    if command.system is not None:
        system = queries.system_named(session, command.system, principal.tenant_id)
        if system is None:
            raise NotFound(f"no system {command.system}", field="system")
        system_id = system.id
    secret = new_secret()
    hook = Webhook(
        tenant_id=principal.tenant_id,
        system_id=system_id,
        url=command.url,
        format=command.format,
        events=events,
        secret=secret,
        created_by=principal.actor,
    )
    session.add(hook)
    session.flush()
    # The audit record names the target, never the secret.
    audit(session, principal, "webhook.create", f"webhook:{hook.id}", url=command.url)
    session.commit()
    return Subscribed(hook, secret)


def of_tenant(session: Session, principal: Principal) -> Sequence[Webhook]:
    return stored.active(session, principal.tenant_id)


def _own(session: Session, principal: Principal, webhook_id: uuid.UUID) -> Webhook:
    found = stored.of_tenant(session, principal.tenant_id, webhook_id)
    if found is None:
        raise NotFound(f"no webhook {webhook_id}", field="webhook_id")
    return found


def remove(session: Session, principal: Principal, webhook_id: uuid.UUID) -> None:
    """Stop a webhook: nothing new is sent, pending deliveries are dropped, the log stays."""
    hook = _own(session, principal, webhook_id)
    if hook.deleted_at is not None:
        raise NotFound(f"no webhook {webhook_id}", field="webhook_id")
    hook.deleted_at = utcnow()
    session.add(hook)
    stored.drop_pending(session, hook.id)
    audit(session, principal, "webhook.delete", f"webhook:{hook.id}")
    session.commit()


def deliveries(
    session: Session, principal: Principal, webhook_id: uuid.UUID, limit: int = 50
) -> list[DeliveryLog]:
    """A webhook's deliveries, newest first, each with every attempt (removed ones included)."""
    return stored.deliveries(session, _own(session, principal, webhook_id).id, limit)


def system_name(session: Session, hook: Webhook) -> str | None:
    if hook.system_id is None:
        return None
    system = session.get(System, hook.system_id)
    return system.name if system is not None else None


# ------------------------------------------------------------------------------- delivering


@dataclass(frozen=True)
class Outgoing:
    """One attempt at one delivery, as a worker sends it."""

    delivery_id: uuid.UUID
    number: int
    event: str
    url: str
    format: str
    secret: str
    body: str
    # The webhook's tenant, whose egress allowances the attempt is held to.
    tenant: str = ""


def due(engine: Engine, before: datetime | None = None, limit: int = 100) -> list[uuid.UUID]:
    """Deliveries whose attempt is due by `before` (default now) and that nobody is sending."""
    with Session(engine) as session:
        return stored.due(session, before or utcnow(), limit)


def claim(engine: Engine, delivery_id: uuid.UUID, lease_s: float) -> Outgoing | None:
    """Take a due delivery for one attempt (leased for `lease_s`); None if it is not due, is
    being sent by another worker, is settled, or its webhook was removed."""
    now = utcnow()
    with session_scope(engine) as session:
        row = stored.lock_delivery(session, delivery_id)
        if row is None or row.status != DeliveryStatus.PENDING.value:
            return None
        # A retry's task may arrive a moment early (its countdown and the row's clock differ).
        if as_utc(row.next_attempt_at) > now + timedelta(seconds=1):
            return None
        if row.leased_until is not None and as_utc(row.leased_until) > now:
            return None
        hook = session.get(Webhook, row.webhook_id)
        if hook is None or hook.deleted_at is not None:
            row.status = DeliveryStatus.DROPPED.value
            session.add(row)
            return None
        row.leased_until = now + timedelta(seconds=lease_s)
        session.add(row)
        owner = session.get(Tenant, hook.tenant_id)
        return Outgoing(
            row.id,
            row.attempts + 1,
            row.event,
            hook.url,
            hook.format,
            hook.secret,
            row.body,
            owner.name if owner is not None else "",
        )


@dataclass(frozen=True)
class Attempted:
    outcome: AttemptOutcome
    status_code: int | None
    error: str | None
    duration_ms: int


def settle(engine: Engine, sent: Outgoing, result: Attempted, settings: Settings) -> float | None:
    """Record an attempt and move the delivery on; the seconds until the next attempt, or None
    when there is none (delivered, or out of attempts)."""
    now = utcnow()
    with session_scope(engine) as session:
        row = session.get(WebhookDelivery, sent.delivery_id, with_for_update=True)
        assert row is not None
        session.add(
            WebhookAttempt(
                delivery_id=row.id,
                number=sent.number,
                at=now,
                outcome=result.outcome.value,
                status_code=result.status_code,
                error=(result.error or None) and str(result.error)[:500],
                duration_ms=result.duration_ms,
            )
        )
        row.attempts = max(row.attempts, sent.number)
        row.leased_until = None
        delay: float | None = None
        if result.outcome is AttemptOutcome.DELIVERED:
            row.status = DeliveryStatus.DELIVERED.value
            row.delivered_at = now
        elif row.attempts >= settings.webhook_max_attempts:
            row.status = DeliveryStatus.FAILED.value
        else:
            delay = backoff(
                row.attempts, settings.webhook_backoff_s, settings.webhook_backoff_max_s
            )
            row.next_attempt_at = now + timedelta(seconds=delay)
        session.add(row)
        return delay
