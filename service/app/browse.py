"""Read-only queries for the dashboard (and the API's event log): one page of rows per query,
never a whole table.

The shared reads live in `service.db.queries`; these add what only the pages need (a page of
systems with their latest candidates, the event log) and never write. Every read that starts
from nothing but a name or an id takes the signed-in key's tenant and finds only that tenant's
rows; the helpers that take ids (a page's systems, candidates) are given ids already scoped.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.app.artifacts import Shipping, shipping
from service.db import dossier as dossiers
from service.db import queries
from service.db.models import Assay, Candidate, Dossier, Event, Hold, ManifestRow, System


@dataclass(frozen=True)
class SystemsPage:
    rows: list[queries.SystemRow]
    total: int
    offset: int
    limit: int

    @property
    def has_next(self) -> bool:
        return self.offset + self.limit < self.total


def systems_page(
    session: Session,
    *,
    tenant_id: uuid.UUID,
    limit: int,
    offset: int = 0,
    name: str | None = None,
) -> SystemsPage:
    """A page of one tenant's systems by name, each with its candidate count and latest
    candidate: three queries whatever the page size."""
    base = select(System).where(col(System.tenant_id) == tenant_id)
    count = select(sa.func.count()).select_from(System).where(col(System.tenant_id) == tenant_id)
    if name:
        pattern = f"%{name.replace('%', '').replace('_', '')}%"
        base = base.where(col(System.name).ilike(pattern))
        count = count.where(col(System.name).ilike(pattern))
    total = int(session.exec(count).one())
    systems = list(session.exec(base.order_by(col(System.name)).offset(offset).limit(limit)).all())
    ids = [s.id for s in systems]
    if not ids:
        return SystemsPage([], total, offset, limit)
    counts = dict(
        session.exec(
            select(Candidate.system_id, sa.func.count())
            .where(col(Candidate.system_id).in_(ids))
            .group_by(col(Candidate.system_id))
        ).all()
    )
    newest = (
        sa.select(col(Candidate.system_id), sa.func.max(col(Candidate.created_at)))
        .where(col(Candidate.system_id).in_(ids))
        .group_by(col(Candidate.system_id))
    )
    latest: dict[uuid.UUID, queries.CandidateRow] = {}
    for row in session.exec(
        queries._candidate_query()
        .where(sa.tuple_(col(Candidate.system_id), col(Candidate.created_at)).in_(newest))
        .order_by(col(Candidate.id))
    ).all():
        latest.setdefault(row[0].system_id, queries.CandidateRow(*row))
    rows = [queries.SystemRow(s, int(counts.get(s.id, 0)), latest.get(s.id)) for s in systems]
    return SystemsPage(rows, total, offset, limit)


def system_named(session: Session, name: str, *, tenant_id: uuid.UUID) -> System | None:
    """The tenant's system of this name; None for anyone else's (the page answers 404)."""
    return queries.system_named(session, name, tenant_id)


def candidate(
    session: Session, candidate_id: uuid.UUID, *, tenant_id: uuid.UUID
) -> queries.CandidateRow | None:
    """The tenant's candidate; None for anyone else's (the page answers 404)."""
    return queries.candidate(session, candidate_id, tenant_id=tenant_id)


def dossier_versions(session: Session, candidate_id: uuid.UUID) -> Sequence[Dossier]:
    """Every dossier version of a candidate already scoped to the tenant, oldest first."""
    return dossiers.versions(session, candidate_id)


def holds_of(session: Session, candidate_id: uuid.UUID) -> list[Hold]:
    """Every hold of a candidate already scoped to the tenant, oldest first."""
    return list(
        session.exec(
            select(Hold).where(Hold.candidate_id == candidate_id).order_by(col(Hold.created_at))
        ).all()
    )


@dataclass(frozen=True)
class CandidateDetail:
    row: queries.CandidateRow
    # The full report once the assay is decided; None while it runs.
    report: dict[str, Any] | None
    manifest: dict[str, Any]
    component_hashes: dict[str, str]
    progress: list[queries.FaultProgress]
    # What the workers are doing: agent runs done, slots busy, what they wait for.
    live: queries.LiveProgress
    # What ships: the code, the remote builds and the tenant images.
    ships: Shipping


def candidate_detail(
    session: Session, candidate_id: uuid.UUID, *, tenant_id: uuid.UUID
) -> CandidateDetail | None:
    """A candidate of the tenant with its report, manifest and progress; None for anyone
    else's (the page answers 404, as the API does)."""
    row = queries.candidate(session, candidate_id, tenant_id=tenant_id)
    if row is None:
        return None
    report = session.exec(select(Assay.report).where(Assay.id == row.assay.id)).first()
    manifest = session.get(ManifestRow, row.candidate.manifest_digest)
    return CandidateDetail(
        row=row,
        report=dict(report) if report else None,
        manifest=dict(manifest.document) if manifest else {},
        component_hashes=queries.release_hashes_one(session, row.candidate),
        progress=queries.fault_progress(session, row.assay.id),
        live=queries.live_progress(session, row.assay.id),
        ships=shipping(
            session, candidate_id, row.assay.id, report, manifest.document if manifest else {}
        ),
    )


SHARD_EVENTS = ("shard.started", "shard.stored")


@dataclass(frozen=True)
class ShardTally:
    """An assay's shard events, folded into one line of the event log."""

    started: int
    stored: int
    # Shards started more than once (a redelivery after a lost worker).
    restarted: int
    workers: int
    first: datetime
    last: datetime


@dataclass(frozen=True)
class EventsPage:
    events: Sequence[Event]
    # The id to pass as `before` for the next (older) page, or None on the last page.
    next_before: int | None
    # Per assay on the page, its shard events (left out of `events` when folded).
    shards: dict[uuid.UUID, ShardTally]


def events_page(
    session: Session,
    *,
    tenant_id: uuid.UUID,
    limit: int,
    before: int | None = None,
    kind: str | None = None,
    candidate_id: uuid.UUID | None = None,
    fold_shards: bool = True,
) -> EventsPage:
    """The tenant's events (as `GET /v1/events` shows them), newest first, keyset-paginated on
    the event id (the table only ever grows). Folded, shard events are left out of the page and
    counted per assay instead: one assay's hundreds of them never flood the log."""
    query = select(Event).where(queries.events_of_tenant(tenant_id))
    if before is not None:
        query = query.where(col(Event.id) < before)
    if kind:
        query = query.where(col(Event.kind) == kind)
    elif fold_shards:
        query = query.where(col(Event.kind).not_in(SHARD_EVENTS))
    if candidate_id is not None:
        query = query.where(col(Event.candidate_id) == candidate_id)
    rows = list(session.exec(query.order_by(col(Event.id).desc()).limit(limit + 1)).all())
    page = rows[:limit]
    assays = sorted({e.assay_id for e in page if e.assay_id is not None})
    return EventsPage(
        page,
        page[-1].id if len(rows) > limit and page else None,
        shard_tallies(session, assays) if fold_shards and not kind else {},
    )


def shard_tallies(session: Session, assay_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, ShardTally]:
    """Shard events per assay, counted in one query."""
    if not assay_ids:
        return {}
    rows = session.execute(
        sa.select(
            col(Event.assay_id),
            col(Event.kind),
            sa.func.count(),
            sa.func.count(sa.distinct(col(Event.shard_index))),
            sa.func.min(col(Event.at)),
            sa.func.max(col(Event.at)),
        )
        .where(col(Event.assay_id).in_(assay_ids), col(Event.kind).in_(SHARD_EVENTS))
        .group_by(col(Event.assay_id), col(Event.kind))
    ).all()
    workers = dict(
        session.execute(
            sa.select(
                col(Event.assay_id),
                sa.func.count(sa.distinct(Event.data["worker"].as_string())),
            )
            .where(col(Event.assay_id).in_(assay_ids), col(Event.kind) == "shard.started")
            .group_by(col(Event.assay_id))
        ).all()
    )
    found: dict[uuid.UUID, dict[str, Any]] = {}
    for assay_id, kind, n, distinct, first, last in rows:
        t = found.setdefault(
            assay_id, {"started": 0, "stored": 0, "restarted": 0, "first": first, "last": last}
        )
        if kind == "shard.started":
            t["started"], t["restarted"] = int(n), int(n) - int(distinct)
        else:
            t["stored"] = int(n)
        t["first"], t["last"] = min(t["first"], first), max(t["last"], last)
    return {
        assay_id: ShardTally(
            t["started"],
            t["stored"],
            t["restarted"],
            int(workers.get(assay_id, 0)),
            t["first"],
            t["last"],
        )
        for assay_id, t in found.items()
    }


def candidate_rows(
    session: Session, candidate_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, queries.CandidateRow]:
    """Several candidates with their systems and newest assays, in one query."""
    if not candidate_ids:
        return {}
    rows = session.exec(
        queries._candidate_query().where(col(Candidate.id).in_(sorted(set(candidate_ids))))
    ).all()
    return {row[0].id: queries.CandidateRow(*row) for row in rows}
