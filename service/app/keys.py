"""API keys of a tenant: mint one (shown once) for a person or service account, revoke one.

A revoked key is refused from the next request on — every request looks its key up again — and
every dashboard session signed in with it ends."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlmodel import Session

from service.app.errors import Conflict, FieldInvalid, NotFound
from service.db import apikey
from service.db.models import KeyRole, PersonKind


@dataclass(frozen=True)
class MintKey:
    """A new key of the caller's tenant, held by `person` (default: the caller's own person)."""

    roles: Sequence[KeyRole]
    name: str | None = None
    person: str | None = None
    kind: PersonKind | None = None


@dataclass(frozen=True)
class Minted:
    row: apikey.KeyRow
    # The key itself: in this answer and nowhere else, ever.
    secret: str


def mint(session: Session, principal: apikey.Principal, command: MintKey) -> Minted:
    try:
        created = apikey.create_key(
            session,
            tenant=principal.tenant,
            roles=list(command.roles),
            name=command.name,
            person=command.person,
            kind=command.kind,
            created_by=principal,
        )
    except apikey.KeyRequestInvalid as exc:
        # The request is well formed; the named person exists with the other kind.
        raise Conflict(exc.message, field=f"person.{exc.field}") from None
    apikey.audit(
        session,
        principal,
        "api_key.create",
        f"api_key:{created.key.id}",
        key_roles=sorted(created.key.roles),
        key_person=created.person.name,
    )
    session.commit()
    return _minted(session, created)


def _minted(session: Session, created: apikey.Created) -> Minted:
    row = apikey.key_row(session, created.key.id)
    assert row is not None
    return Minted(row, created.secret)


def revoke(session: Session, principal: apikey.Principal, key_id: uuid.UUID) -> apikey.KeyRow:
    """Revoke a key of the tenant; revoking twice changes nothing."""
    key = apikey.get_key(session, key_id, principal.tenant_id)
    if key is None:
        raise NotFound(f"no API key {key_id}", field="key_id")
    if apikey.revoke(session, key):
        apikey.audit(session, principal, "api_key.revoke", f"api_key:{key_id}")
    session.commit()
    row = apikey.key_row(session, key.id)
    assert row is not None
    return row


# Operators: `assaygate keys …`, `serve`'s first start and `demo` act where the database is
# configured, with no API key of their own; the minting key is recorded as None (see Principal).


@dataclass(frozen=True)
class OperatorMint:
    """A key for `tenant` (created if new), held by the named person or service account."""

    tenant: str
    roles: Sequence[KeyRole]
    person: str
    kind: PersonKind = PersonKind.PERSON
    name: str | None = None


def mint_as_operator(session: Session, command: OperatorMint) -> Minted:
    tenant = command.tenant.strip()
    if not tenant or len(tenant) > 100:
        raise FieldInvalid("must be 1 to 100 characters", field="tenant")
    try:
        created = apikey.create_key(
            session,
            tenant=tenant,
            roles=list(command.roles),
            name=command.name,
            person=command.person,
            kind=command.kind,
        )
    except apikey.KeyRequestInvalid as exc:
        raise FieldInvalid(exc.message, field=exc.field) from None
    session.commit()
    return _minted(session, created)


def first_admin(session: Session) -> Minted | None:
    """With no API key at all (an embedded first start), one admin key of the default tenant
    holding every role; otherwise None, so a restart never mints another."""
    if apikey.any_key(session):
        return None
    return mint_as_operator(
        session,
        OperatorMint(
            tenant=apikey.DEFAULT_TENANT,
            roles=list(KeyRole),
            person="admin",
            name="first admin key",
        ),
    )


def revoke_as_operator(session: Session, key_id: uuid.UUID) -> apikey.KeyRow:
    """Revoke a key of any tenant; revoking twice changes nothing."""
    key = apikey.get_key(session, key_id, None)
    if key is None:
        raise NotFound(f"no API key {key_id}", field="key_id")
    apikey.revoke(session, key)
    session.commit()
    row = apikey.key_row(session, key.id)
    assert row is not None
    return row


def of_tenant(session: Session, principal: apikey.Principal) -> Sequence[apikey.KeyRow]:
    """Every key of the caller's tenant, revoked ones included; never a secret."""
    return apikey.keys(session, principal.tenant_id)


def listing(session: Session, tenant: str | None = None) -> Sequence[apikey.KeyRow]:
    """Every key (never a secret), or those of the named tenant."""
    if tenant is None:
        return apikey.keys(session, None)
    row = apikey.tenant_by_name(session, tenant)
    if row is None:
        raise NotFound(f"no tenant {tenant}", field="tenant")
    return apikey.keys(session, row.id)
