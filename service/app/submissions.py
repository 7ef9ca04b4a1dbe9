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

from service.app import policies
from service.app.artifacts import check_named as check_artifact
from service.app.errors import (
    BrokerUnavailable,
    FieldInvalid,
    IdempotencyConflict,
    VersionTaken,
)
from service.app.ports import Limit, Queue
from service.app.secrets import check_named
from service.app.shapes import CandidateCreate
from service.app.tenants import check_code, queue_for
from service.core.faults.contract_catalogue import plan_data_for
from service.core.faults.plan import AssayPlan, parse_plan
from service.core.shards.assay import ShardSpec, plan_shards
from service.core.signing.dossier import Signer
from service.core.system.egress import manifest_urls
from service.core.system.manifest import Manifest, parse_manifest
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
from service.mcp.check import check_mcp_manifest
from service.net.egress import EgressPolicy, EgressRefused
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


@dataclass(frozen=True)
class _Checked:
    manifest: Manifest
    system: str
    version: str
    # The plan as submitted; `admitted` raises it to the organisation's policy.
    plan: AssayPlan


@dataclass(frozen=True)
class _Admitted:
    """A checked submission under the policy in force: the effective plan (its envelope
    included) and its shards, and the policy it is held to."""

    plan: AssayPlan
    shards: list[ShardSpec]
    policy: policies.InForce


def _check(body: CandidateCreate, settings: Settings) -> _Checked:
    manifest = parse_manifest(body.manifest)
    system = body.system or manifest.system
    version = body.version or manifest.version
    if system is None:
        raise FieldInvalid("name the system in the body or in the manifest", field="system")
    if version is None:
        raise FieldInvalid("name the version in the body or in the manifest", field="version")
    if manifest.target.kind == "mcp":
        # Bounded by the source's length: each predicate is priced in Python before the Rust
        # compile (which holds the GIL), and nothing is evaluated (service/mcp/cel.py). The
        # routes that submit are sync, so this runs in the threadpool, never on the event loop.
        check_mcp_manifest(manifest)
    if manifest_urls(manifest):
        try:
            EgressPolicy.from_settings(settings).check_manifest(manifest)
        except EgressRefused as exc:
            raise FieldInvalid(f"egress refused: {exc.message}", field=exc.field) from None
    plan = parse_plan(
        plan_data_for(manifest, body.plan.model_dump(exclude_none=True) if body.plan else {})
    )
    # Within the limits as submitted, before the database is read (the policy may raise them).
    check_trial_limits(
        plan_shards(manifest, plan, trials_per_shard=shard_size(plan, settings)), settings
    )
    return _Checked(manifest, system, version, plan)


def admitted(
    session: Session, principal: Principal, checked: _Checked, settings: Settings
) -> _Admitted:
    """The submission under the organisation's policy for its system: refused (PolicyRefused,
    naming the field and the policy) where it sets a field looser; raised where it says
    nothing. The assay runs, and the dossier records, what comes out."""
    force = policies.in_force(session, principal.tenant_id, principal.tenant, checked.system)
    plan = policies.admit(force, checked.manifest, checked.plan).plan
    shards = plan_shards(checked.manifest, plan, trials_per_shard=shard_size(plan, settings))
    check_trial_limits(shards, settings)
    return _Admitted(plan, shards, force)


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
    checked = _check(body, services.settings)
    check_code(session, principal.tenant_id, principal.tenant, checked.manifest)
    code = check_artifact(session, principal.tenant_id, principal.tenant, body.code)
    digest = request_digest(body)
    # Stored per tenant: one tenant's key never replays (or reveals) another tenant's response.
    key = idempotency_key
    stored_key = f"{principal.tenant_id.hex}:{key}" if key else None
    if stored_key is not None:
        existing = find_idempotency_key(session, stored_key)
        if existing is not None:
            return _replay(existing, digest)
    # Every secret the manifest names must be stored for the tenant (names only: the manifest,
    # and so the dossier, never holds a value). A replay above answers as the first time did.
    check_named(
        session,
        principal.tenant_id,
        checked.manifest.target.secrets,
        "manifest.target.secrets",
        checked.system,
    )
    admission = admitted(session, principal, checked, services.settings)
    services.queue.ping()
    if services.limit is not None and stored_key is None:
        services.limit.check(principal.key_id)
    for attempt in range(_RECORD_ATTEMPTS):
        try:
            claim = (stored_key, digest) if stored_key is not None else None
            recorded, response = _record(
                session, services, principal, body, checked, admission, claim, present, code
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
            recorded.assay.id,
            [s.index for s in admission.shards],
            queue_for(services.settings, principal.tenant, checked.manifest),
        )
    except BrokerUnavailable:
        _withdraw(session, recorded)
        raise
    log.info(
        "candidate submitted",
        extra={
            "candidate_id": str(recorded.candidate.id),
            "assay_id": str(recorded.assay.id),
            "system": checked.system,
        },
    )
    return Submitted(recorded.candidate.id, response)


def _record(
    session: Session,
    services: Services,
    principal: Principal,
    body: CandidateCreate,
    checked: _Checked,
    admission: _Admitted,
    key: tuple[str, str] | None,
    present: Present | None,
    code: str | None = None,
) -> tuple[Recorded, dict[str, Any]]:
    """One attempt at the submission's transaction; committed when it returns. `key`: the
    stored idempotency key and the request's digest, to claim; `code`: the hex digest of the
    tenant's code artifact the candidate names."""
    _one_manifest_per_version(session, principal, checked)
    recorded = record_submission(
        session,
        tenant_id=principal.tenant_id,
        system_name=checked.system,
        version=checked.version,
        source_revision=body.source_revision,
        manifest=checked.manifest,
        plan_document=admission.plan.model_dump(mode="json"),
        catalogue=admission.plan.resolve_catalogue().version,
        shards=admission.shards,
        submitter=principal.actor,
        submitted_by=principal.person,
        lease_s=services.settings.shard_lease_s,
        code_sha256=code,
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
        system=checked.system,
    )
    if claim is not None:
        claim.response = response
        session.add(claim)
    session.commit()
    return recorded, response


def _one_manifest_per_version(session: Session, principal: Principal, checked: _Checked) -> None:
    """A version names one manifest: a second, different manifest under a system's version would
    leave two answers for one `gate --version` (the same manifest again is a new candidate of it:
    a re-run)."""
    first = first_of_version(session, principal.tenant_id, checked.system, checked.version)
    if first is not None and first.manifest_digest != checked.manifest.digest():
        raise VersionTaken(
            f"version {checked.version} of {checked.system} was submitted with another manifest "
            f"(candidate {first.id}, manifest {first.manifest_digest[:12]}); a changed manifest "
            "is a new version",
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
