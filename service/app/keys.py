"""API keys of a tenant: mint one (shown once) for a person or service account, revoke one.

A revoked key is refused from the next request on — every request looks its key up again — and
every dashboard session signed in with it ends."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlmodel import Session

from service.app.errors import Conflict, NotFound
from service.db import apikey
from service.db.models import PersonKind, Role


@dataclass(frozen=True)
class MintKey:
    """A new key of the caller's tenant, held by `person` (default: the caller's own person)."""

    roles: Sequence[Role]
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
