"""The tenant's named secrets (admin only): put (create or replace), list, delete. A value goes
in once and never comes out: answers carry names and times, errors name the field, the request
log records the method and path only, and the audit event holds the name."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from service.api.admin_schemas import SecretList, SecretPublic, SecretPut
from service.api.errors import ERROR_RESPONSES
from service.app import secrets
from service.core.system.secret import NAME_PATTERN
from service.http.deps import PrincipalDep, SecretsKeyDep, SessionDep

router = APIRouter(prefix="/v1/secrets", tags=["secrets"])

SecretNamePath = Annotated[
    str,
    Path(
        pattern=NAME_PATTERN,
        max_length=64,
        description="the secret's name, as a manifest's `target.secrets` names it",
    ),
]


def secret_public(row: secrets.SecretName) -> SecretPublic:
    systems = list(row.systems) if row.systems is not None else None
    return SecretPublic(name=row.name, updated_at=row.updated_at, systems=systems)


@router.get("", response_model=SecretList, responses={503: ERROR_RESPONSES[503]})
def list_secrets(session: SessionDep, principal: PrincipalDep) -> SecretList:
    """The tenant's secrets by name, with when each was last written; never a value."""
    return SecretList(items=[secret_public(r) for r in secrets.of_tenant(session, principal)])


@router.put(
    "/{name}",
    response_model=SecretPublic,
    responses={k: ERROR_RESPONSES[k] for k in (422, 503)},
)
def put_secret(
    name: SecretNamePath,
    body: SecretPut,
    session: SessionDep,
    principal: PrincipalDep,
    key: SecretsKeyDep,
) -> SecretPublic:
    """Store the tenant's secret `name` (created, or replaced), encrypted; the answer names it."""
    return secret_public(secrets.put(session, principal, key, name, body.value, body.systems))


@router.delete(
    "/{name}",
    status_code=204,
    response_class=Response,
    responses={k: ERROR_RESPONSES[k] for k in (404, 503)},
)
def delete_secret(name: SecretNamePath, session: SessionDep, principal: PrincipalDep) -> Response:
    """Delete the tenant's secret `name`; a manifest naming it is refused from now on."""
    secrets.delete(session, principal, name)
    return Response(status_code=204)
