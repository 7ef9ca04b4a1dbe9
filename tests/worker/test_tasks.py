"""The shard task body on a real database, called directly the way a redelivery would call it."""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa
from sqlmodel import Session, func, select

from service.core.faults.plan import parse_plan
from service.core.shards.assay import ShardSpec, run_assay, run_shard
from service.core.system.manifest import Manifest, parse_manifest
from service.core.trial.harness import Runtime, run_trial
from service.db.assay import AssayInputs, assay_inputs, begin_shard, store_shard_result
from service.db.models import Assay, AssayShard, AssayStatus, Event, FaultResultRow
from service.db.session import session_scope
from service.settings import Settings
from service.targets import PythonTarget, close_target
from tests.support.service import example, tenant_code
from tests.support.worker import record_assay
from worker.context import MAX_TARGETS, WorkerContext
from worker.rights import Warden
from worker.tasks import execute_shard, finalize

pytestmark = pytest.mark.integration


def submit(engine: sa.Engine, settings: Settings, trials: int = 40, **plan: object) -> uuid.UUID:
    # This file's plan seed and shard size, which its expected counts were computed with.
    return record_assay(
        engine,
        settings,
        {"trials": trials, "seed": 9, **plan},
        version="1.5.0",
        trials_per_shard=20,
    )


@pytest.fixture
def ctx(settings: Settings) -> WorkerContext:
    return WorkerContext(settings)


def assay_row(engine: sa.Engine, assay_id: uuid.UUID) -> Assay:
    with Session(engine) as session:
        row = session.get(Assay, assay_id)
        assert row is not None
        return row


def test_a_redelivered_shard_is_counted_once(ctx: WorkerContext, engine: sa.Engine) -> None:
    assay_id = submit(engine, ctx.settings, modes=["subject_swap"])
    first = execute_shard(ctx, assay_id, 0, "w1")
    again = execute_shard(ctx, assay_id, 0, "w2")
    assert first["stored"] is True
    assert again["stored"] is False
    row = assay_row(engine, assay_id)
    assert (row.shards_done, row.trials_done) == (1, 20)


def test_a_shard_run_by_two_workers_at_once_is_stored_by_one(
    ctx: WorkerContext, engine: sa.Engine
) -> None:
    # The first worker went quiet past its lease: the reconciler handed its shard to a second.
    assay_id = submit(engine, ctx.settings, modes=["subject_swap"])
    with session_scope(engine) as session:
        inputs = assay_inputs(session, assay_id)
        assert inputs is not None
        assert begin_shard(session, inputs, 1, "slow", lease_s=0.001) is not None
    time.sleep(0.01)
    with session_scope(engine) as session:
        assert begin_shard(session, inputs, 1, "fast", lease_s=60) is not None
    result = {"index": 1, "trials": 20, "stopped": False, "tallies": {}}
    with session_scope(engine) as session:
        assert store_shard_result(session, inputs, 1, result, 20).written
    with session_scope(engine) as session:
        assert not store_shard_result(session, inputs, 1, result, 20).written
    with Session(engine) as session:
        shard = session.get(AssayShard, (assay_id, 1))
        assert shard is not None and shard.attempts == 2
    assert assay_row(engine, assay_id).trials_done == 20


def test_racing_merges_record_the_decision_exactly_once(
    ctx: WorkerContext, engine: sa.Engine
) -> None:
    assay_id = submit(engine, ctx.settings, trials=20, families=["tool"])
    parsed = ctx.assay(assay_id)
    with Session(engine) as session:
        specs = session.exec(select(AssayShard.spec).where(AssayShard.assay_id == assay_id)).all()
    assert parsed is not None
    for spec in specs:
        result = run_shard(parsed.manifest, parsed.plan, ShardSpec.from_dict(spec))
        with session_scope(engine) as session:
            store_shard_result(
                session, parsed.inputs, result.index, result.to_dict(), result.trials
            )

    # Every shard's redelivery may try the merge at the same moment.
    def merge_in_a_fresh_worker(_: int) -> str | None:
        fresh = WorkerContext(ctx.settings)
        parsed = fresh.assay(assay_id)
        assert parsed is not None
        return finalize(fresh, parsed)

    with ThreadPoolExecutor(max_workers=6) as pool:
        decisions = list(pool.map(merge_in_a_fresh_worker, range(6)))
    with Session(engine) as session:
        decided = session.exec(
            select(func.count()).where(Event.assay_id == assay_id, Event.kind == "assay.decided")
        ).one()
        faults = session.exec(select(func.count()).where(FaultResultRow.assay_id == assay_id)).one()
    expected = run_assay(
        parse_manifest(example("typed")),
        parse_plan({"trials": 20, "seed": 9, "families": ["tool"]}),
    )
    assert decided == 1
    assert faults == len(expected.to_dict()["faults"])
    assert assay_row(engine, assay_id).status == AssayStatus.DONE
    # At least one merge must have decided (a subset check would pass if none did), and every one
    # that did agrees with the engine run in-process.
    assert {d for d in decisions if d is not None} == {expected.decision}


def test_an_engine_error_fails_the_assay_instead_of_leaving_it_running(
    ctx: WorkerContext, engine: sa.Engine
) -> None:
    assay_id = submit(engine, ctx.settings, modes=["subject_swap"])
    with session_scope(engine) as session:
        shard = session.get(AssayShard, (assay_id, 0))
        assert shard is not None
        shard.spec = ShardSpec(0, "no_such_fault", 0, 20).to_dict()
        session.add(shard)
    with pytest.raises(Exception, match="no_such_fault"):
        execute_shard(ctx, assay_id, 0, "w")
    row = assay_row(engine, assay_id)
    assert row.status == AssayStatus.FAILED
    assert row.report is not None and "no_such_fault" in row.report["error"]


def test_a_shard_of_an_unknown_assay_is_dropped_quietly(ctx: WorkerContext) -> None:
    outcome = execute_shard(ctx, uuid.uuid4(), 0, "w")
    assert outcome["stored"] is False and outcome["decision"] is None


def test_a_worker_keeps_a_few_target_adapters_and_stops_the_child_of_the_one_it_drops(
    settings: Settings,
) -> None:
    # The tenant's own worker: a python target is the tenant's code, run in the sandbox.
    tenant_worker = {"worker_tenant": "acme", "tenant_code_dir": tenant_code()}
    ctx = WorkerContext(settings.model_copy(update=tenant_worker))
    # These assays have no rows: the warden's poll would end their sandboxes at once (it is
    # test_code_rights's), so it does not come round while this test runs.
    ctx.warden = Warden(lambda: ctx.engine, ctx.end_assay, every_s=3600)
    manifests = [
        parse_manifest(
            {
                **example("typed"),
                "prompt": {"template": "refund-agent", "sha": f"4f1c{n}"},
                "target": {"kind": "python", "entrypoint": "tests.worker.agents.rogue:agent"},
            }
        )
        for n in range(MAX_TARGETS + 1)
    ]
    tenant = uuid.uuid4()

    def inputs(manifest: Manifest) -> AssayInputs:
        data = manifest.model_dump(mode="json")
        return AssayInputs(uuid.uuid4(), uuid.uuid4(), manifest.digest(), data, {}, tenant, "acme")

    assay, given = uuid.uuid4(), inputs(manifests[0])
    first = ctx.target(assay, manifests[0], given)
    assert isinstance(first, PythonTarget)
    p = parse_plan({"trials": 1, "seed": 9, "modes": ["timeout_before_send"]})
    run_trial(Runtime(manifests[0], p.resolve_catalogue(), first), p.faults()[0], 1, 2)
    pid = first.pid
    assert pid is not None
    assert ctx.target(assay, manifests[0], given) is first  # cached for the assay's shards
    for manifest in manifests[1:]:
        ctx.target(uuid.uuid4(), manifest, inputs(manifest))
    assert first.pid is None  # the least recently used was closed: its sandbox stopped and reaped
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    for manifest in manifests[1:]:
        close_target(ctx.target(uuid.uuid4(), manifest, inputs(manifest)))
