"""Aborting an assay over the API while real workers run it."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from service.db.models import AssayShard, Event
from tests.support.service import example

pytestmark = pytest.mark.integration


def test_an_abort_stops_a_running_assay_and_keeps_what_was_recorded(
    client: httpx.Client, engine: sa.Engine
) -> None:
    body = {
        "source_revision": "abort-test",
        "manifest": example("typed"),
        "plan": {"trials": 3000, "seed": 3},
    }
    created = client.post("/v1/candidates", json=body).json()
    assay_id = created["assay_id"]

    def progressed() -> bool:
        return client.get(f"/v1/assays/{assay_id}").json()["progress"]["shards_done"] >= 2

    deadline = time.time() + 60
    while not progressed():
        assert time.time() < deadline, "the assay never started"
        time.sleep(0.05)
    aborted = client.post(f"/v1/assays/{assay_id}/abort", json={"reason": "operator test"})
    assert aborted.status_code == 202
    deadline = time.time() + 120
    while (state := client.get(f"/v1/assays/{assay_id}").json())["status"] not in (
        "stopped",
        "done",
    ):
        assert time.time() < deadline, "the aborted assay never finished"
        time.sleep(0.1)
    assert state["status"] == "stopped"
    assert state["stop_reason"] == "aborted: operator test"
    assert state["decision"] == "block"
    assert 0 < state["progress"]["trials_done"] < state["progress"]["trials_planned"]
    with Session(engine) as session:
        aborted_event = session.exec(
            select(Event).where(
                Event.assay_id == uuid.UUID(assay_id), Event.kind == "assay.aborted"
            )
        ).one()
        shards = session.exec(
            select(AssayShard).where(AssayShard.assay_id == uuid.UUID(assay_id))
        ).all()
    # No shard that started after the abort was recorded ran a single trial...
    late = [s for s in shards if s.started_at is not None and s.started_at > aborted_event.at]
    assert late and all(s.trials == 0 for s in late)
    # ...and everything recorded before it is kept and counted.
    assert sum(s.trials for s in shards) == state["progress"]["trials_done"]
    assert state["report"]["stopped"] == "aborted: operator test"
    # A retried abort changes nothing and says so.
    again = client.post(f"/v1/assays/{assay_id}/abort", json={"reason": "retry"})
    assert again.status_code == 202
    assert again.json()["stop_reason"] == "aborted: operator test"
