"""The event log of the caller's tenant, newest first: its audit records and everything that
happened to its candidates and assays."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from service.api.errors import ERROR_RESPONSES
from service.api.schemas import EventPage, EventPublic
from service.app import browse
from service.app.records import as_utc
from service.http.deps import PrincipalDep, SessionDep

router = APIRouter(prefix="/v1/events", tags=["events"])


@router.get("", response_model=EventPage, responses={503: ERROR_RESPONSES[503]})
def list_events(
    session: SessionDep,
    principal: PrincipalDep,
    candidate_id: uuid.UUID | None = None,
    kind: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    before: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> EventPage:
    found = browse.events_page(
        session,
        tenant_id=principal.tenant_id,
        limit=limit,
        before=before,
        kind=kind,
        candidate_id=candidate_id,
        fold_shards=False,
    )
    return EventPage(
        items=[
            EventPublic(
                id=int(e.id or 0),
                at=as_utc(e.at),
                kind=e.kind,
                candidate_id=e.candidate_id,
                assay_id=e.assay_id,
                shard_index=e.shard_index,
                data=e.data,
            )
            for e in found.events
        ],
        next_before=found.next_before,
    )
