"""Tenants, people and API keys: a key is random, shown once, and stored only as its SHA-256.

Every request looks its key up again (no cache), so a revoked key is refused from the next
request on. The lookup is by the hash, a unique index: the database compares hashes, never keys.

Every key belongs to a person (or service account) of its tenant, named when the key is minted;
a key minted through the API without naming one belongs to the admin who minted it. Each key
also records the key that minted it. Separation of duties compares people (`review_conflict`).
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.db.models import (
    ApiKey,
    BrowserSession,
    Event,
    KeyRole,
    Person,
    PersonKind,
    Tenant,
    utcnow,
)

KEY_PREFIX = "ag_"
# What is kept in clear to recognise a key in listings: "ag_" and the first 8 random characters.
DISPLAY_CHARS = len(KEY_PREFIX) + 8
DEFAULT_TENANT = "default"


class KeyRequestInvalid(ValueError):
    """A key cannot be minted as asked; `field` names the part of the request at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key, its tenant and roles, the person it belongs to, and the key
    that minted it (None: minted by an operator with `assaygate keys create`)."""

    key_id: uuid.UUID
    tenant_id: uuid.UUID
    tenant: str
    roles: frozenset[KeyRole]
    prefix: str
    person_id: uuid.UUID
    person: str
    person_kind: str = PersonKind.PERSON.value
    minted_by: uuid.UUID | None = None

    @property
    def actor(self) -> str:
        """How the caller is recorded as submitter or reviewer: the key's id."""
        return str(self.key_id)

    def has_any(self, roles: Iterable[KeyRole]) -> bool:
        return not self.roles.isdisjoint(roles)


@dataclass(frozen=True)
class Created:
    key: ApiKey
    tenant: Tenant
    person: Person
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


def ensure_person(
    session: Session, tenant_id: uuid.UUID, name: str, kind: PersonKind | None = None
) -> Person:
    """The tenant's person of this name, created (as `kind`, default a person) if new. Naming an
    existing person with the other kind is refused: a person is never a service account."""
    name = name.strip()
    if not name:
        raise KeyRequestInvalid("name the person or service account the key is for", "person")
    query = select(Person).where(Person.tenant_id == tenant_id, Person.name == name)
    found = session.exec(query).first()
    if found is None:
        try:
            with session.begin_nested():
                found = Person(
                    tenant_id=tenant_id, name=name, kind=(kind or PersonKind.PERSON).value
                )
                session.add(found)
        except sa.exc.IntegrityError:  # minted concurrently for the same new person
            found = session.exec(query).one()
    if kind is not None and found.kind != kind.value:
        raise KeyRequestInvalid(f"{name} is a {found.kind}, not a {kind.value}", "kind")
    return found


def create_key(
    session: Session,
    *,
    tenant: str,
    roles: Iterable[KeyRole],
    name: str | None = None,
    person: str | None = None,
    kind: PersonKind | None = None,
    created_by: Principal | None = None,
) -> Created:
    """Stage a new key (the caller commits); `secret` is the only copy of the key.

    The key belongs to `person` (created in the tenant if new); without one, to the person of
    the key minting it — an operator minting from the command line must name one."""
    wanted = sorted({KeyRole(r).value for r in roles})
    if not wanted:
        raise KeyRequestInvalid("a key needs at least one role", "roles")
    row = ensure_tenant(session, tenant)
    if person is not None:
        holder = ensure_person(session, row.id, person, kind)
    elif created_by is not None and created_by.tenant_id == row.id:
        if kind is not None:
            raise KeyRequestInvalid("`kind` describes the `person` named with it", "kind")
        own = session.get(Person, created_by.person_id)
        assert own is not None
        holder = own
    else:
        raise KeyRequestInvalid("name the person or service account the key is for", "person")
    secret = new_secret()
    key = ApiKey(
        tenant_id=row.id,
        person_id=holder.id,
        roles=wanted,
        name=name,
        prefix=secret[:DISPLAY_CHARS],
        key_sha256=hash_key(secret),
        created_by=created_by.key_id if created_by else None,
    )
    session.add(key)
    session.flush()
    return Created(key, row, holder, secret)


def plausible_secret(secret: str) -> bool:
    """Shaped like a key at all: anything else is refused without a lookup."""
    return secret.startswith(KEY_PREFIX) and len(secret) <= 200


def roles_of(stored: Iterable[str]) -> frozenset[KeyRole]:
    """A key's stored roles that this version knows; an unknown one grants nothing."""
    return frozenset(KeyRole(r) for r in stored if r in KeyRole.__members__.values())


def authenticate(session: Session, secret: str) -> Principal | None:
    """The principal of a key that exists and is not revoked, else None. (`hotreads` sends the
    same read without a session on the API's hot path.)"""
    if not plausible_secret(secret):
        return None
    row = session.exec(_with_owner().where(ApiKey.key_sha256 == hash_key(secret))).first()
    if row is None:
        return None
    key, tenant, person = row
    if key.revoked_at is not None:
        return None
    return principal_of(key, tenant, person)


def _with_owner() -> Any:
    return (
        select(ApiKey, Tenant, Person)
        .join(Tenant, col(Tenant.id) == col(ApiKey.tenant_id))
        .join(Person, col(Person.id) == col(ApiKey.person_id))
    )


def principal_of(key: ApiKey, tenant: Tenant, person: Person) -> Principal:
    return Principal(
        key_id=key.id,
        tenant_id=tenant.id,
        tenant=tenant.name,
        roles=roles_of(key.roles),
        prefix=key.prefix,
        person_id=person.id,
        person=person.name,
        person_kind=person.kind,
        minted_by=key.created_by,
    )


def principal_by_id(session: Session, key_id: uuid.UUID) -> Principal | None:
    """A key that is still valid, by its id (a dashboard session re-checks its key this way)."""
    row = session.exec(_with_owner().where(ApiKey.id == key_id)).first()
    if row is None or row[0].revoked_at is not None:
        return None
    return principal_of(*row)


@dataclass(frozen=True)
class KeyRow:
    key: ApiKey
    tenant: Tenant
    person: Person
    # The person behind the key that minted this one (None: minted by an operator).
    minted_by: Person | None


def keys(session: Session, tenant_id: uuid.UUID | None = None) -> Sequence[KeyRow]:
    query = _with_owner()
    if tenant_id is not None:
        query = query.where(ApiKey.tenant_id == tenant_id)
    rows = session.exec(query.order_by(col(ApiKey.created_at), col(ApiKey.id))).all()
    minters = _people_of_keys(session, {k.created_by for k, _, _ in rows if k.created_by})
    return [
        KeyRow(k, t, p, minters.get(k.created_by) if k.created_by else None) for k, t, p in rows
    ]


def _people_of_keys(session: Session, key_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Person]:
    wanted = list(set(key_ids))
    if not wanted:
        return {}
    rows = session.exec(
        select(ApiKey.id, Person)
        .join(Person, col(Person.id) == col(ApiKey.person_id))
        .where(col(ApiKey.id).in_(wanted))
    ).all()
    return {key_id: person for key_id, person in rows}


def key_row(session: Session, key_id: uuid.UUID) -> KeyRow | None:
    row = session.exec(_with_owner().where(ApiKey.id == key_id)).first()
    if row is None:
        return None
    key, tenant, person = row
    minter = _people_of_keys(session, [key.created_by]) if key.created_by else {}
    return KeyRow(key, tenant, person, minter.get(key.created_by) if key.created_by else None)


def actor_view(session: Session, key_id: str | uuid.UUID | None) -> dict[str, Any] | None:
    """Who acted through a key, as the signed dossier records it: the key, the person or service
    account it belongs to, and the person who minted it."""
    if key_id is None:
        return None
    try:
        found = key_row(session, uuid.UUID(str(key_id)))
    except ValueError:
        found = None
    if found is None:
        return None
    return {
        "key_id": str(found.key.id),
        "key_name": found.key.name,
        "person": found.person.name,
        "kind": found.person.kind,
        "minted_by": found.minted_by.name if found.minted_by else None,
    }


# ------------------------------------------------------------------- separation of duties


def review_conflict(session: Session, reviewer: Principal, submitter_key: str | None) -> str | None:
    """Why `reviewer` may not review a candidate submitted through `submitter_key`, or None.

    The reviewer and the submitter must be different people, and neither may have minted the
    other's key (whoever mints a key sees its secret once, so may have acted through it):

    1. the reviewer is the person the submitting key belongs to;
    2. the reviewer minted the submitting key (an admin who mints a CI key does not review
       what that key submits);
    3. the submitter minted the reviewer's key.
    """
    if submitter_key is None:
        return None
    try:
        submitted = key_row(session, uuid.UUID(submitter_key))
    except ValueError:
        submitted = None
    if submitted is None:
        return None
    if submitted.person.id == reviewer.person_id:
        return f"{reviewer.person} submitted this candidate and may not review it"
    if submitted.minted_by is not None and submitted.minted_by.id == reviewer.person_id:
        return (
            f"{reviewer.person} minted the key that submitted this candidate "
            f"({key_label(submitted.key)}) and may not review it"
        )
    if reviewer.minted_by is not None:
        minter = _people_of_keys(session, [reviewer.minted_by]).get(reviewer.minted_by)
        if minter is not None and minter.id == submitted.person.id:
            return (
                f"{submitted.person.name} submitted this candidate and minted this reviewer's "
                f"key, which may not review it"
            )
    return None


def key_label(key: ApiKey) -> str:
    """A key as a message names it: its name, else the start of its id — never the first
    characters of its secret (`prefix`), which would leak into dossiers, logs and pages."""
    return f"key {key.name}" if key.name else f"key {str(key.id)[:8]}"


def get_key(session: Session, key_id: uuid.UUID, tenant_id: uuid.UUID | None) -> ApiKey | None:
    key = session.get(ApiKey, key_id)
    if key is None or (tenant_id is not None and key.tenant_id != tenant_id):
        return None
    return key


def revoke(session: Session, key: ApiKey, *, now: datetime | None = None) -> bool:
    """Revoke a key and end every dashboard session signed in with it; False if it already
    was revoked."""
    if key.revoked_at is not None:
        return False
    key.revoked_at = now or utcnow()
    session.add(key)
    session.execute(
        sa.update(BrowserSession)
        .where(col(BrowserSession.key_id) == key.id, col(BrowserSession.ended_at).is_(None))
        .values(ended_at=key.revoked_at)
    )
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
                "person": principal.person,
                "tenant": principal.tenant,
                "roles": sorted(r.value for r in principal.roles),
                "action": action,
                "target": target,
                **data,
            },
        )
    )
