"""A tenant's stored secrets: rows of ciphertext, looked up by (tenant, name). Nothing here ever
holds a value in clear; encryption is `service.core.system.secret`'s."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session, col, select

from service.db.models import TenantSecret, as_utc, utcnow


@dataclass(frozen=True)
class SecretName:
    """What a listing shows of a secret: its name and when it was last written."""

    name: str
    created_at: datetime
    updated_at: datetime
    # The systems it is limited to; None: every system of the tenant.
    systems: tuple[str, ...] | None = None


def _named(row: TenantSecret) -> SecretName:
    systems = tuple(row.systems) if row.systems is not None else None
    return SecretName(row.name, as_utc(row.created_at), as_utc(row.updated_at), systems)


def get(session: Session, tenant_id: uuid.UUID, name: str) -> TenantSecret | None:
    return session.get(TenantSecret, (tenant_id, name))


def put(
    session: Session,
    tenant_id: uuid.UUID,
    name: str,
    ciphertext: bytes,
    systems: Sequence[str] | None = None,
) -> SecretName:
    """Create the row, or replace its ciphertext; staged in the caller's transaction. Locks an
    existing row, so two concurrent writes of one name apply one after the other."""
    row = session.exec(
        select(TenantSecret)
        .where(TenantSecret.tenant_id == tenant_id, TenantSecret.name == name)
        .with_for_update()
    ).first()
    now = utcnow()
    if row is None:
        row = TenantSecret(
            tenant_id=tenant_id, name=name, ciphertext=ciphertext, created_at=now, updated_at=now
        )
    else:
        row.ciphertext = ciphertext
        row.updated_at = now
    row.systems = list(systems) if systems is not None else None
    session.add(row)
    session.flush()
    return _named(row)


def delete(session: Session, tenant_id: uuid.UUID, name: str) -> bool:
    row = get(session, tenant_id, name)
    if row is None:
        return False
    session.delete(row)
    session.flush()
    return True


def names(session: Session, tenant_id: uuid.UUID) -> Sequence[SecretName]:
    rows = session.exec(
        select(TenantSecret)
        .where(TenantSecret.tenant_id == tenant_id)
        .order_by(col(TenantSecret.name))
    ).all()
    return [_named(row) for row in rows]


def existing(
    session: Session, tenant_id: uuid.UUID, wanted: Iterable[str]
) -> dict[str, tuple[str, ...] | None]:
    """Which of the wanted names the tenant has, each with the systems it is limited to."""
    wanted = list(wanted)
    if not wanted:
        return {}
    rows = session.exec(
        select(TenantSecret).where(
            TenantSecret.tenant_id == tenant_id, col(TenantSecret.name).in_(wanted)
        )
    ).all()
    return {row.name: _named(row).systems for row in rows}


def ciphertexts(session: Session, tenant_id: uuid.UUID, wanted: Iterable[str]) -> dict[str, bytes]:
    """The stored ciphertext of each wanted name the tenant has."""
    wanted = list(wanted)
    if not wanted:
        return {}
    rows = session.exec(
        select(TenantSecret).where(
            TenantSecret.tenant_id == tenant_id, col(TenantSecret.name).in_(wanted)
        )
    ).all()
    return {row.name: row.ciphertext for row in rows}
