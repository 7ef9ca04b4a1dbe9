"""Assays of a candidate after its first: a re-run adds a new dossier version with its own trial
counts; it replaces the standing evidence whatever it says (no best-of-N)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session

from service.app.errors import BrokerUnavailable, NotFound
from service.app.submissions import Services, check_trial_limits, shard_size
from service.core.assay import plan_shards
from service.core.manifest import parse_manifest
from service.core.plan import parse_plan
from service.db import queries
from service.db.apikey import Principal, audit
from service.db.candidate import record_rerun, withdraw_rerun
from service.db.injector import issue_for
from service.db.models import Manifest

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
    manifest_row = session.get(Manifest, row.candidate.manifest_digest)
    assert manifest_row is not None
    manifest = parse_manifest(manifest_row.document)
    previous = queries.assay(session, row.assay.id)
    assert previous is not None
    plan = parse_plan({**previous.plan, **dict(command.plan or {})})
    shards = plan_shards(manifest, plan, trials_per_shard=shard_size(plan, services.settings))
    check_trial_limits(shards, services.settings)
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
        lease_s=services.settings.shard_lease_s,
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
        services.queue.enqueue_shards(assay.id, [s.index for s in shards])
    except BrokerUnavailable:
        session.rollback()
        withdraw_rerun(session, assay.id)
        session.commit()
        raise
    log.info(
        "candidate re-run", extra={"candidate_id": str(candidate_id), "assay_id": str(assay.id)}
    )
    return Rerunning(candidate_id, assay.id, response)
