"""Tenants and API keys: a key is random, shown once, and stored only as its SHA-256.

Every request looks its key up again (no cache), so a revoked key is refused from the next
request on. The lookup is by the hash, a unique index: the database compares hashes, never keys.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session, col, select

from service.db.models import ApiKey, Event, Role, Tenant, utcnow

KEY_PREFIX = "ag_"
# What is kept in clear to recognise a key in listings: "ag_" and the first 8 random characters.
DISPLAY_CHARS = len(KEY_PREFIX) + 8
DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key, its tenant and its roles."""

    key_id: uuid.UUID
    tenant_id: uuid.UUID
    tenant: str
    roles: frozenset[Role]
    prefix: str

    @property
    def actor(self) -> str:
        """How the caller is recorded as submitter or reviewer: the key's id."""
        return str(self.key_id)

    def has_any(self, roles: Iterable[Role]) -> bool:
        return not self.roles.isdisjoint(roles)


@dataclass(frozen=True)
class Created:
    key: ApiKey
    tenant: Tenant
    secret: str


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def tenant_by_name(session: Session, name: str) -> Tenant | None:
    return session.exec(select(Tenant).where(Tenant.name == name)).first()


def ensure_tenant(session: Session, name: str) -> Tenant:
    tenant = tenant_by_name(session, name)
    if tenant is None:
        tenant = Tenant(name=name)
        session.add(tenant)
        session.flush()
    return tenant


def create_key(
    session: Session,
    *,
    tenant: str,
    roles: Iterable[Role],
    name: str | None = None,
    created_by: Principal | None = None,
) -> Created:
    """Stage a new key (the caller commits); `secret` is the only copy of the key."""
    wanted = sorted({Role(r).value for r in roles})
    if not wanted:
        raise ValueError("a key needs at least one role")
    row = ensure_tenant(session, tenant)
    secret = new_secret()
    key = ApiKey(
        tenant_id=row.id,
        roles=wanted,
        name=name,
        prefix=secret[:DISPLAY_CHARS],
        key_sha256=hash_key(secret),
        created_by=created_by.key_id if created_by else None,
    )
    session.add(key)
    session.flush()
    return Created(key, row, secret)


def authenticate(session: Session, secret: str) -> Principal | None:
    """The principal of a key that exists and is not revoked, else None."""
    if not secret.startswith(KEY_PREFIX) or len(secret) > 200:
        return None
    row = session.exec(
        select(ApiKey, Tenant)
        .join(Tenant, col(Tenant.id) == col(ApiKey.tenant_id))
        .where(ApiKey.key_sha256 == hash_key(secret))
    ).first()
    if row is None:
        return None
    key, tenant = row
    if key.revoked_at is not None:
        return None
    return principal_of(key, tenant)


def principal_of(key: ApiKey, tenant: Tenant) -> Principal:
    return Principal(
        key_id=key.id,
        tenant_id=tenant.id,
        tenant=tenant.name,
        roles=frozenset(Role(r) for r in key.roles if r in Role.__members__.values()),
        prefix=key.prefix,
    )


def principal_by_id(session: Session, key_id: uuid.UUID) -> Principal | None:
    """A key that is still valid, by its id (a dashboard session re-checks its key this way)."""
    row = session.exec(
        select(ApiKey, Tenant)
        .join(Tenant, col(Tenant.id) == col(ApiKey.tenant_id))
        .where(ApiKey.id == key_id)
    ).first()
    if row is None or row[0].revoked_at is not None:
        return None
    return principal_of(*row)


def keys(session: Session, tenant_id: uuid.UUID | None = None) -> Sequence[tuple[ApiKey, Tenant]]:
    query = select(ApiKey, Tenant).join(Tenant, col(Tenant.id) == col(ApiKey.tenant_id))
    if tenant_id is not None:
        query = query.where(ApiKey.tenant_id == tenant_id)
    rows = session.exec(query.order_by(col(ApiKey.created_at), col(ApiKey.id))).all()
    return [(k, t) for k, t in rows]


def get_key(session: Session, key_id: uuid.UUID, tenant_id: uuid.UUID | None) -> ApiKey | None:
    key = session.get(ApiKey, key_id)
    if key is None or (tenant_id is not None and key.tenant_id != tenant_id):
        return None
    return key


def revoke(session: Session, key: ApiKey, *, now: datetime | None = None) -> bool:
    """Revoke a key; False if it already was."""
    if key.revoked_at is not None:
        return False
    key.revoked_at = now or utcnow()
    session.add(key)
    session.flush()
    return True


def any_key(session: Session) -> bool:
    return session.exec(select(ApiKey.id).limit(1)).first() is not None


def audit(
    session: Session,
    principal: Principal,
    action: str,
    target: str | None,
    *,
    candidate_id: uuid.UUID | None = None,
    assay_id: uuid.UUID | None = None,
    **data: object,
) -> None:
    """Record an authenticated write: which key of which tenant, with which roles, did what to
    what. Staged in the caller's transaction, so the record and the write commit together."""
    session.add(
        Event(
            kind="audit",
            tenant_id=principal.tenant_id,
            candidate_id=candidate_id,
            assay_id=assay_id,
            data={
                "key_id": str(principal.key_id),
                "tenant": principal.tenant,
                "roles": sorted(r.value for r in principal.roles),
                "action": action,
                "target": target,
                **data,
            },
        )
    )
