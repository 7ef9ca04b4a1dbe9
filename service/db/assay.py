"""The life of an assay in the database: shards start, results land once, the merge lands once.

Every write here is conditional on the row not being finished yet. That is what makes Celery's
`acks_late` redelivery safe: a shard that runs twice (its first worker was killed after the
write, or outlived the visibility timeout) finds its row done and changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.db.models import (
    Assay,
    AssayShard,
    AssayStatus,
    Candidate,
    Event,
    FaultResult,
    Manifest,
    ShardStatus,
    utcnow,
)


@dataclass(frozen=True)
class ShardJob:
    """Everything `run_shard` needs, loaded by ids."""

    assay_id: uuid.UUID
    candidate_id: uuid.UUID
    shard_index: int
    attempt: int
    manifest_digest: str
    manifest: dict[str, Any]
    plan: dict[str, Any]
    spec: dict[str, Any]


@dataclass(frozen=True)
class FaultRow:
    fault_id: str
    domain: str | None
    trials: int
    signature: dict[str, Any]
    evidence: list[Any]


def begin_shard(
    session: Session, assay_id: uuid.UUID, shard_index: int, worker: str
) -> ShardJob | None:
    """Mark a shard running (counting the attempt); None when it is unknown or already done."""
    shard = session.get(AssayShard, (assay_id, shard_index))
    if shard is None or shard.status == ShardStatus.DONE:
        return None
    now = utcnow()
    session.execute(
        sa.update(AssayShard)
        .where(
            col(AssayShard.assay_id) == assay_id,
            col(AssayShard.shard_index) == shard_index,
            col(AssayShard.status) != ShardStatus.DONE.value,
        )
        .values(
            status=ShardStatus.RUNNING.value,
            attempts=col(AssayShard.attempts) + 1,
            worker=worker,
            started_at=now,
        )
    )
    session.execute(
        sa.update(Assay)
        .where(col(Assay.id) == assay_id, col(Assay.status) == AssayStatus.QUEUED.value)
        .values(status=AssayStatus.RUNNING.value, started_at=now)
    )
    assay = session.get(Assay, assay_id)
    candidate = session.get(Candidate, assay.candidate_id) if assay else None
    manifest = session.get(Manifest, candidate.manifest_digest) if candidate else None
    if assay is None or candidate is None or manifest is None:
        return None
    session.refresh(shard)
    session.add(
        Event(
            kind="shard.started",
            candidate_id=candidate.id,
            assay_id=assay_id,
            shard_index=shard_index,
            data={"attempt": shard.attempts, "worker": worker},
        )
    )
    return ShardJob(
        assay_id=assay_id,
        candidate_id=candidate.id,
        shard_index=shard_index,
        attempt=shard.attempts,
        manifest_digest=manifest.digest,
        manifest=manifest.document,
        plan=assay.plan,
        spec=shard.spec,
    )


def store_shard_result(
    session: Session,
    assay_id: uuid.UUID,
    shard_index: int,
    result: dict[str, Any],
    trials: int,
) -> bool:
    """Write a shard's result if it has none yet. True when this call was the one that wrote it."""
    written = session.execute(
        sa.update(AssayShard)
        .where(
            col(AssayShard.assay_id) == assay_id,
            col(AssayShard.shard_index) == shard_index,
            col(AssayShard.status) != ShardStatus.DONE.value,
        )
        .values(status=ShardStatus.DONE.value, result=result, trials=trials, finished_at=utcnow())
    )
    if written.rowcount != 1:  # type: ignore[attr-defined]
        return False
    session.execute(
        sa.update(Assay)
        .where(col(Assay.id) == assay_id)
        .values(
            shards_done=col(Assay.shards_done) + 1,
            trials_done=col(Assay.trials_done) + trials,
        )
    )
    candidate_id = session.exec(select(Assay.candidate_id).where(Assay.id == assay_id)).one()
    session.add(
        Event(
            kind="shard.stored",
            candidate_id=candidate_id,
            assay_id=assay_id,
            shard_index=shard_index,
            data={"trials": trials},
        )
    )
    return True


def ready_to_merge(session: Session, assay_id: uuid.UUID) -> bool:
    assay = session.get(Assay, assay_id)
    return (
        assay is not None
        and assay.status != AssayStatus.DONE
        and assay.shards_done == assay.shard_count
    )


def record_report(
    session: Session,
    assay_id: uuid.UUID,
    *,
    decision: str,
    report: dict[str, Any],
    faults: Sequence[FaultRow],
) -> bool:
    """Store the merged report and per-fault results once. False if another worker already did."""
    written = session.execute(
        sa.update(Assay)
        .where(
            col(Assay.id) == assay_id,
            col(Assay.status) != AssayStatus.DONE.value,
            col(Assay.shards_done) == col(Assay.shard_count),
        )
        .values(
            status=AssayStatus.DONE.value,
            decision=decision,
            report=report,
            finished_at=utcnow(),
        )
    )
    if written.rowcount != 1:  # type: ignore[attr-defined]
        return False
    session.add_all(
        FaultResult(
            assay_id=assay_id,
            fault_id=f.fault_id,
            domain=f.domain,
            trials=f.trials,
            signature=f.signature,
            evidence=f.evidence,
        )
        for f in faults
    )
    candidate_id = session.exec(select(Assay.candidate_id).where(Assay.id == assay_id)).one()
    session.add(
        Event(
            kind="assay.decided",
            candidate_id=candidate_id,
            assay_id=assay_id,
            data={"decision": decision, "reasons": report.get("reasons", [])},
        )
    )
    return True


def fail_assay(session: Session, assay_id: uuid.UUID, message: str) -> None:
    """An engine error is deterministic: retrying the shard would fail again, so say so once."""
    written = session.execute(
        sa.update(Assay)
        .where(col(Assay.id) == assay_id, col(Assay.status) != AssayStatus.DONE.value)
        .values(status=AssayStatus.FAILED.value, report={"error": message}, finished_at=utcnow())
    )
    if written.rowcount == 1:  # type: ignore[attr-defined]
        candidate_id = session.exec(select(Assay.candidate_id).where(Assay.id == assay_id)).one()
        session.add(
            Event(
                kind="assay.failed",
                candidate_id=candidate_id,
                assay_id=assay_id,
                data={"error": message},
            )
        )
