"""What the workers are doing, on the candidate page and in the API: agent runs done, slots busy
and what each busy slot waits for, from the progress a running shard's heartbeat records."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session, col

from service.core.shards.shard import ShardActivity
from service.db.lease import record_progress
from service.db.models import Assay, AssayShard, ShardStatus
from service.db.queries import live_progress
from tests.web.conftest import Seeded


@pytest.fixture
def busy(web_engine: sa.Engine, seeded: Seeded) -> Iterator[uuid.UUID]:
    """The running candidate's shard, running on a worker whose three slots are busy."""
    with Session(web_engine) as session:
        shard = (
            session.execute(
                sa.select(AssayShard)
                .join(Assay, col(Assay.id) == col(AssayShard.assay_id))
                .where(col(Assay.candidate_id) == uuid.UUID(seeded.running))
            )
            .scalars()
            .first()
        )
        assert shard is not None
        assay_id, index, status = shard.assay_id, shard.shard_index, shard.status
        shard.status, shard.attempts = ShardStatus.RUNNING.value, 1
        session.add(shard)
        session.commit()
        activity = ShardActivity(
            runs_done=17, gate_runs_done=4, slots=4, slots_busy=3, waiting={"agent": 2, "reset": 1}
        )
        assert record_progress(session, assay_id, index, 1, activity)
        session.commit()
    try:
        yield assay_id
    finally:
        with Session(web_engine) as session:
            session.execute(
                sa.update(AssayShard)
                .where(col(AssayShard.assay_id) == assay_id, col(AssayShard.shard_index) == index)
                .values(status=status, attempts=0, progress=None)
            )
            session.commit()


def test_live_progress_sums_runs_and_counts_only_running_shards_busy(
    web_engine: sa.Engine, busy: uuid.UUID
) -> None:
    with Session(web_engine) as session:
        live = live_progress(session, busy)
        assert (live.runs_done, live.slots_busy, live.waiting) == (17, 3, {"agent": 2, "reset": 1})
        assert live.gate_runs_done == 4
        session.execute(
            sa.update(AssayShard)
            .where(col(AssayShard.assay_id) == busy)
            .values(status=ShardStatus.DONE.value)
        )
        # A finished shard's runs still count; its slots are no longer busy.
        done = live_progress(session, busy)
        assert (done.runs_done, done.slots_busy, done.waiting) == (17, 0, {})
        session.rollback()


def test_the_candidate_page_says_what_the_busy_slots_wait_for(
    web_client: TestClient, seeded: Seeded, busy: uuid.UUID
) -> None:
    page = web_client.get(f"/candidates/{seeded.running}").text
    assert '<span id="runs-done">17</span> runs of your agent' in page
    assert '(+ <span id="gate-runs-done">4</span> of the gate&rsquo;s own)' in page
    assert '<span id="slots-busy">3</span> slots busy' in page
    assert "2 waiting for agent, 1 waiting for reset" in page


def test_the_api_progress_carries_runs_slots_and_waits(
    web_client: TestClient, seeded: Seeded, busy: uuid.UUID
) -> None:
    response = web_client.get(f"/v1/candidates/{seeded.running}")
    assert response.status_code == 200, response.text
    progress = response.json()["progress"]
    assert (progress["runs_done"], progress["gate_runs_done"]) == (17, 4)
    assert progress["slots_busy"] == 3
    assert progress["waiting"] == {"agent": 2, "reset": 1}
    assay = web_client.get(f"/v1/assays/{busy}").json()
    assert assay["progress"]["waiting"] == {"agent": 2, "reset": 1}
