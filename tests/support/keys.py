"""API keys for tests: created straight in the database (as `assaygate keys create` does), one
per (tenant, name), cached for the session so the suite stays fast. A key belongs to the person
named like it unless told otherwise (so by default every test key is a person of its own)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlmodel import Session

from service.db.apikey import create_key
from service.db.models import KeyRole

ALL_ROLES: tuple[KeyRole, ...] = (KeyRole.SUBMITTER, KeyRole.REVIEWER, KeyRole.ADMIN)


@dataclass(frozen=True)
class Key:
    id: uuid.UUID
    tenant: str
    roles: frozenset[KeyRole]
    secret: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}


def make_key(
    engine: sa.Engine,
    tenant: str,
    roles: Iterable[KeyRole],
    name: str | None = None,
    *,
    person: str | None = None,
) -> Key:
    with Session(engine) as session:
        created = create_key(
            session,
            tenant=tenant,
            roles=roles,
            name=name,
            person=person or name or f"person-{uuid.uuid4().hex[:8]}",
        )
        session.commit()
        return Key(
            created.key.id, tenant, frozenset(KeyRole(r) for r in created.key.roles), created.secret
        )


@dataclass
class KeyBook:
    """`book.key("alice")`: alice's key in the default tenant, with every role unless told."""

    engine: sa.Engine
    tenant: str = "acme"
    _keys: dict[tuple[str, str], Key] = field(default_factory=dict)

    def key(
        self,
        name: str,
        *,
        tenant: str | None = None,
        roles: Iterable[KeyRole] = ALL_ROLES,
        person: str | None = None,
    ) -> Key:
        where = (tenant or self.tenant, name)
        if where not in self._keys:
            self._keys[where] = make_key(self.engine, where[0], roles, name, person=person)
        return self._keys[where]

    def headers(
        self,
        name: str,
        *,
        tenant: str | None = None,
        roles: Iterable[KeyRole] = ALL_ROLES,
        person: str | None = None,
    ) -> dict[str, str]:
        return self.key(name, tenant=tenant, roles=roles, person=person).headers
