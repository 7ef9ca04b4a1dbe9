"""Submitting candidates and reading their status.

A submission is validated completely before anything is written, written in one transaction,
and enqueued only after that transaction commits (a worker must never see a task for rows it
cannot read). If the broker refuses the tasks, the committed rows are withdrawn again and the
client gets 503: a candidate either exists with its work queued, or not at all.

An `Idempotency-Key` is claimed (its row written) in that transaction before the submission is
counted against the key's per-minute limit: repeats of one key, however concurrent, wait for the
first, replay its answer and use no submission slot.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import JSONResponse

from service.api.errors import ERROR_RESPONSES
from service.api.present import (
    CURSOR_PATTERN,
    candidate_page,
    candidate_public,
    decode_cursor,
    encode_cursor,
)
from service.api.schemas import CandidateCreate, CandidatePage, CandidatePublic
from service.app import candidates, submissions
from service.http.deps import (
    DispatcherDep,
    InjectorSignerDep,
    MetricsDep,
    PrincipalDep,
    SessionDep,
    SettingsDep,
    SubmissionLimitDep,
)

router = APIRouter(prefix="/v1/candidates", tags=["candidates"])

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=200,
        description="Retry-safe submission: the same key and body replay the first response.",
    ),
]


@router.post(
    "",
    status_code=202,
    response_model=CandidatePublic,
    responses={k: ERROR_RESPONSES[k] for k in (400, 409, 413, 422, 429, 503)},
)
def submit_candidate(
    body: CandidateCreate,
    session: SessionDep,
    settings: SettingsDep,
    dispatcher: DispatcherDep,
    metrics: MetricsDep,
    signer: InjectorSignerDep,
    principal: PrincipalDep,
    limit: SubmissionLimitDep = None,
    idempotency_key: IdempotencyKeyHeader = None,
) -> JSONResponse:
    """Record a release candidate and queue its assay; answers before the assay runs."""
    started = time.perf_counter()
    done = submissions.submit(
        session,
        submissions.Services(settings, dispatcher, signer, limit),
        principal,
        body,
        lambda row: candidate_public(candidates.view(session, row)).model_dump(mode="json"),
        idempotency_key=idempotency_key,
    )
    headers = {"Location": f"/v1/candidates/{done.candidate_id}"}
    if done.replayed:
        return JSONResponse(
            done.response,
            status_code=done.status_code,
            headers={"Idempotent-Replayed": "true", **headers},
        )
    metrics.submission_seconds.observe(time.perf_counter() - started)
    return JSONResponse(done.response, status_code=202, headers=headers)


@router.get(
    "/{candidate_id}",
    response_model=CandidatePublic,
    responses={k: ERROR_RESPONSES[k] for k in (404, 503)},
)
def get_candidate(
    candidate_id: uuid.UUID,
    session: SessionDep,
    metrics: MetricsDep,
    principal: PrincipalDep,
) -> CandidatePublic:
    """Status, progress, the assay's decision once it is done, and what the gate says now."""
    with metrics.gate_check_seconds.time():
        row = candidates.get(session, principal.tenant_id, candidate_id)
        return candidate_public(candidates.view(session, row))


@router.get(
    "",
    response_model=CandidatePage,
    responses={k: ERROR_RESPONSES[k] for k in (400, 503)},
)
def list_candidates(
    session: SessionDep,
    principal: PrincipalDep,
    system: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(max_length=60, pattern=CURSOR_PATTERN)] = None,
) -> CandidatePage:
    """Newest first. Follow `next_cursor` until it is null."""
    before = decode_cursor(cursor) if cursor else None
    rows = candidates.page(
        session, principal.tenant_id, system=system, limit=limit + 1, before=before
    )
    page = rows[:limit]
    return CandidatePage(
        items=candidate_page(candidates.views(session, page)),
        next_cursor=encode_cursor(page[-1]) if len(rows) > limit else None,
    )
