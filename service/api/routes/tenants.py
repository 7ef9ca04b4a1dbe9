"""The caller's tenant: its name and whether it may run code on this service (any role)."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.admin_schemas import TenantPublic
from service.api.errors import ERROR_RESPONSES
from service.app import tenants
from service.http.deps import PrincipalDep, SessionDep, SettingsDep

router = APIRouter(prefix="/v1/tenant", tags=["tenant"])


@router.get("", response_model=TenantPublic, responses={503: ERROR_RESPONSES[503]})
def get_tenant(session: SessionDep, settings: SettingsDep, principal: PrincipalDep) -> TenantPublic:
    """The caller's tenant: may its manifests name code, since when, and its code queue."""
    view = tenants.of(session, settings, principal.tenant_id)
    return TenantPublic(
        name=view.name,
        code_allowed=view.code_allowed,
        code_changed_at=view.code_changed_at,
        code_queue=view.code_queue,
    )
