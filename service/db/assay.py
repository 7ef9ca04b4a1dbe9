"""The life of an assay in the database: shards start, results land once, the merge lands once.

Every write here is conditional on the row not being finished yet. That is what makes Celery's
`acks_late` redelivery safe: a shard that runs twice (its first worker was killed after the
write, or outlived the visibility timeout) finds its row done and changes nothing. A shard
starts only when no other worker holds a live lease on it (see service.db.lease).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.core.system.text import as_text
from service.db.models import (
    Assay,
    AssayShard,
    AssayStatus,
    Candidate,
    Event,
    FaultResultRow,
    ManifestRow,
    ShardStatus,
    System,
    Tenant,
    utcnow,
)

#: An assay still to be decided: its shards may start, and its lapsed shards are sent again.
OPEN = (AssayStatus.QUEUED.value, AssayStatus.RUNNING.value)
FINISHED = (AssayStatus.DONE.value, AssayStatus.STOPPED.value, AssayStatus.FAILED.value)


@dataclass(frozen=True)
class AssayInputs:
    """What every shard of one assay shares. Immutable once submitted, so workers may cache it."""

    assay_id: uuid.UUID
    candidate_id: uuid.UUID
    manifest_digest: str
    manifest: dict[str, Any]
    plan: dict[str, Any]
    # Whose assay it is: a shard running the tenant's code runs only on that tenant's workers,
    # and an mcp target's sandbox lock is per tenant and world.
    tenant_id: uuid.UUID
    tenant: str
    # The hex SHA-256 of the code artifact the candidate names (None: none; a worker then runs
    # its operator's folder, if the manifest runs code at all).
    code_sha256: str | None = None


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
class FaultResultValues:
    fault_id: str
    domain: str | None
    trials: int
    signature: dict[str, Any]
    evidence: list[Any]


def assay_inputs(session: Session, assay_id: uuid.UUID) -> AssayInputs | None:
    row = session.execute(
        sa.select(
            col(Assay.candidate_id),
            col(Assay.plan),
            col(ManifestRow.digest),
            col(ManifestRow.document),
            col(Tenant.id),
            col(Tenant.name),
            col(Candidate.code_sha256),
        )
        .join(Candidate, col(Candidate.id) == col(Assay.candidate_id))
        .join(ManifestRow, col(ManifestRow.digest) == col(Candidate.manifest_digest))
        .join(System, col(System.id) == col(Candidate.system_id))
        .join(Tenant, col(Tenant.id) == col(System.tenant_id))
        .where(col(Assay.id) == assay_id)
    ).first()
    if row is None:
        return None
    candidate_id, plan, digest, document, tenant_id, tenant, code = row
    return AssayInputs(assay_id, candidate_id, digest, document, plan, tenant_id, tenant, code)


def record_waiting(session: Session, inputs: AssayInputs, note: str) -> None:
    """A trial of this assay waits for its world (`sandbox.waiting`, shown in the tenant's
    events): the note names the world and the assay holding it, always the same tenant's."""
    session.add(
        Event(
            kind="sandbox.waiting",
            candidate_id=inputs.candidate_id,
            assay_id=inputs.assay_id,
            data={"note": note},
        )
    )


def record_deprecated(session: Session, inputs: AssayInputs, lines: Sequence[str]) -> None:
    """The tenant's code imported `assaygate` paths that are going away (`target.deprecated`, in
    the tenant's events): what a local assay says on its stderr, said once per assay."""
    said = session.exec(
        select(Event.id).where(
            col(Event.assay_id) == inputs.assay_id, col(Event.kind) == "target.deprecated"
        )
    ).first()
    if said is None:
        session.add(
            Event(
                kind="target.deprecated",
                candidate_id=inputs.candidate_id,
                assay_id=inputs.assay_id,
                data={"warnings": list(lines)},
            )
        )


def lease_until(now: datetime, lease_s: float) -> datetime:
    return now + timedelta(seconds=lease_s)


def begin_shard(
    session: Session,
    inputs: AssayInputs,
    shard_index: int,
    worker: str,
    *,
    lease_s: float,
    max_attempts: int | None = None,
) -> ShardStart | None:
    """Mark a shard running under a fresh lease and count the attempt.

    None when the shard is unknown or done, when its assay is finished (failed, stopped, done),
    or when another worker holds a live lease on it: this is a copy of its message, and the
    holder either stores the shard or lets the lease lapse, and the reconciler sends it again.
    None too when the shard has used `max_attempts`: a copy redelivered after its last attempt's
    lease lapsed must not start it again; the reconciler fails the assay with the reason.
    """
    now = utcnow()
    attempts_left = sa.true() if max_attempts is None else col(AssayShard.attempts) < max_attempts
    row = session.execute(
        sa.update(AssayShard)
        .where(
            col(AssayShard.assay_id) == inputs.assay_id,
            col(AssayShard.shard_index) == shard_index,
            col(AssayShard.status) != ShardStatus.DONE.value,
            attempts_left,
            sa.or_(
                col(AssayShard.status) == ShardStatus.PENDING.value,
                col(AssayShard.lease_expires_at).is_(None),
                col(AssayShard.lease_expires_at) < now,
            ),
            col(AssayShard.assay_id).in_(
                sa.select(col(Assay.id)).where(
                    col(Assay.id) == inputs.assay_id, col(Assay.status).in_(OPEN)
                )
            ),
        )
        .values(
            status=ShardStatus.RUNNING.value,
            attempts=col(AssayShard.attempts) + 1,
            worker=worker,
            started_at=now,
            lease_expires_at=lease_until(now, lease_s),
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
    code_sha256: str | None = None,
    tenant_image: str | None = None,
) -> Stored:
    """Write a shard's result if it has none yet, with the code its worker ran (if any) and
    the image it said it ran in."""
    written = session.execute(
        sa.update(AssayShard)
        .where(
            col(AssayShard.assay_id) == inputs.assay_id,
            col(AssayShard.shard_index) == shard_index,
            col(AssayShard.status) != ShardStatus.DONE.value,
        )
        .values(
            status=ShardStatus.DONE.value,
            result=result,
            trials=trials,
            finished_at=utcnow(),
            lease_expires_at=None,
            code_sha256=code_sha256,
            tenant_image=tenant_image,
        )
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
            data={
                "trials": trials,
                **({"code": f"sha256:{code_sha256}"} if code_sha256 else {}),
                **({"tenant_image": tenant_image} if tenant_image else {}),
            },
        )
    )
    return Stored(written=True, complete=done == total)


def shard_count(session: Session, assay_id: uuid.UUID) -> int:
    assay = session.get(Assay, assay_id)
    return assay.shard_count if assay is not None else 1


def ready_to_merge(session: Session, assay_id: uuid.UUID) -> bool:
    assay = session.get(Assay, assay_id)
    return assay is not None and assay.status in OPEN and assay.shards_done == assay.shard_count


def record_report(
    session: Session,
    assay_id: uuid.UUID,
    *,
    decision: str,
    report: dict[str, Any],
    faults: Sequence[FaultResultValues],
) -> bool:
    """Store the merged report and per-fault results once. False if another worker already did."""
    written = session.execute(
        sa.update(Assay)
        .where(
            col(Assay.id) == assay_id,
            col(Assay.status).in_(OPEN),
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
        FaultResultRow(
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


def fail_assay(session: Session, assay_id: uuid.UUID, message: str) -> bool:
    """Say once why an assay cannot be decided: an engine error (deterministic: retrying the
    shard would fail again), or a shard that was started or sent too often without finishing.
    No shard of a failed assay starts afterwards. The reason is made text (it may quote a
    target's words)."""
    message = as_text(message)
    written = session.execute(
        sa.update(Assay)
        .where(col(Assay.id) == assay_id, col(Assay.status).in_(OPEN))
        .values(status=AssayStatus.FAILED.value, report={"error": message}, finished_at=utcnow())
    )
    if written.rowcount != 1:  # type: ignore[attr-defined]
        return False
    candidate_id = session.exec(select(Assay.candidate_id).where(Assay.id == assay_id)).one()
    session.add(
        Event(
            kind="assay.failed",
            candidate_id=candidate_id,
            assay_id=assay_id,
            data={"error": message},
        )
    )
    return True


def stored_spend(session: Session, assay_id: uuid.UUID) -> list[Any]:
    """The `spend` of each stored shard result of the assay (None where a shard has none)."""
    rows = session.execute(
        sa.select(col(AssayShard.result)).where(
            col(AssayShard.assay_id) == assay_id, col(AssayShard.result).is_not(None)
        )
    ).all()
    return [r[0].get("spend") if isinstance(r[0], dict) else None for r in rows]
