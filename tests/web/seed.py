"""Decided candidates written straight through the db layer, for page tests and the render
bench: the same rows a worker leaves behind, without running workers."""

from __future__ import annotations

import copy
import json
import uuid
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.app import reviews
from service.app.dossiers import record_assay_dossier
from service.core.evidence.quota import Quota
from service.core.faults.plan import parse_plan
from service.core.shards.assay import plan_shards, run_assay
from service.core.signing.dossier import Signer
from service.core.system.manifest import parse_manifest
from service.core.system.text import SystemNameInvalid, check_system_name
from service.db import queries
from service.db.apikey import ensure_tenant
from service.db.assay import FaultResultValues, record_report
from service.db.candidate import Recorded, record_submission
from service.db.models import AssayShard, Hold, ShardStatus, System
from tests.support.service import example

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLAN = {"trials": 20, "seed": 7}


@lru_cache(maxsize=8)
def _report(name: str, trials: int, seed: int) -> str:
    manifest = parse_manifest(example(name))
    report = run_assay(manifest, parse_plan({"trials": trials, "seed": seed})).to_dict()
    return json.dumps(report)


def report_of(
    name: str, *, trials: int = PLAN["trials"], seed: int = PLAN["seed"]
) -> dict[str, Any]:
    """The engine's report for an example (computed once per process, copied per use)."""
    data: dict[str, Any] = json.loads(_report(name, trials, seed))
    return data


def seed_candidate(
    session: Session,
    *,
    system: str,
    version: str,
    example_name: str = "typed",
    report: dict[str, Any] | None = None,
    decided: bool = True,
    created_at: datetime | None = None,
    source_revision: str = "0123abc",
    with_shards: bool = True,
    signer: Signer | None = None,
    tenant: str = "acme",
    manifest_document: dict[str, Any] | None = None,
    policy: dict[str, Any] | None = None,
) -> Recorded:
    """One candidate of `tenant`'s `system`, decided with `report` (the example's own by
    default); `manifest_document` instead of the example's manifest, if given; `policy`: the
    organisation's policy its assay records (`service.app.policies.InForce.record`)."""
    document = manifest_document if manifest_document is not None else example(example_name)
    manifest = parse_manifest(document)
    plan = parse_plan(PLAN)
    shards = plan_shards(manifest, plan, trials_per_shard=PLAN["trials"])
    tenant_id = ensure_tenant(session, tenant).id
    try:
        check_system_name(system)
    except SystemNameInvalid:
        # A system named before names were checked (revision 0007): its row already exists.
        if queries.system_named(session, system, tenant_id) is None:
            session.add(System(name=system, tenant_id=tenant_id))
            session.flush()
    recorded = record_submission(
        session,
        tenant_id=tenant_id,
        system_name=system,
        version=version,
        source_revision=source_revision,
        manifest=manifest,
        plan_document=plan.model_dump(mode="json"),
        catalogue=plan.resolve_catalogue().version,
        shards=shards if with_shards else shards[:1],
        policy=policy,
    )
    assay = recorded.assay
    if created_at is not None:
        recorded.candidate.created_at = created_at
        assay.created_at = created_at
    if not decided:
        session.flush()
        return recorded
    report = copy.deepcopy(report) if report is not None else report_of(example_name)
    assay.shards_done = assay.shard_count
    assay.trials_done = assay.trials_planned
    assay.status = "running"
    session.flush()
    session.execute(
        sa.update(AssayShard)
        .where(col(AssayShard.assay_id) == assay.id)
        .values(status=ShardStatus.DONE.value)
    )
    faults = [
        FaultResultValues(
            fault_id=str(f["id"]),
            domain=f.get("domain"),
            trials=int(f.get("planned", 0)),
            signature={k: v for k, v in f.items() if k != "samples"},
            evidence=list(f.get("samples") or []),
        )
        for f in report.get("faults", [])
    ]
    record_report(session, assay.id, decision=str(report["decision"]), report=report, faults=faults)
    if signer is not None:
        # What the worker that wins the merge does: the first signed dossier version.
        record_assay_dossier(session, signer, assay.id, report, quota=Quota())
    session.flush()
    session.refresh(assay)
    return recorded


def seed_waiver(
    session: Session,
    signer: Signer,
    *,
    expires_at: datetime,
    waived_at: datetime | None = None,
    tenant: str = "acme",
) -> Hold:
    """A held candidate of `tenant` (a system of its own) whose hold someone else waived at
    `waived_at` (a day before it lapses, by default) until `expires_at`: the waiver a
    reconciler signs as lapsed once `expires_at` passes. Its hold; the caller commits."""
    recorded = seed_candidate(
        session, system=f"lapse-{uuid.uuid4().hex[:8]}", version="1", signer=signer, tenant=tenant
    )
    hold = session.exec(select(Hold).where(Hold.candidate_id == recorded.candidate.id)).one()
    command = reviews.ReviewHold(
        hold_id=hold.id,
        action=reviews.Action.WAIVE,
        reviewer="someone-else",
        reason="fine for the pilot",
        expires_at=expires_at,
    )
    waived = waived_at if waived_at is not None else expires_at - timedelta(days=1)
    assert reviews.record(session, signer, command, now=waived)
    return hold
