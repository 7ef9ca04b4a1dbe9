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

import hashlib
import logging
import time
import uuid
from typing import Annotated

import rfc8785
import sqlalchemy as sa
from fastapi import APIRouter, Header, Query
from fastapi.responses import JSONResponse
from sqlmodel import Session

from service.api.deps import (
    ActorDep,
    DispatcherDep,
    InjectorSignerDep,
    MetricsDep,
    PrincipalDep,
    SessionDep,
    SettingsDep,
    SubmissionLimitDep,
    resolve,
)
from service.api.errors import (
    ERROR_RESPONSES,
    BrokerUnavailable,
    FieldInvalid,
    IdempotencyConflict,
    NotFound,
)
from service.api.present import (
    CURSOR_PATTERN,
    candidate_page,
    candidate_public,
    decode_cursor,
    encode_cursor,
)
from service.api.schemas import CandidateCreate, CandidatePage, CandidatePublic
from service.core.assay import ShardSpec, plan_shards
from service.core.contract import plan_data_for
from service.core.manifest import parse_manifest
from service.core.plan import AssayPlan, parse_plan
from service.db import queries
from service.db.apikey import audit
from service.db.candidate import (
    Recorded,
    find_idempotency_key,
    record_submission,
    withdraw_submission,
)
from service.db.injector import issue_for
from service.db.models import IdempotencyKey
from service.mcp.check import check_mcp_manifest
from service.settings import Settings

log = logging.getLogger("assaygate.api")

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

# Concurrent first submissions for one new system (or one new manifest) race on its unique
# row; the loser retries and finds the row the winner wrote.
_RECORD_ATTEMPTS = 3


def shard_size(plan: AssayPlan, settings: Settings) -> int:
    """The configured shard size, grown just enough to keep the shard count under the cap."""
    faults = 1 if plan.paper else len(plan.faults())
    shards_per_fault = max(1, settings.max_shards_per_assay // faults)
    return max(settings.trials_per_shard, -(-plan.trials // shards_per_fault))


def check_trial_limits(shards: list[ShardSpec], settings: Settings) -> None:
    """Refuse a plan over the configured trial limits before anything is written."""
    per_fault: dict[str | None, int] = {}
    for s in shards:
        per_fault[s.fault_id] = per_fault.get(s.fault_id, 0) + (s.stop - s.start)
    most = max(per_fault.values(), default=0)
    if most > settings.max_trials_per_fault:
        raise FieldInvalid(
            f"{most} trials for one fault; the limit is {settings.max_trials_per_fault}",
            field="plan.trials",
        )
    total = sum(per_fault.values())
    if total > settings.max_trials_per_assay:
        raise FieldInvalid(
            f"{total} trials in the assay; the limit is {settings.max_trials_per_assay}",
            field="plan.trials",
        )


def request_digest(body: CandidateCreate) -> str:
    canonical = rfc8785.dumps(body.model_dump(mode="json", exclude_unset=True))
    return hashlib.sha256(canonical).hexdigest()


def _replay(row: IdempotencyKey, digest: str) -> JSONResponse:
    if row.request_sha256 != digest:
        raise IdempotencyConflict(
            "this Idempotency-Key was used with a different body", field="Idempotency-Key"
        )
    return JSONResponse(
        row.response,
        status_code=row.status_code,
        headers={
            "Idempotent-Replayed": "true",
            "Location": f"/v1/candidates/{row.candidate_id}",
        },
    )


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
    actor: ActorDep,
    limit: SubmissionLimitDep = None,
    idempotency_key: IdempotencyKeyHeader = None,
) -> JSONResponse:
    """Record a release candidate and queue its assay; answers before the assay runs."""
    started = time.perf_counter()
    principal = resolve(session, actor, ("POST", "/v1/candidates"))
    manifest = parse_manifest(body.manifest)
    system = body.system or manifest.system
    version = body.version or manifest.version
    if system is None:
        raise FieldInvalid("name the system in the body or in the manifest", field="system")
    if version is None:
        raise FieldInvalid("name the version in the body or in the manifest", field="version")
    if manifest.target.kind == "mcp":
        check_mcp_manifest(manifest)
    plan = parse_plan(
        plan_data_for(manifest, body.plan.model_dump(exclude_none=True) if body.plan else {})
    )
    shards = plan_shards(manifest, plan, trials_per_shard=shard_size(plan, settings))
    check_trial_limits(shards, settings)
    digest = request_digest(body)
    # Stored per tenant: one tenant's key never replays (or reveals) another tenant's response.
    stored_key = f"{principal.tenant_id.hex}:{idempotency_key}" if idempotency_key else None

    if stored_key is not None:
        existing = find_idempotency_key(session, stored_key)
        if existing is not None:
            return _replay(existing, digest)

    dispatcher.ping()
    if limit is not None and stored_key is None:
        limit.check(principal.key_id)
    for attempt in range(_RECORD_ATTEMPTS):
        claim: IdempotencyKey | None = None
        try:
            recorded = record_submission(
                session,
                tenant_id=principal.tenant_id,
                system_name=system,
                version=version,
                source_revision=body.source_revision,
                manifest=manifest,
                plan_document=plan.model_dump(mode="json"),
                catalogue=plan.resolve_catalogue().version,
                shards=shards,
                submitter=principal.actor,
                submitted_by=principal.person,
                lease_s=settings.shard_lease_s,
            )
            if stored_key is not None:
                # Claim the key before counting the submission: a concurrent repeat waits on
                # this row until the first commits, then replays it — uncounted. Only a
                # submission that records a candidate uses one of the key's slots.
                claim = IdempotencyKey(
                    key=stored_key,
                    request_sha256=digest,
                    candidate_id=recorded.candidate.id,
                    status_code=202,
                    response={},
                )
                session.add(claim)
                session.flush()
                if limit is not None:
                    limit.check(principal.key_id)
            issue_for(
                session,
                recorded.assay,
                tenant=principal.tenant,
                plan=plan,
                signer=signer,
                settings=settings,
            )
            row = queries.CandidateRow(recorded.candidate, recorded.system, recorded.assay)
            response = candidate_public(session, row).model_dump(mode="json")
            audit(
                session,
                principal,
                "candidate.submit",
                f"candidate:{recorded.candidate.id}",
                candidate_id=recorded.candidate.id,
                assay_id=recorded.assay.id,
                system=system,
            )
            if claim is not None:
                claim.response = response
                session.add(claim)
            session.commit()
            break
        except sa.exc.IntegrityError:
            session.rollback()
            if stored_key is not None:
                existing = find_idempotency_key(session, stored_key)
                if existing is not None:
                    return _replay(existing, digest)
            if attempt == _RECORD_ATTEMPTS - 1:
                raise

    try:
        dispatcher.enqueue_shards(recorded.assay.id, [s.index for s in shards])
    except BrokerUnavailable:
        _withdraw(session, recorded)
        raise
    metrics.submission_seconds.observe(time.perf_counter() - started)
    log.info(
        "candidate submitted",
        extra={
            "candidate_id": str(recorded.candidate.id),
            "assay_id": str(recorded.assay.id),
            "system": system,
        },
    )
    return JSONResponse(
        response, status_code=202, headers={"Location": f"/v1/candidates/{recorded.candidate.id}"}
    )


def _withdraw(session: Session, recorded: Recorded) -> None:
    log.warning(
        "enqueue failed; withdrawing the submission",
        extra={"candidate_id": str(recorded.candidate.id), "assay_id": str(recorded.assay.id)},
    )
    session.rollback()
    withdraw_submission(session, recorded)
    session.commit()


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
        row = queries.candidate(session, candidate_id, tenant_id=principal.tenant_id)
        if row is None:
            raise NotFound(f"no candidate {candidate_id}", field="candidate_id")
        return candidate_public(session, row)


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
    rows = queries.candidates(
        session, system=system, limit=limit + 1, before=before, tenant_id=principal.tenant_id
    )
    page = rows[:limit]
    return CandidatePage(
        items=candidate_page(session, page),
        next_cursor=encode_cursor(page[-1]) if len(rows) > limit else None,
    )
