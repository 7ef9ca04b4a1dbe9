"""Read-side queries for the API and the metrics collector."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import aliased, defer
from sqlmodel import Session, col, select

from service.core.signing.dossier import release_hashes
from service.db.models import (
    Assay,
    AssayShard,
    AssayStatus,
    Candidate,
    ComponentHash,
    Event,
    FaultResultRow,
    ShardStatus,
    System,
)


@dataclass(frozen=True)
class CandidateRow:
    candidate: Candidate
    system: System
    assay: Assay


@dataclass(frozen=True)
class FaultProgress:
    fault_id: str | None
    shard_count: int
    shards_done: int
    trials_planned: int
    trials_done: int


@dataclass(frozen=True)
class SystemRow:
    system: System
    candidates: int
    latest: CandidateRow | None


def _newest_assay_id() -> Any:
    newest = aliased(Assay)
    return (
        sa.select(col(newest.id))
        .where(col(newest.candidate_id) == col(Candidate.id))
        .order_by(col(newest.created_at).desc(), col(newest.id).desc())
        .limit(1)
        .correlate(Candidate)
        .scalar_subquery()
    )


def _candidate_query() -> Any:
    return (
        select(Candidate, System, Assay)
        .join(System, col(System.id) == col(Candidate.system_id))
        # A candidate re-run has several assays; its status is that of the newest.
        .join(Assay, col(Assay.id) == _newest_assay_id())
        # A status read needs the decision and its reasons, not the whole report.
        .options(defer(cast(Any, Assay.report)), defer(cast(Any, Assay.plan)))
    )


def candidate(
    session: Session, candidate_id: uuid.UUID, *, tenant_id: uuid.UUID | None = None
) -> CandidateRow | None:
    """A candidate; with `tenant_id`, only if its system belongs to that tenant."""
    query = _candidate_query().where(col(Candidate.id) == candidate_id)
    if tenant_id is not None:
        query = query.where(col(System.tenant_id) == tenant_id)
    row = session.exec(query).first()
    return CandidateRow(*row) if row else None


def candidates(
    session: Session,
    *,
    system: str | None,
    limit: int,
    before: tuple[datetime, uuid.UUID] | None,
    tenant_id: uuid.UUID | None = None,
) -> list[CandidateRow]:
    """Newest first; `before` is the (created_at, id) of the last row of the previous page."""
    query = _candidate_query()
    if tenant_id is not None:
        query = query.where(col(System.tenant_id) == tenant_id)
    if system is not None:
        query = query.where(col(System.name) == system)
    if before is not None:
        created_at, last_id = before
        query = query.where(
            sa.or_(
                col(Candidate.created_at) < created_at,
                sa.and_(col(Candidate.created_at) == created_at, col(Candidate.id) < last_id),
            )
        )
    query = query.order_by(col(Candidate.created_at).desc(), col(Candidate.id).desc()).limit(limit)
    return [CandidateRow(*row) for row in session.exec(query).all()]


def systems(session: Session, *, tenant_id: uuid.UUID | None = None) -> list[SystemRow]:
    """Every system (of one tenant, if given) with its candidate count and latest candidate, in
    three queries."""
    mine: Any = sa.true()
    if tenant_id is not None:
        mine = col(Candidate.system_id).in_(
            sa.select(col(System.id)).where(col(System.tenant_id) == tenant_id)
        )
    counts = dict(
        session.exec(
            select(Candidate.system_id, sa.func.count())
            .where(mine)
            .group_by(col(Candidate.system_id))
        ).all()
    )
    newest = (
        sa.select(col(Candidate.system_id), sa.func.max(col(Candidate.created_at)))
        .where(mine)
        .group_by(col(Candidate.system_id))
    )
    latest: dict[uuid.UUID, CandidateRow] = {}
    for row in session.exec(
        _candidate_query()
        .where(sa.tuple_(col(Candidate.system_id), col(Candidate.created_at)).in_(newest))
        .order_by(col(Candidate.id))
    ).all():
        latest.setdefault(row[0].system_id, CandidateRow(*row))
    query = select(System).order_by(col(System.name))
    if tenant_id is not None:
        query = query.where(System.tenant_id == tenant_id)
    return [
        SystemRow(system, int(counts.get(system.id, 0)), latest.get(system.id))
        for system in session.exec(query).all()
    ]


def manifest_digests(session: Session, candidate_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Each candidate's manifest digest, in one query."""
    if not candidate_ids:
        return {}
    rows = session.exec(
        select(Candidate.id, Candidate.manifest_digest).where(
            col(Candidate.id).in_(sorted(set(candidate_ids)))
        )
    ).all()
    return dict(rows)


def candidate_versions(
    session: Session, candidate_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, str]:
    """Each candidate's version string, in one query."""
    if not candidate_ids:
        return {}
    rows = session.exec(
        select(Candidate.id, Candidate.version).where(
            col(Candidate.id).in_(sorted(set(candidate_ids)))
        )
    ).all()
    return dict(rows)


def component_hashes(session: Session, manifest_digest: str) -> dict[str, str]:
    return component_hashes_of(session, [manifest_digest]).get(manifest_digest, {})


def component_hashes_of(session: Session, digests: Sequence[str]) -> dict[str, dict[str, str]]:
    """Component hashes of several manifests in one query (a page of candidates, say)."""
    found: dict[str, dict[str, str]] = {}
    rows = session.exec(
        select(ComponentHash.manifest_digest, ComponentHash.component, ComponentHash.sha256)
        .where(col(ComponentHash.manifest_digest).in_(sorted(set(digests))))
        .order_by(col(ComponentHash.manifest_digest), col(ComponentHash.component))
    ).all()
    for digest, component, sha256 in rows:
        found.setdefault(digest, {})[component] = sha256
    return found


def release_hashes_of(
    session: Session, candidate_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, dict[str, str]]:
    """Per candidate, what a production change and a trigger compare: its manifest's component
    hashes and, where it names one, its code artifact's digest as `code`."""
    rows = session.exec(
        select(Candidate.id, Candidate.manifest_digest, Candidate.code_sha256).where(
            col(Candidate.id).in_(sorted(set(candidate_ids)))
        )
    ).all()
    hashes = component_hashes_of(session, [digest for _, digest, _ in rows])
    return {cid: release_hashes(hashes.get(digest, {}), code) for cid, digest, code in rows}


def release_hashes_one(session: Session, candidate: Candidate) -> dict[str, str]:
    return release_hashes(
        component_hashes(session, candidate.manifest_digest), candidate.code_sha256
    )


def assay(
    session: Session, assay_id: uuid.UUID, *, tenant_id: uuid.UUID | None = None
) -> Assay | None:
    """An assay; with `tenant_id`, only if its candidate's system belongs to that tenant."""
    found = session.get(Assay, assay_id)
    if found is None or tenant_id is None:
        return found
    owner = session.exec(
        select(System.tenant_id)
        .join(Candidate, col(Candidate.system_id) == col(System.id))
        .where(Candidate.id == found.candidate_id)
    ).first()
    return found if owner == tenant_id else None


def system_named(session: Session, name: str, tenant_id: uuid.UUID | None) -> System | None:
    query = select(System).where(System.name == name)
    if tenant_id is not None:
        query = query.where(System.tenant_id == tenant_id)
    return session.exec(query.order_by(col(System.created_at))).first()


def events_of_tenant(tenant_id: uuid.UUID) -> Any:
    """The condition on `Event` for one tenant's events: its audit records and everything that
    happened to its candidates and assays."""
    mine = (
        sa.select(col(Candidate.id))
        .join(System, col(System.id) == col(Candidate.system_id))
        .where(col(System.tenant_id) == tenant_id)
    )
    return sa.or_(col(Event.tenant_id) == tenant_id, col(Event.candidate_id).in_(mine))


def fault_progress(session: Session, assay_id: uuid.UUID) -> list[FaultProgress]:
    done = col(AssayShard.status) == ShardStatus.DONE.value
    rows = session.execute(
        sa.select(
            col(AssayShard.fault_id),
            sa.func.count(),
            sa.func.sum(sa.case((done, 1), else_=0)),
            sa.func.sum(col(AssayShard.stop) - col(AssayShard.start)),
            sa.func.sum(sa.case((done, col(AssayShard.trials)), else_=0)),
        )
        .where(col(AssayShard.assay_id) == assay_id)
        .group_by(col(AssayShard.fault_id))
        .order_by(sa.func.min(col(AssayShard.shard_index)))
    ).all()
    return [
        FaultProgress(fault_id, int(n), int(d or 0), int(p or 0), int(t or 0))
        for fault_id, n, d, p, t in rows
    ]


@dataclass(frozen=True)
class LiveProgress:
    """What an assay's workers are doing, from its shards' progress: the team's agent runs done
    and the gate's own (every shard), slots busy and what the busy ones wait for (running
    shards only)."""

    runs_done: int = 0
    slots_busy: int = 0
    waiting: dict[str, int] | None = None
    gate_runs_done: int = 0


def live_progress(session: Session, assay_id: uuid.UUID) -> LiveProgress:
    rows = session.execute(
        sa.select(col(AssayShard.status), col(AssayShard.progress)).where(
            col(AssayShard.assay_id) == assay_id, col(AssayShard.progress).is_not(None)
        )
    ).all()
    runs = gate = busy = 0
    waiting: dict[str, int] = {}
    for status, progress in rows:
        if not isinstance(progress, dict):
            continue
        runs += int(progress.get("runs_done") or 0)
        gate += int(progress.get("gate_runs_done") or 0)
        if status != ShardStatus.RUNNING.value:
            continue
        busy += int(progress.get("slots_busy") or 0)
        for what, n in (progress.get("waiting") or {}).items():
            waiting[str(what)] = waiting.get(str(what), 0) + int(n)
    return LiveProgress(runs, busy, dict(sorted(waiting.items())), gate)


def done_shard_results(session: Session, assay_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = session.exec(
        select(AssayShard.result)
        .where(AssayShard.assay_id == assay_id, AssayShard.status == ShardStatus.DONE.value)
        .order_by(col(AssayShard.shard_index))
    ).all()
    return [dict(r) for r in rows if r is not None]


def fault_results(session: Session, assay_id: uuid.UUID) -> Sequence[FaultResultRow]:
    return session.exec(
        select(FaultResultRow)
        .where(FaultResultRow.assay_id == assay_id)
        .order_by(col(FaultResultRow.fault_id))
    ).all()


@dataclass(frozen=True)
class Totals:
    assays_by_status: dict[str, int]
    shards_done: int
    trials_executed: int


def totals(session: Session) -> Totals:
    by_status = {s.value: 0 for s in AssayStatus}
    for status, n in session.exec(
        select(Assay.status, sa.func.count()).group_by(col(Assay.status))
    ).all():
        by_status[status] = int(n)
    shards_done, trials = session.exec(
        select(sa.func.count(), sa.func.coalesce(sa.func.sum(col(AssayShard.trials)), 0)).where(
            AssayShard.status == ShardStatus.DONE.value
        )
    ).one()
    return Totals(by_status, int(shards_done or 0), int(trials or 0))
