"""Tenant rows: whether an operator allowed a tenant's code, and when that last changed."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlmodel import Session, col, select

from service.db.models import Event, Tenant, utcnow


def by_id(session: Session, tenant_id: uuid.UUID) -> Tenant | None:
    return session.get(Tenant, tenant_id)


def by_name(session: Session, name: str) -> Tenant | None:
    return session.exec(select(Tenant).where(Tenant.name == name)).first()


def code_allowed(session: Session, tenant_id: uuid.UUID) -> bool:
    """Read afresh (never cached): a revocation holds from the next read on."""
    allowed = session.exec(select(Tenant.code_allowed).where(Tenant.id == tenant_id)).first()
    return bool(allowed)


def every(session: Session) -> Sequence[Tenant]:
    return session.exec(select(Tenant).order_by(col(Tenant.name))).all()


def set_code_allowed(
    session: Session, tenant: Tenant, allowed: bool, *, now: datetime | None = None
) -> bool:
    """Allow or revoke the tenant's code; False (nothing written) when it already was so."""
    if tenant.code_allowed == allowed:
        return False
    tenant.code_allowed = allowed
    tenant.code_changed_at = now or utcnow()
    session.add(tenant)
    return True


def audit_operator(
    session: Session, tenant: Tenant, operator: str, action: str, **data: object
) -> None:
    """Record an operator's change to a tenant (no API key: the operator acts where the
    database is configured), in the caller's transaction."""
    session.add(
        Event(
            kind="audit",
            tenant_id=tenant.id,
            data={
                "key_id": None,
                "actor": f"operator:{operator}",
                "person": operator,
                "tenant": tenant.name,
                "roles": ["operator"],
                "action": action,
                "target": f"tenant:{tenant.name}",
                **data,
            },
        )
    )
