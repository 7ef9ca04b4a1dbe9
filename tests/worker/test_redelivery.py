"""A worker SIGKILLed mid-assay: another worker finishes, and the figures are exactly those of an
uninterrupted run. Nothing lost (acks_late + visibility timeout), nothing counted twice (a shard's
result is written only while unset)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.asgi import create_app
from service.core.faults.plan import parse_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import parse_manifest
from service.db.models import AssayShard, Event, ShardStatus
from service.settings import Settings
from tests.support.keys import ALL_ROLES, make_key
from tests.support.reports import figures
from tests.support.service import ApiServer, WorkerProcess, candidate_body, wait_decided, wait_for

pytestmark = pytest.mark.integration

MODES = ["subject_swap", "stale_policy", "timeout_after_commit", "fork_run"]


def shards(engine: sa.Engine, assay_id: uuid.UUID) -> list[AssayShard]:
    with Session(engine) as session:
        return list(
            session.exec(
                select(AssayShard)
                .where(AssayShard.assay_id == assay_id)
                .order_by(col(AssayShard.shard_index))
            ).all()
        )


def test_a_worker_killed_mid_shard_loses_nothing_and_counts_nothing_twice(
    settings: Settings, engine: sa.Engine, start_worker: Callable[[str], WorkerProcess]
) -> None:
    body = candidate_body("typed", trials=6000, seed=42, modes=MODES)
    doomed = start_worker("doomed")
    with (
        ApiServer(create_app(settings)) as server,
        httpx.Client(
            base_url=server.url, timeout=30.0, headers=make_key(engine, "acme", ALL_ROLES).headers
        ) as client,
    ):
        submitted = client.post("/v1/candidates", json=body).json()
        assay_id = uuid.UUID(submitted["assay_id"])

        def mid_shard() -> bool:
            states = [s.status for s in shards(engine, assay_id)]
            return ShardStatus.DONE in states and ShardStatus.RUNNING in states

        wait_for(mid_shard, 60.0, "the first worker to be inside a shard", most=0.05)
        doomed.kill()
        interrupted = [s.shard_index for s in shards(engine, assay_id) if s.status == "running"]
        assert interrupted, "the kill should land inside a shard"

        # Meanwhile the assay shows how far it got, with signatures over the trials so far.
        partial = client.get(f"/v1/assays/{assay_id}").json()
        assert partial["status"] == "running" and partial["decision"] is None
        started = [f for f in partial["faults"] if f["progress"]["trials_done"]]
        assert started and not any(f["final"] for f in partial["faults"])
        for fault in started:
            assert fault["signature"]["planned"] == fault["progress"]["trials_done"]

        start_worker("rescuer")
        done = wait_decided(client, submitted["id"], timeout=120.0)
        report = client.get(f"/v1/assays/{assay_id}").json()["report"]

    expected = run_assay(parse_manifest(body["manifest"]), parse_plan(body["plan"])).to_dict()
    assert figures(report) == figures(expected)
    assert done["progress"]["trials_done"] == done["progress"]["trials_planned"] == 4 * 6000
    final = shards(engine, assay_id)
    assert all(s.status == ShardStatus.DONE for s in final)
    assert all(final[i].attempts >= 2 for i in interrupted)
    with Session(engine) as session:
        stored = session.exec(
            select(Event.shard_index).where(
                Event.assay_id == assay_id, Event.kind == "shard.stored"
            )
        ).all()
    assert sorted(stored) == [s.shard_index for s in final]
