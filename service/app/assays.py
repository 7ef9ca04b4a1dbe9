"""Assays after submission: a re-run adds a new dossier version with its own trial counts (it
replaces the standing evidence whatever it says: no best-of-N); an abort stops one and ends it."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session

from service.app.admission import readmit
from service.app.dossiers import Decide, decide_or_fail
from service.app.errors import BrokerUnavailable, Conflict, NotFound
from service.app.submissions import Services
from service.core.errors import AssaygateError
from service.core.evidence.quota import Quota
from service.core.faults.plan import parse_plan
from service.core.shards.assay import ShardResult, merge
from service.core.signing.dossier import Signer
from service.core.system.manifest import parse_manifest
from service.db import queries
from service.db.apikey import Principal, audit
from service.db.assay import OPEN, assay_inputs
from service.db.candidate import record_rerun, withdraw_rerun
from service.db.injector import issue_for, request_stop
from service.db.lease import settle_stopped
from service.db.models import Assay, AssayStatus, Candidate, ManifestRow
from service.db.queries import FaultProgress, LiveProgress

log = logging.getLogger("assaygate.api")


@dataclass(frozen=True)
class Rerun:
    """Assay a candidate again, with plan fields that override the last assay's plan."""

    candidate_id: uuid.UUID
    plan: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Rerunning:
    candidate_id: uuid.UUID
    assay_id: uuid.UUID
    # The edge's answer, shown inside the transaction (before any worker starts).
    response: dict[str, Any]


def rerun(
    session: Session,
    services: Services,
    principal: Principal,
    command: Rerun,
    present: Callable[[queries.CandidateRow], dict[str, Any]] | None = None,
) -> Rerunning:
    """Record a new assay of the candidate, commit, then enqueue its shards; withdrawn again if
    the broker refuses them. Counted against the key's submissions per minute."""
    candidate_id = command.candidate_id
    row = queries.candidate(session, candidate_id, tenant_id=principal.tenant_id)
    if row is None:
        raise NotFound(f"no candidate {candidate_id}", field="candidate_id")
    admission = readmit(session, row, dict(command.plan or {}), services.settings, principal.tenant)
    plan, shards, force = admission.plan, admission.shards, admission.policy
    services.queue.ping()
    if services.limit is not None:
        services.limit.check(principal.key_id)
    assay = record_rerun(
        session,
        row.candidate,
        plan_document=plan.model_dump(mode="json"),
        catalogue=plan.resolve_catalogue().version,
        shards=shards,
        requested_by=principal.actor,
        person=principal.person,
        lease_s=services.settings.shard_lease_s,
        policy=force.record(),
    )
    issue_for(
        session,
        assay,
        tenant=principal.tenant,
        plan=plan,
        signer=services.injector_signer,
        settings=services.settings,
    )
    shown = queries.CandidateRow(row.candidate, row.system, assay)
    response = present(shown) if present is not None else {}
    audit(
        session,
        principal,
        "candidate.rerun",
        f"candidate:{candidate_id}",
        candidate_id=candidate_id,
        assay_id=assay.id,
    )
    session.commit()
    try:
        services.queue.enqueue_shards(
            assay.id,
            [s.index for s in shards],
            admission.queue,
        )
    except BrokerUnavailable:
        session.rollback()
        withdraw_rerun(session, assay.id)
        session.commit()
        raise
    log.info(
        "candidate re-run", extra={"candidate_id": str(candidate_id), "assay_id": str(assay.id)}
    )
    return Rerunning(candidate_id, assay.id, response)


@dataclass(frozen=True)
class Abort:
    assay_id: uuid.UUID
    # The storage quotas the report and dossier are cut to if this abort decides the assay
    # (the deployment's: `Settings.quota()`).
    quota: Quota
    reason: str | None = None


def abort(session: Session, signer: Signer, principal: Principal, command: Abort) -> Assay:
    """Stop an assay and end it. No shard starts after the stop is recorded; shards that no live
    worker holds are stored at once as stopped, empty; running shards stop at their next batch.
    The assay is decided `block` as soon as no shard is running: here, if none is. Repeating an
    abort changes nothing recorded, and settles any shard whose worker has gone since."""
    assay_id = command.assay_id
    assay = get(session, principal.tenant_id, assay_id)
    reason = f"aborted: {command.reason}" if command.reason else "aborted"
    recorded = request_stop(
        session, assay_id, reason, kind="assay.aborted", data={"by": principal.actor}
    )
    if recorded:
        audit(
            session,
            principal,
            "assay.abort",
            f"assay:{assay_id}",
            candidate_id=assay.candidate_id,
            assay_id=assay_id,
            reason=reason,
        )
    # The stop is committed first, on its own: every worker sees it at its next check, and no
    # shard starts after it is recorded. Settling what is left is a second step.
    session.commit()
    session.refresh(assay)
    if assay.stop_reason is None:
        raise Conflict(f"assay {assay_id} is already {assay.status}", field="assay_id")
    if assay.status in OPEN:
        settle_stopped(session, assay_id, assay.stop_reason, by=f"abort:{principal.actor}")
        inputs = assay_inputs(session, assay_id)
        assert inputs is not None
        manifest, plan = parse_manifest(inputs.manifest), parse_plan(inputs.plan)
        decide_or_fail(session, signer, Decide(assay_id, manifest, plan, command.quota))
    session.commit()
    session.refresh(assay)
    return assay


def get(session: Session, tenant_id: uuid.UUID, assay_id: uuid.UUID) -> Assay:
    """The tenant's assay; NotFound for another tenant's or none."""
    assay = queries.assay(session, assay_id, tenant_id=tenant_id)
    if assay is None:
        raise NotFound(f"no assay {assay_id}", field="assay_id")
    return assay


def fault_progress(session: Session, assay_id: uuid.UUID) -> list[FaultProgress]:
    """The assay's shards and trials, planned and done, per fault."""
    return queries.fault_progress(session, assay_id)


def live_progress(session: Session, assay_id: uuid.UUID) -> LiveProgress:
    """What the assay's workers are doing (while it runs), and the runs it took."""
    return queries.live_progress(session, assay_id)


def signatures(session: Session, assay: Assay) -> dict[str, dict[str, Any]]:
    """Per-fault signatures: the stored final ones, or a merge of the shards done so far."""
    if assay.status in (AssayStatus.DONE, AssayStatus.STOPPED):
        return {f.fault_id: f.signature for f in queries.fault_results(session, assay.id)}
    results = queries.done_shard_results(session, assay.id)
    if not results:
        return {}
    candidate = session.get(Candidate, assay.candidate_id)
    assert candidate is not None
    manifest = session.get(ManifestRow, candidate.manifest_digest)
    assert manifest is not None
    try:
        report = merge(
            parse_manifest(manifest.document),
            parse_plan(assay.plan),
            [ShardResult.from_dict(r) for r in results],
        )
    except AssaygateError:
        # The engine may refuse to merge a partial set; progress is still shown without it.
        return {}
    return {f.id: f.to_dict() for f in report.faults}
