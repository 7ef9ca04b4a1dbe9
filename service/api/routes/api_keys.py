"""API keys of the caller's tenant (admin only): create (the key is shown once), list, revoke.

A revoked key is refused from the next request on: every request looks its key up again."""

from __future__ import annotations

import uuid

from fastapi import APIRouter

from service.api.deps import PrincipalDep, SessionDep
from service.api.errors import ERROR_RESPONSES, NotFound
from service.api.present import aware, maybe_aware
from service.api.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyList, ApiKeyPublic
from service.db import apikey
from service.db.models import ApiKey, Role, Tenant

router = APIRouter(prefix="/v1/api-keys", tags=["api-keys"])


def key_public(key: ApiKey, tenant: Tenant) -> ApiKeyPublic:
    return ApiKeyPublic(
        id=key.id,
        tenant=tenant.name,
        roles=[Role(r) for r in key.roles],
        name=key.name,
        prefix=key.prefix,
        created_at=aware(key.created_at),
        revoked_at=maybe_aware(key.revoked_at),
    )


@router.get("", response_model=ApiKeyList, responses={503: ERROR_RESPONSES[503]})
def list_api_keys(session: SessionDep, principal: PrincipalDep) -> ApiKeyList:
    """Every key of the tenant, revoked ones included; never the keys themselves."""
    return ApiKeyList(
        items=[key_public(k, t) for k, t in apikey.keys(session, principal.tenant_id)]
    )


@router.post(
    "",
    status_code=201,
    response_model=ApiKeyCreated,
    responses={k: ERROR_RESPONSES[k] for k in (422, 503)},
)
def create_api_key(
    body: ApiKeyCreate, session: SessionDep, principal: PrincipalDep
) -> ApiKeyCreated:
    """A new key for the caller's tenant. The response holds the key; nothing else ever will."""
    created = apikey.create_key(
        session, tenant=principal.tenant, roles=body.roles, name=body.name, created_by=principal
    )
    apikey.audit(
        session,
        principal,
        "api_key.create",
        f"api_key:{created.key.id}",
        key_roles=sorted(created.key.roles),
    )
    session.commit()
    return ApiKeyCreated(**key_public(created.key, created.tenant).model_dump(), key=created.secret)


@router.delete(
    "/{key_id}",
    response_model=ApiKeyPublic,
    responses={k: ERROR_RESPONSES[k] for k in (404, 503)},
)
def revoke_api_key(key_id: uuid.UUID, session: SessionDep, principal: PrincipalDep) -> ApiKeyPublic:
    """Revoke a key of the tenant; refused from the next request on. Revoking twice is a no-op."""
    key = apikey.get_key(session, key_id, principal.tenant_id)
    if key is None:
        raise NotFound(f"no API key {key_id}", field="key_id")
    if apikey.revoke(session, key):
        apikey.audit(session, principal, "api_key.revoke", f"api_key:{key_id}")
    session.commit()
    tenant = session.get(Tenant, key.tenant_id)
    assert tenant is not None
    return key_public(key, tenant)
