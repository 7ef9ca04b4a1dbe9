"""Shard leases: how a lost message or a lost worker is found, and what is done about it.

The database, not the broker, is the record of what is left to do. Every shard that is not done
holds a lease (`assay_shard.lease_expires_at`): set when its message is sent, renewed by the
worker running it. A message is only a hint that a shard should run; a shard whose lease lapsed
was lost somewhere (a broker that restarted without its queue, a message acknowledged by a task
that could not reach the database, a worker killed mid-shard), and the reconciler of any worker
sends it again. Each step here is one conditional write, so reconcilers in many workers, and
copies of one message, never do a thing twice:

- `lapsed_shards` locks the lapsed rows it returns (`FOR UPDATE SKIP LOCKED` on PostgreSQL):
  two reconcilers never take the same shard;
- `mark_dispatched` extends the lease with the message it counts, in the transaction that sends
  it, so a shard is sent again at most once per lease;
- `settle_stopped` stores an empty, stopped result for the shards of a stopping assay that no
  live worker holds, which is what a worker does when it finds the stop;
- `undecided_assays` finds assays whose every shard is stored but which nobody merged (the last
  worker died or lost the database between its store and its merge).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Session, col

from service.core.shards.assay import ShardResult
from service.core.shards.shard import ShardActivity
from service.db.assay import OPEN, lease_until
from service.db.models import Assay, AssayShard, Event, ShardStatus, utcnow


@dataclass(frozen=True)
class Lapsed:
    """A shard not done whose lease lapsed, with what the reconciler decides from."""

    assay_id: uuid.UUID
    candidate_id: uuid.UUID
    shard_index: int
    fault_id: str | None
    status: str
    attempts: int
    dispatches: int
    worker: str | None
    stop_reason: str | None

    @property
    def tries(self) -> int:
        return max(self.attempts, self.dispatches)

    def exhausted(self, max_attempts: int) -> str:
        """Why its assay fails: the shard was started or sent `max_attempts` times."""
        fault = f" ({self.fault_id})" if self.fault_id else ""
        last = f"; last worker {self.worker}" if self.worker else ""
        return (
            f"shard {self.shard_index}{fault} did not finish after {max_attempts} attempts "
            f"(started {self.attempts} times, sent {self.dispatches} times{last})"
        )


def renew_lease(
    session: Session, assay_id: uuid.UUID, shard_index: int, attempt: int, lease_s: float
) -> bool:
    """The running worker's heartbeat. False once the shard is stored or another attempt took it
    over; the worker then keeps going (its result is the same: the engine is deterministic, and
    whichever attempt stores first is kept)."""
    written = session.execute(
        sa.update(AssayShard)
        .where(
            col(AssayShard.assay_id) == assay_id,
            col(AssayShard.shard_index) == shard_index,
            col(AssayShard.status) == ShardStatus.RUNNING.value,
            col(AssayShard.attempts) == attempt,
        )
        .values(lease_expires_at=lease_until(utcnow(), lease_s))
    )
    return bool(written.rowcount == 1)  # type: ignore[attr-defined]


def renew_leases(
    session: Session, assay_id: uuid.UUID, held: Sequence[tuple[int, int]], lease_s: float
) -> int:
    """`renew_lease` for each (shard, attempt) a worker holds, in one transaction; returns how
    many it still holds (a stored shard, or one another attempt took over, is not renewed)."""
    return sum(renew_lease(session, assay_id, index, attempt, lease_s) for index, attempt in held)


def free_shards(
    session: Session,
    assay_id: uuid.UUID,
    now: datetime,
    *,
    limit: int,
    max_attempts: int | None = None,
) -> list[int]:
    """The open assay's shards a worker may begin now, in shard order, at most `limit`: not
    stored, queued or whose lease lapsed, with attempts left (what `begin_shard` takes, read
    without a lock: a shard another worker takes meanwhile is refused by `begin_shard`)."""
    attempts_left = sa.true() if max_attempts is None else col(AssayShard.attempts) < max_attempts
    return list(
        session.execute(
            sa.select(col(AssayShard.shard_index))
            .join(Assay, col(Assay.id) == col(AssayShard.assay_id))
            .where(
                col(AssayShard.assay_id) == assay_id,
                col(Assay.status).in_(OPEN),
                col(AssayShard.status) != ShardStatus.DONE.value,
                attempts_left,
                sa.or_(
                    col(AssayShard.status) == ShardStatus.PENDING.value,
                    col(AssayShard.lease_expires_at).is_(None),
                    col(AssayShard.lease_expires_at) < now,
                ),
            )
            .order_by(col(AssayShard.shard_index))
            .limit(limit)
        ).scalars()
    )


def record_progress(
    session: Session,
    assay_id: uuid.UUID,
    shard_index: int,
    attempt: int,
    progress: ShardActivity,
) -> bool:
    """A running shard's activity, from its worker's heartbeat (and once more when it ends, so
    its runs stay counted); an attempt that was taken over writes nothing."""
    written = session.execute(
        sa.update(AssayShard)
        .where(
            col(AssayShard.assay_id) == assay_id,
            col(AssayShard.shard_index) == shard_index,
            col(AssayShard.attempts) == attempt,
        )
        .values(progress=progress)
    )
    return bool(written.rowcount == 1)  # type: ignore[attr-defined]


def lapsed_shards(session: Session, now: datetime, *, limit: int = 500) -> list[Lapsed]:
    """Shards of open assays, not done, whose lease lapsed; locked until the transaction ends."""
    rows = session.execute(
        sa.select(
            col(AssayShard.assay_id),
            col(Assay.candidate_id),
            col(AssayShard.shard_index),
            col(AssayShard.fault_id),
            col(AssayShard.status),
            col(AssayShard.attempts),
            col(AssayShard.dispatches),
            col(AssayShard.worker),
            col(Assay.stop_reason),
        )
        .join(Assay, col(Assay.id) == col(AssayShard.assay_id))
        .where(
            col(Assay.status).in_(OPEN),
            col(AssayShard.status) != ShardStatus.DONE.value,
            sa.or_(
                col(AssayShard.lease_expires_at).is_(None),
                col(AssayShard.lease_expires_at) < now,
            ),
        )
        .order_by(col(AssayShard.assay_id), col(AssayShard.shard_index))
        .limit(limit)
        .with_for_update(of=AssayShard, skip_locked=True)
    ).all()
    return [Lapsed(*row) for row in rows]


def mark_dispatched(
    session: Session,
    assay_id: uuid.UUID,
    shard_indices: Sequence[int],
    now: datetime,
    lease_s: float,
) -> None:
    """Count one more message for each shard, and put it back in the queue: pending, under a
    fresh lease to be picked up in. (A worker that still runs it, cut off, no longer holds it:
    its heartbeat finds another status and the first run to store is kept.)"""
    if not shard_indices:
        return
    session.execute(
        sa.update(AssayShard)
        .where(
            col(AssayShard.assay_id) == assay_id,
            col(AssayShard.shard_index).in_(list(shard_indices)),
            col(AssayShard.status) != ShardStatus.DONE.value,
        )
        .values(
            status=ShardStatus.PENDING.value,
            dispatches=col(AssayShard.dispatches) + 1,
            lease_expires_at=lease_until(now, lease_s),
        )
    )
    candidate_id = session.execute(
        sa.select(col(Assay.candidate_id)).where(col(Assay.id) == assay_id)
    ).scalar_one()
    session.add(
        Event(
            kind="shard.redispatched",
            candidate_id=candidate_id,
            assay_id=assay_id,
            data={"shards": list(shard_indices)},
        )
    )


def release_all(session: Session, lease_s: float) -> dict[uuid.UUID, list[int]]:
    """Every unfinished shard of every open assay, put back in the queue: pending, one more
    message counted, a fresh lease. Only for a deployment whose one worker is known to be gone
    (embedded `serve`, before it starts its worker child): the shards that worker held may start
    again at once, without waiting for their leases to lapse. The caller sends the messages."""
    now = utcnow()
    rows = session.execute(
        sa.select(col(AssayShard.assay_id), col(AssayShard.shard_index))
        .join(Assay, col(Assay.id) == col(AssayShard.assay_id))
        .where(col(Assay.status).in_(OPEN), col(AssayShard.status) != ShardStatus.DONE.value)
        .order_by(col(AssayShard.assay_id), col(AssayShard.shard_index))
        .with_for_update(of=AssayShard)
    ).all()
    found: dict[uuid.UUID, list[int]] = {}
    for assay_id, index in rows:
        found.setdefault(assay_id, []).append(index)
    for assay_id, indices in found.items():
        mark_dispatched(session, assay_id, indices, now, lease_s)
    return found


def settle_stopped(session: Session, assay_id: uuid.UUID, reason: str, *, by: str) -> list[int]:
    """Store an empty, stopped result for every shard of a stopping assay that no worker holds a
    live lease on: pending ones, and running ones whose worker went quiet. A worker that still
    runs one of them later finds it stored and discards its result. Returns the shards settled.
    """
    now = utcnow()
    indices = list(
        session.execute(
            sa.select(col(AssayShard.shard_index))
            .where(
                col(AssayShard.assay_id) == assay_id,
                col(AssayShard.status) != ShardStatus.DONE.value,
                sa.or_(
                    col(AssayShard.status) == ShardStatus.PENDING.value,
                    col(AssayShard.lease_expires_at).is_(None),
                    col(AssayShard.lease_expires_at) < now,
                ),
            )
            .order_by(col(AssayShard.shard_index))
            .with_for_update()
        ).scalars()
    )
    if not indices:
        return []
    session.execute(
        sa.update(AssayShard),
        [
            {
                "assay_id": assay_id,
                "shard_index": index,
                "status": ShardStatus.DONE.value,
                "result": ShardResult(index, {}, 0, True, reason).to_dict(),
                "trials": 0,
                "worker": by,
                "started_at": now,
                "finished_at": now,
                "lease_expires_at": None,
            }
            for index in indices
        ],
    )
    candidate_id = session.execute(
        sa.update(Assay)
        .where(col(Assay.id) == assay_id)
        .values(shards_done=col(Assay.shards_done) + len(indices))
        .returning(col(Assay.candidate_id))
    ).scalar_one()
    session.add_all(
        Event(
            kind="shard.stored",
            candidate_id=candidate_id,
            assay_id=assay_id,
            shard_index=index,
            data={"trials": 0, "stopped": reason, "by": by},
        )
        for index in indices
    )
    return indices


def undecided_assays(session: Session, settled_before: datetime) -> list[uuid.UUID]:
    """Open assays whose every shard was stored before `settled_before` and nobody merged."""
    last_stored = sa.func.max(col(AssayShard.finished_at))
    rows = session.execute(
        sa.select(col(Assay.id))
        .join(AssayShard, col(AssayShard.assay_id) == col(Assay.id))
        .where(col(Assay.status).in_(OPEN), col(Assay.shards_done) == col(Assay.shard_count))
        .group_by(col(Assay.id))
        .having(last_stored < settled_before)
    ).scalars()
    return list(rows)
