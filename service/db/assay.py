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
class AssayInputs:
    """What every shard of one assay shares. Immutable once submitted, so workers may cache it."""

    assay_id: uuid.UUID
    candidate_id: uuid.UUID
    manifest_digest: str
    manifest: dict[str, Any]
    plan: dict[str, Any]


@dataclass(frozen=True)
class ShardStart:
    attempt: int
    spec: dict[str, Any]


@dataclass(frozen=True)
class Stored:
    """`written`: this call wrote the result. `complete`: every shard of the assay is stored."""

    written: bool
    complete: bool


@dataclass(frozen=True)
class FaultRow:
    fault_id: str
    domain: str | None
    trials: int
    signature: dict[str, Any]
    evidence: list[Any]


def assay_inputs(session: Session, assay_id: uuid.UUID) -> AssayInputs | None:
    row = session.execute(
        sa.select(
            col(Assay.candidate_id), col(Assay.plan), col(Manifest.digest), col(Manifest.document)
        )
        .join(Candidate, col(Candidate.id) == col(Assay.candidate_id))
        .join(Manifest, col(Manifest.digest) == col(Candidate.manifest_digest))
        .where(col(Assay.id) == assay_id)
    ).first()
    if row is None:
        return None
    candidate_id, plan, digest, document = row
    return AssayInputs(assay_id, candidate_id, digest, document, plan)


def begin_shard(
    session: Session, inputs: AssayInputs, shard_index: int, worker: str
) -> ShardStart | None:
    """Mark a shard running and count the attempt; None when it is unknown or already done."""
    now = utcnow()
    row = session.execute(
        sa.update(AssayShard)
        .where(
            col(AssayShard.assay_id) == inputs.assay_id,
            col(AssayShard.shard_index) == shard_index,
            col(AssayShard.status) != ShardStatus.DONE.value,
        )
        .values(
            status=ShardStatus.RUNNING.value,
            attempts=col(AssayShard.attempts) + 1,
            worker=worker,
            started_at=now,
        )
        .returning(col(AssayShard.attempts), col(AssayShard.spec))
    ).first()
    if row is None:
        return None
    attempt, spec = row
    session.execute(
        sa.update(Assay)
        .where(col(Assay.id) == inputs.assay_id, col(Assay.status) == AssayStatus.QUEUED.value)
        .values(status=AssayStatus.RUNNING.value, started_at=now)
    )
    session.add(
        Event(
            kind="shard.started",
            candidate_id=inputs.candidate_id,
            assay_id=inputs.assay_id,
            shard_index=shard_index,
            data={"attempt": attempt, "worker": worker},
        )
    )
    return ShardStart(int(attempt), dict(spec))


def store_shard_result(
    session: Session,
    inputs: AssayInputs,
    shard_index: int,
    result: dict[str, Any],
    trials: int,
) -> Stored:
    """Write a shard's result if it has none yet."""
    written = session.execute(
        sa.update(AssayShard)
        .where(
            col(AssayShard.assay_id) == inputs.assay_id,
            col(AssayShard.shard_index) == shard_index,
            col(AssayShard.status) != ShardStatus.DONE.value,
        )
        .values(status=ShardStatus.DONE.value, result=result, trials=trials, finished_at=utcnow())
    )
    if written.rowcount != 1:  # type: ignore[attr-defined]
        return Stored(written=False, complete=ready_to_merge(session, inputs.assay_id))
    # The row lock this takes orders concurrent stores: exactly one sees the last count.
    done, total = session.execute(
        sa.update(Assay)
        .where(col(Assay.id) == inputs.assay_id)
        .values(
            shards_done=col(Assay.shards_done) + 1,
            trials_done=col(Assay.trials_done) + trials,
        )
        .returning(col(Assay.shards_done), col(Assay.shard_count))
    ).one()
    session.add(
        Event(
            kind="shard.stored",
            candidate_id=inputs.candidate_id,
            assay_id=inputs.assay_id,
            shard_index=shard_index,
            data={"trials": trials},
        )
    )
    return Stored(written=True, complete=done == total)


def ready_to_merge(session: Session, assay_id: uuid.UUID) -> bool:
    assay = session.get(Assay, assay_id)
    return (
        assay is not None
        and assay.status not in (AssayStatus.DONE, AssayStatus.STOPPED)
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
            col(Assay.status).not_in((AssayStatus.DONE.value, AssayStatus.STOPPED.value)),
            col(Assay.shards_done) == col(Assay.shard_count),
        )
        .values(
            # A stopped assay is decided (never `allow`) but says that it stopped.
            status=AssayStatus.STOPPED.value if report.get("stopped") else AssayStatus.DONE.value,
            decision=decision,
            reasons=list(report.get("reasons", [])),
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
