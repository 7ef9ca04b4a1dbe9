"""The read model of candidates: one candidate or a page of them in the caller's tenant, each
with what the edges show beside it (its component hashes, what the gate says now, what its
workers are doing), and the systems they belong to."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session

from service.app import gate
from service.app.errors import NotFound
from service.db import dossier as dossiers
from service.db import queries
from service.db.models import Dossier
from service.db.queries import CandidateRow, LiveProgress, SystemRow


@dataclass(frozen=True)
class CandidateView:
    """A candidate as the edges show it."""

    row: CandidateRow
    component_hashes: dict[str, str]
    standing: gate.Standing
    live: LiveProgress


def get(session: Session, tenant_id: uuid.UUID, candidate_id: uuid.UUID) -> CandidateRow:
    """The tenant's candidate; NotFound for another tenant's or none."""
    row = queries.candidate(session, candidate_id, tenant_id=tenant_id)
    if row is None:
        raise NotFound(f"no candidate {candidate_id}", field="candidate_id")
    return row


def page(
    session: Session,
    tenant_id: uuid.UUID,
    *,
    system: str | None,
    limit: int,
    before: tuple[datetime, uuid.UUID] | None,
) -> list[CandidateRow]:
    """Newest first, from `before` (created at, id) on; `limit` rows at most."""
    return queries.candidates(
        session, system=system, limit=limit, before=before, tenant_id=tenant_id
    )


def view(session: Session, row: CandidateRow) -> CandidateView:
    return CandidateView(
        row,
        queries.release_hashes_one(session, row.candidate),
        gate.standing(session, row),
        queries.live_progress(session, row.assay.id),
    )


def views(session: Session, rows: Sequence[CandidateRow]) -> list[CandidateView]:
    """`view` of each row, with the hashes and the gate read once for all of them."""
    hashes = queries.release_hashes_of(session, [r.candidate.id for r in rows])
    standings = gate.standings(session, rows)
    return [
        CandidateView(
            row,
            hashes.get(row.candidate.id, {}),
            standings[row.candidate.id],
            queries.live_progress(session, row.assay.id),
        )
        for row in rows
    ]


def systems(session: Session, tenant_id: uuid.UUID) -> list[SystemRow]:
    """Every system of the tenant, with its candidate count and latest candidate."""
    return queries.systems(session, tenant_id=tenant_id)


def latest_dossier(session: Session, tenant_id: uuid.UUID, candidate_id: uuid.UUID) -> Dossier:
    """The tenant's candidate's newest dossier version; NotFound until its first assay ends."""
    get(session, tenant_id, candidate_id)
    found = dossiers.latest(session, candidate_id)
    if found is None:
        raise NotFound(f"candidate {candidate_id} has no dossier yet", field="candidate_id")
    return found


def dossier_versions(
    session: Session, tenant_id: uuid.UUID, candidate_id: uuid.UUID
) -> Sequence[Dossier]:
    """Every dossier version of the tenant's candidate, oldest first."""
    get(session, tenant_id, candidate_id)
    return dossiers.versions(session, candidate_id)
