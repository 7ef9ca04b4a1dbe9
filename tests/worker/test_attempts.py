"""Two attempts of one release finishing at the same moment, through the worker's merge on a real
database: the later one waits for the earlier one's decision, so a block on evidence cannot slip
past an attempt that finished beside it."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from service.core.decision.gate import Decision, Reason
from service.core.shards.assay import ShardSpec, run_shard
from service.db import release as releases
from service.db.assay import record_report, store_shard_result
from service.db.models import Assay, AssayShard
from service.db.session import session_scope
from service.settings import Settings
from tests.support.worker import record_assay
from worker.context import WorkerContext
from worker.tasks import finalize

pytestmark = pytest.mark.integration

PLAN = {"trials": 10, "seed": 9, "modes": ["subject_swap"]}


def stored(ctx: WorkerContext, engine: sa.Engine, assay_id: uuid.UUID) -> None:
    """Every shard of the assay run in this process and stored: ready to merge."""
    parsed = ctx.assay(assay_id)
    assert parsed is not None
    with Session(engine) as session:
        specs = session.exec(select(AssayShard.spec).where(AssayShard.assay_id == assay_id)).all()
    for spec in specs:
        result = run_shard(parsed.manifest, parsed.plan, ShardSpec.from_dict(spec))
        with session_scope(engine) as session:
            store_shard_result(
                session, parsed.inputs, result.index, result.to_dict(), result.trials
            )


def test_an_attempt_finishing_beside_a_blocked_one_of_its_release_waits_and_is_blocked(
    settings: Settings, engine: sa.Engine
) -> None:
    ctx = WorkerContext(settings)
    system = f"race-{uuid.uuid4().hex[:8]}"
    # Two candidates of one system with the same manifest, no code, one policy: one release.
    first = record_assay(engine, settings, PLAN, system=system, version="1")
    second = record_assay(engine, settings, PLAN, system=system, version="2")
    for assay_id in (first, second):
        stored(ctx, engine, assay_id)

    locked, merging = threading.Event(), threading.Event()

    def first_blocks() -> None:
        """The first attempt's merge, holding the release's lock while it decides `block`."""
        with session_scope(engine) as session:
            releases.lock(session, first)
            locked.set()
            merging.wait(10)
            time.sleep(0.5)  # the second merge is waiting on the lock by now
            duplicate = Reason(
                "duplicate_effect", "duplicate effect in 1 of 10", "f", Decision.BLOCK
            )
            report = {"decision": "block", "reasons": [duplicate.view()], "stopped": None}
            assert record_report(session, first, decision="block", report=report, faults=[])

    def second_finishes() -> str | None:
        locked.wait(10)
        merging.set()
        parsed = WorkerContext(settings).assay(second)
        assert parsed is not None
        return finalize(WorkerContext(settings), parsed)

    with ThreadPoolExecutor(max_workers=2) as pool:
        blocking = pool.submit(first_blocks)
        decided = pool.submit(second_finishes)
        blocking.result(timeout=60)
        decision = decided.result(timeout=60)

    assert decision == "block"
    with Session(engine) as session:
        row = session.get(Assay, second)
        assert row is not None and row.reasons is not None
    assert row.reasons[0]["code"] == "release_blocked"
    assert str(first) in row.reasons[0]["message"]
    assert [r["code"] for r in row.reasons[1:] if r["severity"] == "block"] == []
