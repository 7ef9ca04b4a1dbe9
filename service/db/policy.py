"""Organisation policy rows: every version of a tenant's policy (`system` empty) and of each of
its systems', only ever added to."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlmodel import Session, col, select

from service.db.models import OrgPolicyRow, System, Tenant

#: The `system` of a tenant's own policy.
TENANT = ""


def latest(session: Session, tenant_id: uuid.UUID, system: str = TENANT) -> OrgPolicyRow | None:
    """The newest version at one scope (None: never set)."""
    found: OrgPolicyRow | None = session.exec(
        select(OrgPolicyRow)
        .where(OrgPolicyRow.tenant_id == tenant_id, OrgPolicyRow.system == system)
        .order_by(col(OrgPolicyRow.version).desc())
        .limit(1)
    ).first()
    return found


def newest_of_tenant(session: Session, tenant_id: uuid.UUID) -> Sequence[OrgPolicyRow]:
    """The newest version of each scope of the tenant, the tenant's own first, then by system."""
    rows = session.exec(
        select(OrgPolicyRow)
        .where(OrgPolicyRow.tenant_id == tenant_id)
        .order_by(col(OrgPolicyRow.system), col(OrgPolicyRow.version).desc())
    ).all()
    newest: dict[str, OrgPolicyRow] = {}
    for row in rows:
        newest.setdefault(row.system, row)
    return list(newest.values())


def lock_tenant(session: Session, tenant_id: uuid.UUID) -> Tenant:
    """Serialise policy versions of one tenant (SQLite serialises every writer anyway). `FOR NO
    KEY UPDATE`: submissions, whose new rows only reference the tenant, are not held up."""
    return session.exec(
        select(Tenant).where(Tenant.id == tenant_id).with_for_update(key_share=True)
    ).one()


def add(
    session: Session,
    tenant_id: uuid.UUID,
    system: str,
    *,
    document: dict[str, Any],
    digest: str,
    set_by: str,
) -> OrgPolicyRow:
    """The next version at this scope; the caller holds the tenant's lock and commits."""
    before = latest(session, tenant_id, system)
    row = OrgPolicyRow(
        tenant_id=tenant_id,
        system=system,
        version=(before.version if before else 0) + 1,
        document=document,
        digest=digest,
        set_by=set_by,
    )
    session.add(row)
    session.flush()
    return row


def systems_of(session: Session, tenant_id: uuid.UUID, name: str | None) -> Sequence[System]:
    """The tenant's systems a policy at this scope touches: all of them, or the one named."""
    query = select(System).where(System.tenant_id == tenant_id)
    if name is not None:
        query = query.where(System.name == name)
    return session.exec(query.order_by(col(System.name))).all()
