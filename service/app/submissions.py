"""Submitting candidates: validate everything, write once, enqueue after the commit.

A submission is validated completely before anything is written, written in one transaction,
and enqueued only after that transaction commits (a worker must never see a task for rows it
cannot read). If the broker refuses the tasks, the committed rows are withdrawn again and the
caller gets `BrokerUnavailable`: a candidate either exists with its work queued, or not at all.

An idempotency key is claimed (its row written) in that transaction before the submission is
counted against the key's per-minute limit: repeats of one key, however concurrent, wait for the
first, replay its answer and use no submission slot.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rfc8785
import sqlalchemy as sa
from sqlmodel import Session

from service.app.admission import Admission, admit, reading_of
from service.app.errors import (
    BrokerUnavailable,
    IdempotencyConflict,
    VersionTaken,
)
from service.app.ports import Limit, Queue
from service.app.shapes import CandidateCreate
from service.core.signing.dossier import Signer
from service.db import queries
from service.db.apikey import Principal, audit
from service.db.candidate import (
    Recorded,
    find_idempotency_key,
    first_of_version,
    record_submission,
    withdraw_submission,
)
from service.db.injector import issue_for
from service.db.models import IdempotencyKey
from service.settings import Settings

log = logging.getLogger("assaygate.api")

# Concurrent first submissions for one new system (or one new manifest) race on its unique
# row; the loser retries and finds the row the winner wrote.
_RECORD_ATTEMPTS = 3

#: How the edge shows a candidate; called inside the transaction, so an idempotency key stores
#: exactly the answer the first submission gave.
Present = Callable[[queries.CandidateRow], dict[str, Any]]


@dataclass(frozen=True)
class Submitted:
    candidate_id: uuid.UUID
    response: dict[str, Any]
    status_code: int = 202
    # True when an idempotency key replayed the first submission's answer.
    replayed: bool = False


@dataclass(frozen=True)
class Services:
    """What a submission uses beyond the session: settings, the broker, the injector key and the
    key's limit (None where nothing is counted)."""

    settings: Settings
    queue: Queue
    injector_signer: Signer
    limit: Limit | None = None


def request_digest(body: CandidateCreate) -> str:
    """What identifies a request's content: a repeat of its idempotency key with another digest
    is a conflict."""
    canonical = rfc8785.dumps(body.model_dump(mode="json", exclude_unset=True))
    return hashlib.sha256(canonical).hexdigest()


def _replay(row: IdempotencyKey, digest: str) -> Submitted:
    if row.request_sha256 != digest:
        raise IdempotencyConflict(
            "this Idempotency-Key was used with a different body", field="Idempotency-Key"
        )
    return Submitted(row.candidate_id, dict(row.response), row.status_code, replayed=True)


def submit(
    session: Session,
    services: Services,
    principal: Principal,
    body: CandidateCreate,
    present: Present | None = None,
    *,
    idempotency_key: str | None = None,
) -> Submitted:
    """Record a release candidate and queue its assay; answers before the assay runs."""
    reading = reading_of(body)
    digest = request_digest(body)
    # Stored per tenant: one tenant's key never replays (or reveals) another tenant's response.
    # A repeat answers as the first time did, before the checks that read the database: a body
    # admitted once is not refused on its replay because a secret or a policy changed since.
    key = idempotency_key
    stored_key = f"{principal.tenant_id.hex}:{key}" if key else None
    if stored_key is not None:
        existing = find_idempotency_key(session, stored_key)
        if existing is not None:
            return _replay(existing, digest)
    admission = admit(session, principal, body, services.settings, reading)
    services.queue.ping()
    if services.limit is not None and stored_key is None:
        services.limit.check(principal.key_id)
    for attempt in range(_RECORD_ATTEMPTS):
        try:
            claim = (stored_key, digest) if stored_key is not None else None
            recorded, response = _record(
                session, services, principal, body, admission, claim, present
            )
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
        services.queue.enqueue_shards(
            recorded.assay.id, [s.index for s in admission.shards], admission.queue
        )
    except BrokerUnavailable:
        _withdraw(session, recorded)
        raise
    log.info(
        "candidate submitted",
        extra={
            "candidate_id": str(recorded.candidate.id),
            "assay_id": str(recorded.assay.id),
            "system": admission.system,
        },
    )
    return Submitted(recorded.candidate.id, response)


def _record(
    session: Session,
    services: Services,
    principal: Principal,
    body: CandidateCreate,
    admission: Admission,
    key: tuple[str, str] | None,
    present: Present | None,
) -> tuple[Recorded, dict[str, Any]]:
    """One attempt at the submission's transaction; committed when it returns. `key`: the
    stored idempotency key and the request's digest, to claim."""
    _one_release_per_version(session, principal, admission)
    recorded = record_submission(
        session,
        tenant_id=principal.tenant_id,
        system_name=admission.system,
        version=admission.version,
        source_revision=body.source_revision,
        manifest=admission.typed.manifest,
        plan_document=admission.plan.model_dump(mode="json"),
        catalogue=admission.plan.resolve_catalogue().version,
        shards=admission.shards,
        submitter=principal.actor,
        submitted_by=principal.person,
        lease_s=services.settings.shard_lease_s,
        code_sha256=admission.typed.code,
        policy=admission.policy.record(),
    )
    claim = _claim(session, services, principal, recorded, key) if key is not None else None
    issue_for(
        session,
        recorded.assay,
        tenant=principal.tenant,
        plan=admission.plan,
        signer=services.injector_signer,
        settings=services.settings,
    )
    row = queries.CandidateRow(recorded.candidate, recorded.system, recorded.assay)
    response = present(row) if present is not None else {}
    audit(
        session,
        principal,
        "candidate.submit",
        f"candidate:{recorded.candidate.id}",
        candidate_id=recorded.candidate.id,
        assay_id=recorded.assay.id,
        system=admission.system,
    )
    if claim is not None:
        claim.response = response
        session.add(claim)
    session.commit()
    return recorded, response


def _one_release_per_version(session: Session, principal: Principal, admission: Admission) -> None:
    """A version names one release — one manifest and one code artifact: a second, different
    one under a system's version would leave two answers for one `gate --version` (the same
    manifest and code again is a new candidate of it: a re-run)."""
    system, version = admission.system, admission.version
    first = first_of_version(session, principal.tenant_id, system, version)
    if first is None:
        return
    if first.manifest_digest != admission.typed.manifest.digest():
        raise VersionTaken(
            f"version {version} of {system} was submitted with another manifest (candidate "
            f"{first.id}, manifest {first.manifest_digest[:12]}); a changed manifest is a new "
            "version",
            field="version",
        )
    if first.code_sha256 != admission.typed.code:
        was = f"code sha256:{first.code_sha256[:12]}" if first.code_sha256 else "no code"
        raise VersionTaken(
            f"version {version} of {system} was submitted with {was} (candidate {first.id}); "
            "changed code is a new version",
            field="version",
        )


def _claim(
    session: Session,
    services: Services,
    principal: Principal,
    recorded: Recorded,
    key: tuple[str, str],
) -> IdempotencyKey:
    """Claim the key before counting the submission: a concurrent repeat waits on this row until
    the first commits, then replays it — uncounted. Only a submission that records a candidate
    uses one of the key's slots."""
    claim = IdempotencyKey(
        key=key[0],
        request_sha256=key[1],
        candidate_id=recorded.candidate.id,
        status_code=202,
        response={},
    )
    session.add(claim)
    session.flush()
    if services.limit is not None:
        services.limit.check(principal.key_id)
    return claim


def _withdraw(session: Session, recorded: Recorded) -> None:
    log.warning(
        "enqueue failed; withdrawing the submission",
        extra={"candidate_id": str(recorded.candidate.id), "assay_id": str(recorded.assay.id)},
    )
    session.rollback()
    withdraw_submission(session, recorded)
    session.commit()
