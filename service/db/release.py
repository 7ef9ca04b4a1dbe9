"""The attempts of a release (`service.core.decision.release`): every finished assay of one
system's candidates with the same code, manifest and policy digests, oldest first, with what each
graded of every floor (read from its stored fault_result rows, never from the submitter), and the
lock that makes a finishing attempt see every attempt that finished before it."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.core.decision.gate import reason_view
from service.core.decision.release import Attempt, Release, graded
from service.db import dossier as dossiers
from service.db.models import Assay, Candidate, FaultResultRow


def lock(session: Session, assay_id: uuid.UUID) -> Release:
    """The release the assay decides, with the assay's row and then its system's locked until
    the transaction ends: two attempts of one release that finish together take turns, so the
    later one reads the earlier's decision (the assay first, as a stop or an abort that settles
    it does, then the system, as the dossier's writer does: one order, no deadlock)."""
    assay = session.exec(
        select(Assay)
        .where(Assay.id == assay_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one()
    candidate = session.get(Candidate, assay.candidate_id)
    assert candidate is not None
    dossiers.lock_system(session, candidate.system_id)
    return of(candidate, assay)


def of(candidate: Candidate, assay: Assay) -> Release:
    return Release.of(
        candidate.system_id, candidate.code_sha256, candidate.manifest_digest, assay.policy
    )


def attempts(
    session: Session, release: Release, *, excluding: uuid.UUID | None = None
) -> list[Attempt]:
    """Every finished attempt of the release (its decision recorded), oldest first; `excluding`
    one assay (the one finishing)."""
    code = col(Candidate.code_sha256)
    query = (
        sa.select(
            col(Assay.id),
            col(Assay.candidate_id),
            col(Candidate.version),
            col(Assay.finished_at),
            col(Assay.decision),
            col(Assay.reasons),
            col(Assay.trials_done),
            col(Assay.report)["stopped"].as_string(),
            col(Assay.policy),
        )
        .join(Candidate, col(Candidate.id) == col(Assay.candidate_id))
        .where(
            col(Candidate.system_id) == uuid.UUID(release.system_id),
            col(Candidate.manifest_digest) == release.manifest_digest,
            code.is_(None) if release.code_sha256 is None else code == release.code_sha256,
            col(Assay.decision).is_not(None),
            col(Assay.finished_at).is_not(None),
        )
        .order_by(col(Assay.finished_at), col(Assay.id))
    )
    if excluding is not None:
        query = query.where(col(Assay.id) != excluding)
    found: list[Attempt] = []
    for row in session.execute(query).all():
        assay_id, candidate_id, version, finished, decision, reasons, trials, stopped, policy = row
        if _digest(policy) != release.policy_digest:
            continue
        found.append(
            Attempt(
                str(candidate_id),
                version,
                str(assay_id),
                dossiers.iso(finished),
                str(decision),
                tuple(reason_view(r) for r in reasons or []),
                int(trials),
                stopped,
            )
        )
    return _with_floors(session, found)


def _with_floors(session: Session, found: list[Attempt]) -> list[Attempt]:
    """Each attempt with what its stored fault results graded of every floor."""
    if not found:
        return found
    signature = col(FaultResultRow.signature)
    # Only what a floor record reads, not the fault's whole signature.
    rows = session.execute(
        sa.select(
            col(FaultResultRow.assay_id),
            col(FaultResultRow.fault_id),
            signature["exercised"],
            signature["baseline"],
            signature["floors"],
        )
        .where(col(FaultResultRow.assay_id).in_([uuid.UUID(a.assay_id) for a in found]))
        .order_by(col(FaultResultRow.assay_id), col(FaultResultRow.fault_id))
    ).all()
    faults: dict[str, list[dict[str, Any]]] = {}
    for assay_id, fault_id, exercised, baseline, floors in rows:
        stored = {"id": fault_id, "exercised": exercised, "baseline": baseline, "floors": floors}
        faults.setdefault(str(assay_id), []).append(stored)
    return [replace(a, floors=graded(faults.get(a.assay_id, []))) for a in found]


def _digest(policy: dict[str, Any] | None) -> str | None:
    digest = (policy or {}).get("digest")
    return None if digest is None else str(digest)
