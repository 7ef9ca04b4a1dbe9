"""A running shard's heartbeat writes what its engine is doing as the shard's progress."""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col

from service.core.shards.shard import ShardActivity
from service.db.models import Assay, AssayShard, ShardStatus
from service.settings import Settings
from tests.web.seed import seed_candidate
from worker.context import WorkerContext
from worker.heartbeat import EngineWatch, Heartbeat


class Busy:
    """An engine's activity as the mcp engine reports it (`McpEngine.activity`)."""

    def __init__(self) -> None:
        self.now = ShardActivity(runs_done=5, gate_runs_done=1, slots=4, slots_busy=0, waiting={})

    def activity(self) -> ShardActivity:
        return ShardActivity(**self.now)


def progress_of(engine: sa.Engine, assay_id: Any, index: int) -> dict[str, Any] | None:
    with Session(engine) as session:
        shard = session.get(AssayShard, (assay_id, index))
        assert shard is not None
        return shard.progress


def test_the_heartbeat_records_runs_since_the_shard_began_and_what_slots_wait_for(
    settings: Settings, engine: sa.Engine
) -> None:
    with Session(engine) as session:
        recorded = seed_candidate(session, system="heartbeat", version="1", decided=False)
        assay_id = recorded.assay.id
        session.execute(
            sa.update(AssayShard)
            .where(col(AssayShard.assay_id) == assay_id, col(AssayShard.shard_index) == 0)
            .values(status=ShardStatus.RUNNING.value, attempts=1)
        )
        session.commit()
    ctx = WorkerContext(settings.model_copy(update={"shard_lease_s": 0.3}))
    busy, watch = Busy(), EngineWatch()
    # The engine ran five runs for earlier shards: this shard's count starts from there.
    watch.watch(busy)
    try:
        with Heartbeat(ctx, assay_id, 0, 1, watch.activity):
            busy.now = {
                "runs_done": 12,
                "gate_runs_done": 3,
                "slots": 4,
                "slots_busy": 3,
                "waiting": {"agent": 3},
            }
            end = time.monotonic() + 10
            while (progress_of(engine, assay_id, 0) or {}).get("slots_busy") != 3:
                assert time.monotonic() < end, "no progress was written"
                time.sleep(0.05)
        final = progress_of(engine, assay_id, 0)
    finally:
        # Closed, so the other tests' reconcilers never send this assay's shards.
        with Session(engine) as session:
            session.execute(
                sa.update(Assay).where(col(Assay.id) == assay_id).values(status="failed")
            )
            session.commit()
    # The team's agent runs and the gate's own (the naive agent's) are counted apart.
    assert final == {
        "runs_done": 7,
        "gate_runs_done": 2,
        "slots": 4,
        "slots_busy": 0,
        "waiting": {},
    }


def test_a_target_without_activity_writes_no_progress() -> None:
    watch = EngineWatch()
    watch.watch(None)  # the reference target
    assert watch.activity() is None
