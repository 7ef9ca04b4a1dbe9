"""API keys of the caller's tenant (admin only): create (the key is shown once), list, revoke.

Each key is minted for a named person or service account (by default the admin's own person)
and records who minted it. A revoked key is refused from the next request on — every request
looks its key up again — and every dashboard session signed in with it ends."""

from __future__ import annotations

import uuid

from fastapi import APIRouter

from service.api.admin_schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyList, ApiKeyPublic
from service.api.errors import ERROR_RESPONSES
from service.app import keys
from service.app.records import KeyRole, KeyRow, PersonKind, as_utc, as_utc_or_none
from service.http.deps import PrincipalDep, SessionDep

router = APIRouter(prefix="/v1/api-keys", tags=["api-keys"])


def key_public(row: KeyRow) -> ApiKeyPublic:
    key = row.key
    return ApiKeyPublic(
        id=key.id,
        tenant=row.tenant.name,
        roles=[KeyRole(r) for r in key.roles],
        name=key.name,
        person=row.person.name,
        kind="service" if row.person.kind == PersonKind.SERVICE.value else "person",
        minted_by=row.minted_by.name if row.minted_by else None,
        created_at=as_utc(key.created_at),
        revoked_at=as_utc_or_none(key.revoked_at),
    )


@router.get("", response_model=ApiKeyList, responses={503: ERROR_RESPONSES[503]})
def list_api_keys(session: SessionDep, principal: PrincipalDep) -> ApiKeyList:
    """Every key of the tenant, revoked ones included; never the keys themselves."""
    return ApiKeyList(items=[key_public(row) for row in keys.of_tenant(session, principal)])


@router.post(
    "",
    status_code=201,
    response_model=ApiKeyCreated,
    responses={k: ERROR_RESPONSES[k] for k in (409, 422, 503)},
)
def create_api_key(
    body: ApiKeyCreate, session: SessionDep, principal: PrincipalDep
) -> ApiKeyCreated:
    """A new key for the caller's tenant, held by `person` (default: the caller's own person).
    The response holds the key; nothing else ever will."""
    minted = keys.mint(
        session,
        principal,
        keys.MintKey(
            roles=body.roles,
            name=body.name,
            person=body.person.name if body.person else None,
            kind=PersonKind(body.person.kind) if body.person else None,
        ),
    )
    return ApiKeyCreated(**key_public(minted.row).model_dump(), key=minted.secret)


@router.delete(
    "/{key_id}",
    response_model=ApiKeyPublic,
    responses={k: ERROR_RESPONSES[k] for k in (404, 503)},
)
def revoke_api_key(key_id: uuid.UUID, session: SessionDep, principal: PrincipalDep) -> ApiKeyPublic:
    """Revoke a key of the tenant; refused from the next request on. Revoking twice is a no-op."""
    return key_public(keys.revoke(session, principal, key_id))
