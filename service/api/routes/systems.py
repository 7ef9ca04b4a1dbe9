from __future__ import annotations

from fastapi import APIRouter

from service.api.errors import ERROR_RESPONSES
from service.api.present import candidate_page
from service.api.schemas import SystemList, SystemPublic
from service.app import candidates
from service.app.records import as_utc
from service.http.deps import PrincipalDep, SessionDep

router = APIRouter(prefix="/v1/systems", tags=["systems"])


@router.get("", response_model=SystemList, responses={503: ERROR_RESPONSES[503]})
def list_systems(session: SessionDep, principal: PrincipalDep) -> SystemList:
    """Every system of the caller's tenant, with its latest candidate and what its gate says."""
    rows = candidates.systems(session, principal.tenant_id)
    newest = [r.latest for r in rows if r.latest is not None]
    latest = {c.system: c for c in candidate_page(candidates.views(session, newest))}
    return SystemList(
        items=[
            SystemPublic(
                id=row.system.id,
                name=row.system.name,
                created_at=as_utc(row.system.created_at),
                candidates=row.candidates,
                latest=latest.get(row.system.name),
            )
            for row in rows
        ]
    )
