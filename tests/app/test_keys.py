"""Operator key use cases: what `assaygate keys`, `serve`'s first start and `demo` mint."""

from __future__ import annotations

import uuid

import pytest
from sqlmodel import Session

from service.app import keys
from service.app.errors import FieldInvalid, NotFound
from service.db import apikey
from service.db.models import KeyRole, PersonKind


def test_an_operator_key_is_recorded_as_minted_by_no_key_and_authenticates(
    session: Session,
) -> None:
    minted = keys.mint_as_operator(
        session,
        keys.OperatorMint("ops-a", [KeyRole.SUBMITTER], "ci", PersonKind.SERVICE, "ci-main"),
    )
    assert minted.row.key.created_by is None
    assert minted.row.tenant.name == "ops-a"
    assert minted.row.person.kind == PersonKind.SERVICE
    principal = apikey.authenticate(session, minted.secret)
    assert principal is not None and principal.roles == frozenset({KeyRole.SUBMITTER})


@pytest.mark.parametrize("tenant", ["", "   ", "t" * 101])
def test_an_operator_key_for_a_blank_or_long_tenant_is_refused_naming_the_tenant(
    session: Session, tenant: str
) -> None:
    with pytest.raises(FieldInvalid) as refused:
        keys.mint_as_operator(session, keys.OperatorMint(tenant, [KeyRole.ADMIN], "ada"))
    assert refused.value.field == "tenant"
    assert apikey.tenant_by_name(session, tenant.strip()) is None


def test_an_operator_key_without_roles_is_refused_naming_the_roles(session: Session) -> None:
    with pytest.raises(FieldInvalid) as refused:
        keys.mint_as_operator(session, keys.OperatorMint("ops-b", [], "ada"))
    assert refused.value.field == "roles"
    assert apikey.tenant_by_name(session, "ops-b") is None


def test_the_first_admin_key_is_minted_once_with_every_role(session: Session) -> None:
    # Every test here rolls back, so the schema starts with no key at all.
    assert not apikey.any_key(session)
    first = keys.first_admin(session)
    assert first is not None
    assert set(first.row.key.roles) == {r.value for r in KeyRole}
    assert first.row.tenant.name == apikey.DEFAULT_TENANT
    assert keys.first_admin(session) is None


def test_revoking_as_operator_twice_changes_nothing_and_an_unknown_key_is_not_found(
    session: Session,
) -> None:
    minted = keys.mint_as_operator(session, keys.OperatorMint("ops-c", [KeyRole.REVIEWER], "bo"))
    first = keys.revoke_as_operator(session, minted.row.key.id)
    second = keys.revoke_as_operator(session, minted.row.key.id)
    assert first.key.revoked_at is not None and second.key.revoked_at == first.key.revoked_at
    assert apikey.authenticate(session, minted.secret) is None
    with pytest.raises(NotFound) as missing:
        keys.revoke_as_operator(session, uuid.uuid4())
    assert missing.value.field == "key_id"


def test_the_listing_of_a_tenant_holds_its_keys_only_and_an_unknown_tenant_is_not_found(
    session: Session,
) -> None:
    mine = keys.mint_as_operator(session, keys.OperatorMint("ops-d", [KeyRole.ADMIN], "cy"))
    keys.mint_as_operator(session, keys.OperatorMint("ops-e", [KeyRole.ADMIN], "di"))
    listed = keys.listing(session, "ops-d")
    assert [row.key.id for row in listed] == [mine.row.key.id]
    assert {row.tenant.name for row in keys.listing(session)} >= {"ops-d", "ops-e"}
    with pytest.raises(NotFound) as missing:
        keys.listing(session, "no-such-tenant")
    assert missing.value.field == "tenant"
