"""The service's workers run the plan's rule and enforce its budgets, as the local CLI does: a
sequential fault is one shard that stops on its own tally; a budget counts what the assay's
stored shards already spent and stops it with the reason `budget` (a hold)."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from service.core.faults.plan import parse_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import parse_manifest
from service.db.models import Assay, AssayShard
from tests.support.service import example
from tests.worker.test_tasks import ctx, submit
from worker.context import WorkerContext
from worker.tasks import execute_shard, finalize

pytestmark = pytest.mark.integration
__all__ = ["ctx"]

MODES = ["subject_swap", "timeout_after_commit", "stale_policy"]


def run_all(ctx: WorkerContext, engine: sa.Engine, assay_id: uuid.UUID) -> Assay:
    with Session(engine) as session:
        count = len(session.exec(select(AssayShard).where(AssayShard.assay_id == assay_id)).all())
    for index in range(count):
        execute_shard(ctx, assay_id, index, "w1")
    parsed = ctx.assay(assay_id)
    assert parsed is not None
    finalize(ctx, parsed)
    with Session(engine) as session:
        row = session.get(Assay, assay_id)
        assert row is not None
        return row


def test_a_worker_runs_the_sequential_plan_and_decides_as_the_local_assay(
    ctx: WorkerContext, engine: sa.Engine
) -> None:
    assay_id = submit(engine, ctx.settings, trials=40, modes=MODES, rule="sequential")
    row = run_all(ctx, engine, assay_id)
    local = run_assay(
        parse_manifest(example("typed")),
        parse_plan({"trials": 40, "seed": 9, "modes": MODES, "rule": "sequential"}),
    )
    assert row.shard_count == len(MODES), "one shard per sequential fault"
    assert row.report is not None
    assert row.decision == local.decision.value
    assert row.report["rule"] == "sequential"
    stops = {f["id"]: f["stop"] for f in row.report["faults"]}
    assert stops == {f.id: f.stop for f in local.faults}
    assert row.report["spend"]["total"]["runs"] > 0


def test_a_worker_stops_the_assay_at_its_run_budget_with_the_reason_budget(
    ctx: WorkerContext, engine: sa.Engine
) -> None:
    # 40 trials in two shards of 20, five runs a trial (intervention, baseline, three pairs): the
    # budget of 30 runs stops the first shard, and the second never starts.
    assay_id = submit(
        engine, ctx.settings, trials=40, modes=["subject_swap"], stop={"max_runs": 30}
    )
    row = run_all(ctx, engine, assay_id)
    assert row.decision == "hold"
    assert row.reasons is not None
    budget = [r for r in row.reasons if r["code"] == "budget"]
    assert len(budget) == 1 and "agent runs" in budget[0]["message"]
    assert row.stop_reason is not None and row.stop_reason.startswith("budget:")
    # Admitted before it spends: six trials of five runs fit, a seventh would not, so it never
    # started; the stop states the spend as the report does.
    assert row.report is not None
    spent = row.report["spend"]["total"]["runs"]
    assert spent == 30
    assert row.stop_reason.startswith(f"budget: agent runs {spent} spent of the budget of 30")
