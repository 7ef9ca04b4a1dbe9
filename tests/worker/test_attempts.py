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
from tests.support.service import default_example
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


def test_a_rerun_reads_its_floors_on_what_the_stored_attempts_of_its_release_graded(
    settings: Settings, engine: sa.Engine
) -> None:
    """Six perfect trials hold (a perfect record needs 16); a re-run of 20 perfect trials, which
    its own Wilson bound would allow, is read on the release's 26 and still holds, naming them;
    a third of 10 makes 36, which the confidence sequence puts above the 0.80 floors."""
    ctx = WorkerContext(settings)
    system = f"floors-{uuid.uuid4().hex[:8]}"
    manifest = default_example("typed")  # floors on the lower bound, as committed
    decided: list[tuple[str | None, list[dict[str, object]]]] = []
    for version, trials in (("1", 6), ("2", 20), ("3", 10)):
        plan = {**PLAN, "trials": trials}
        assay_id = record_assay(
            engine, settings, plan, manifest=manifest, system=system, version=version
        )
        stored(ctx, engine, assay_id)
        parsed = ctx.assay(assay_id)
        assert parsed is not None
        decision = finalize(ctx, parsed)
        with Session(engine) as session:
            row = session.get(Assay, assay_id)
            assert row is not None and row.report is not None
            floors = [v for f in row.report["faults"] for v in f["floors"]]
        decided.append((decision, floors))
    (first, own), (second, pooled), (third, earned) = decided
    assert (first, second, third) == ("hold", "hold", "allow")
    assert all("pooled" not in v for v in own)
    assert {(v["successes"], v["trials"]) for v in pooled} == {(20, 20)}
    assert {(p["attempts"], p["successes"], p["trials"]) for p in _pooled(pooled)} == {(2, 26, 26)}
    assert not any(v["met"] for v in pooled)
    assert {(p["attempts"], p["trials"]) for p in _pooled(earned)} == {(3, 36)}
    assert all(v["met"] for v in earned)


def _pooled(views: list[dict[str, object]]) -> list[dict[str, object]]:
    found = [v.get("pooled") for v in views]
    assert all(isinstance(p, dict) for p in found)
    return [p for p in found if isinstance(p, dict)]
