"""Shard leases: a copy of a message never starts a shard a live worker holds, a lapsed shard is
found, sent again and counted, a stopping assay is settled around the shards still running."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.db.assay import AssayInputs, assay_inputs, begin_shard, fail_assay
from service.db.injector import request_stop
from service.db.lease import lapsed_shards, mark_dispatched, renew_lease, settle_stopped
from service.db.models import AssayShard, Event, ShardStatus, utcnow
from tests.db.test_candidate import record

pytestmark = pytest.mark.integration


def inputs_of(session: Session) -> AssayInputs:
    inputs = assay_inputs(session, record(session).assay.id)
    assert inputs is not None
    return inputs


def lapse(session: Session, assay_id: uuid.UUID, *indices: int) -> None:
    session.execute(
        sa.update(AssayShard)
        .where(col(AssayShard.assay_id) == assay_id, col(AssayShard.shard_index).in_(indices))
        .values(lease_expires_at=utcnow() - timedelta(seconds=1))
    )


def shard(session: Session, assay_id: uuid.UUID, index: int) -> AssayShard:
    session.expire_all()
    found = session.get(AssayShard, (assay_id, index))
    assert found is not None
    return found


def mine(session: Session, assay_id: uuid.UUID) -> list[int]:
    return [s.shard_index for s in lapsed_shards(session, utcnow()) if s.assay_id == assay_id]


def test_a_recorded_shard_counts_its_first_message_and_waits_under_a_lease(
    session: Session,
) -> None:
    inputs = inputs_of(session)
    first = shard(session, inputs.assay_id, 0)
    assert first.dispatches == 1 and first.attempts == 0
    assert first.lease_expires_at is not None and first.lease_expires_at > utcnow()
    assert mine(session, inputs.assay_id) == []


def test_a_copy_of_a_message_does_not_start_a_shard_a_live_worker_holds(session: Session) -> None:
    inputs = inputs_of(session)
    assert begin_shard(session, inputs, 0, "w1", lease_s=60) is not None
    assert begin_shard(session, inputs, 0, "w2", lease_s=60) is None
    assert renew_lease(session, inputs.assay_id, 0, 1, 60)
    held = shard(session, inputs.assay_id, 0)
    assert (held.attempts, held.worker) == (1, "w1")


def test_a_shard_whose_worker_went_quiet_is_taken_over_by_the_next_attempt(
    session: Session,
) -> None:
    inputs = inputs_of(session)
    assert begin_shard(session, inputs, 0, "w1", lease_s=60) is not None
    lapse(session, inputs.assay_id, 0)
    assert mine(session, inputs.assay_id) == [0]
    taken = begin_shard(session, inputs, 0, "w2", lease_s=60)
    assert taken is not None and taken.attempt == 2
    # The first worker's heartbeat no longer holds it.
    assert not renew_lease(session, inputs.assay_id, 0, 1, 60)
    assert renew_lease(session, inputs.assay_id, 0, 2, 60)


def test_a_copy_redelivered_after_the_last_attempt_does_not_start_the_shard_again(
    session: Session,
) -> None:
    inputs = inputs_of(session)
    for attempt in (1, 2):
        begun = begin_shard(session, inputs, 0, f"w{attempt}", lease_s=60, max_attempts=2)
        assert begun is not None and begun.attempt == attempt
        lapse(session, inputs.assay_id, 0)
    assert begin_shard(session, inputs, 0, "w3", lease_s=60, max_attempts=2) is None
    assert shard(session, inputs.assay_id, 0).attempts == 2
    # Still lapsed: the reconciler sees it and fails the assay for its spent attempts.
    assert mine(session, inputs.assay_id) == [0]


def test_a_resent_shard_is_pending_again_counts_the_message_and_is_leased_anew(
    session: Session,
) -> None:
    inputs = inputs_of(session)
    begin_shard(session, inputs, 1, "w1", lease_s=60)
    lapse(session, inputs.assay_id, 0, 1)
    assert mine(session, inputs.assay_id) == [0, 1]
    now = utcnow()
    mark_dispatched(session, inputs.assay_id, [0, 1], now, 60)
    assert mine(session, inputs.assay_id) == []
    for index in (0, 1):
        resent = shard(session, inputs.assay_id, index)
        assert resent.status == ShardStatus.PENDING and resent.dispatches == 2
    events = session.exec(
        select(Event.data).where(
            Event.assay_id == inputs.assay_id, Event.kind == "shard.redispatched"
        )
    ).all()
    assert events == [{"shards": [0, 1]}]
    # The message it was sent with starts it at once.
    assert begin_shard(session, inputs, 1, "w2", lease_s=60) is not None


def test_settling_a_stopping_assay_spares_the_shards_a_live_worker_holds(
    session: Session,
) -> None:
    inputs = inputs_of(session)
    begin_shard(session, inputs, 0, "alive", lease_s=60)
    begin_shard(session, inputs, 1, "gone", lease_s=60)
    lapse(session, inputs.assay_id, 1)
    assert request_stop(session, inputs.assay_id, "aborted: test", kind="assay.aborted", data={})
    settled = settle_stopped(session, inputs.assay_id, "aborted: test", by="test")
    assert settled == [1, 2, 3]
    assert shard(session, inputs.assay_id, 0).status == ShardStatus.RUNNING
    for index in settled:
        stopped = shard(session, inputs.assay_id, index)
        assert stopped.status == ShardStatus.DONE and stopped.trials == 0
        assert stopped.result is not None and stopped.result["stop_reason"] == "aborted: test"
    assert settle_stopped(session, inputs.assay_id, "aborted: test", by="test") == []


def test_no_shard_of_a_failed_assay_starts_or_lapses(session: Session) -> None:
    inputs = inputs_of(session)
    lapse(session, inputs.assay_id, 0)
    assert fail_assay(session, inputs.assay_id, "shard 0 did not finish after 5 attempts")
    assert not fail_assay(session, inputs.assay_id, "again")
    assert begin_shard(session, inputs, 0, "late", lease_s=60) is None
    assert mine(session, inputs.assay_id) == []
