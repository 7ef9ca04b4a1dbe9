"""What a worker's reconciler does in the database: the units of its round (worker.reconciler).

Reconcilers in several workers never do a step twice: the lapsed rows are locked (`SKIP LOCKED`)
until the unit's transaction ends, and each send extends the lease in the transaction that
publishes it.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.app import reviews
from service.core.signing.dossier import Signer
from service.db.assay import fail_assay
from service.db.lease import (
    Lapsed,
    lapsed_shards,
    mark_dispatched,
    settle_stopped,
    undecided_assays,
)
from service.db.session import session_scope

__all__ = ["Lapsed", "Settled", "expire_reviews", "resend_lost", "settle_lapsed", "undecided"]

#: Lost shards to send again: per queue, per assay, the shard indices.
Lost = dict[str, dict[uuid.UUID, list[int]]]


@dataclass
class Settled:
    """What `settle_lapsed` did: the assays it failed (a shard and the reason), the assays that
    are stopping (their reason), and how many of their shards it settled."""

    failed: list[tuple[Lapsed, str]] = field(default_factory=list)
    stopping: dict[uuid.UUID, str] = field(default_factory=dict)
    settled: int = 0


def settle_lapsed(engine: Engine, now: datetime, max_attempts: int, *, by: str) -> Settled:
    """Fail an assay one of whose shards lapsed after `max_attempts` starts or sends (once);
    settle the lapsed shards of a stopping assay (an empty, stopped result). One transaction."""
    done = Settled()
    with session_scope(engine) as session:
        for shard in lapsed_shards(session, now):
            if shard.stop_reason is not None:
                done.stopping[shard.assay_id] = shard.stop_reason
            elif shard.tries >= max_attempts:
                reason = shard.exhausted(max_attempts)
                if fail_assay(session, shard.assay_id, reason):
                    done.failed.append((shard, reason))
        for assay_id, reason in done.stopping.items():
            done.settled += len(settle_stopped(session, assay_id, reason, by=by))
    return done


def resend_lost(
    engine: Engine,
    now: datetime,
    lease_s: float,
    queue_of: Callable[[Lapsed], str | None],
    publish: Callable[[str, dict[uuid.UUID, list[int]]], None],
) -> Lost:
    """Send again each lapsed shard `queue_of` names a queue for (None: not lost), extending its
    lease in the transaction that publishes it: if `publish` raises, nothing is counted."""
    lost: Lost = defaultdict(lambda: defaultdict(list))
    with session_scope(engine) as session:
        for shard in lapsed_shards(session, now):
            queue = queue_of(shard)
            if queue is not None:
                lost[queue][shard.assay_id].append(shard.shard_index)
        if not lost:
            return {}
        for by_assay in lost.values():
            for assay_id, indices in by_assay.items():
                mark_dispatched(session, assay_id, indices, now, lease_s)
        for queue, by_assay in lost.items():
            publish(queue, by_assay)
    return lost


def undecided(engine: Engine, settled_before: datetime) -> list[uuid.UUID]:
    """Open assays every shard of which was stored before `settled_before`, undecided."""
    with Session(engine) as session:
        return undecided_assays(session, settled_before)


def expire_reviews(engine: Engine, signer: Signer) -> int:
    """Sign the version that records each lapsed waiver or rejection, in one transaction."""
    with session_scope(engine) as session:
        return reviews.expire_lapsed(session, signer)
