"""Lost shards are found by their leases and sent again, once; a shard that cannot run fails its
assay with a reason; an abort ends an assay that no worker is running; a database that does not
answer is never acknowledged as done. Real PostgreSQL, Redis and worker processes throughout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from celery.exceptions import Reject
from sqlmodel import Session, col, func, select

from service.asgi import create_app
from service.core.faults.plan import parse_plan
from service.core.shards.assay import ShardSpec, plan_shards, run_assay, run_shard
from service.core.system.manifest import parse_manifest
from service.db.apikey import ensure_tenant
from service.db.assay import assay_inputs, begin_shard, store_shard_result
from service.db.candidate import record_submission
from service.db.injector import request_stop
from service.db.models import Assay, AssayShard, AssayStatus, Dossier, Event, ShardStatus
from service.db.session import session_scope
from service.http.dispatch import Dispatcher
from service.keys import KeyRing
from service.settings import Settings
from tests.support.keys import ALL_ROLES, make_key
from tests.support.reports import figures
from tests.support.service import (
    EXAMPLES,
    ApiServer,
    WorkerProcess,
    candidate_body,
    grant_injector,
    wait_decided,
    wait_for,
)
from tests.web.seed import seed_waiver
from worker.app import make_celery
from worker.context import WorkerContext
from worker.reconciler import Reconciler
from worker.tasks import RUN_SHARD, StoreUnavailable, execute_shard

pytestmark = pytest.mark.integration

DEAD_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:1/assaygate"


def manifest_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads((EXAMPLES / "copperfin-typed.json").read_text())
    return document


def record(
    engine: sa.Engine,
    settings: Settings,
    plan: dict[str, Any],
    *,
    lease_s: float,
    shard: int | None = None,
) -> uuid.UUID:
    """An assay recorded as the API records one, under a lease of `lease_s`, and no message sent:
    as if every message was lost on the way."""
    manifest = parse_manifest(manifest_document())
    parsed = parse_plan(plan)
    with session_scope(engine) as session:
        recorded = record_submission(
            session,
            tenant_id=ensure_tenant(session, "acme").id,
            system_name=f"reconciler-{uuid.uuid4().hex[:8]}",
            version="1",
            source_revision="direct",
            manifest=manifest,
            plan_document=parsed.model_dump(mode="json"),
            catalogue=parsed.resolve_catalogue().version,
            shards=plan_shards(
                manifest, parsed, trials_per_shard=shard or settings.trials_per_shard
            ),
            lease_s=lease_s,
        )
        grant_injector(session, settings, recorded.assay, parsed)
    return recorded.assay.id


def purge_queue(settings: Settings) -> None:
    """Drop whatever earlier tests left in this session's queue, so its depth is this test's."""
    reconciler = Reconciler(settings, "purge")
    try:
        with reconciler.client.connection_for_write() as connection:
            connection.default_channel.queue_purge(settings.queue)
    finally:
        reconciler.client.close()


def shards_of(engine: sa.Engine, assay_id: uuid.UUID) -> list[AssayShard]:
    with Session(engine) as session:
        return list(
            session.exec(
                select(AssayShard)
                .where(AssayShard.assay_id == assay_id)
                .order_by(col(AssayShard.shard_index))
            ).all()
        )


def assay_row(engine: sa.Engine, assay_id: uuid.UUID) -> Assay:
    with Session(engine) as session:
        row = session.get(Assay, assay_id)
        assert row is not None
        return row


def events(engine: sa.Engine, assay_id: uuid.UUID, kind: str) -> list[Event]:
    with Session(engine) as session:
        return list(
            session.exec(select(Event).where(Event.assay_id == assay_id, Event.kind == kind)).all()
        )


def test_lost_messages_are_sent_again_once_however_many_reconcilers_look(
    settings: Settings, engine: sa.Engine, start_worker: Callable[[str], WorkerProcess]
) -> None:
    plan = {"trials": 400, "seed": 5, "modes": ["subject_swap", "timeout_after_commit"]}
    assay_id = record(engine, settings, plan, lease_s=0.001)
    purge_queue(settings)
    time.sleep(0.01)

    # Three workers' reconcilers find the same lapsed shards at the same moment.
    reconcilers = [Reconciler(settings, f"r{n}") for n in range(3)]
    try:
        with ThreadPoolExecutor(max_workers=3) as pool:
            rounds = list(pool.map(lambda r: r.run_once(), reconcilers))
        depth = reconcilers[0].queue_depth()
        again = reconcilers[0].run_once()
    finally:
        for reconciler in reconcilers:
            reconciler.client.close()

    shards = shards_of(engine, assay_id)
    assert sum(r.resent for r in rounds) == len(shards) == depth
    assert again.resent == 0  # each send extended the lease: nothing lapsed twice
    assert all(s.dispatches == 2 and s.status == ShardStatus.PENDING for s in shards)
    resent = sorted(
        i for e in events(engine, assay_id, "shard.redispatched") for i in e.data["shards"]
    )
    assert resent == [s.shard_index for s in shards]

    start_worker("after-the-loss")
    wait_for(
        lambda: assay_row(engine, assay_id).status == AssayStatus.DONE, 60.0, "the assay decided"
    )
    expected = run_assay(parse_manifest(manifest_document()), parse_plan(plan)).to_dict()
    assert figures(assay_row(engine, assay_id).report) == figures(expected)
    stored = sorted(e.shard_index or 0 for e in events(engine, assay_id, "shard.stored"))
    assert stored == [s.shard_index for s in shards]


def test_an_assay_stored_whole_but_never_merged_is_decided_by_a_reconciler(
    settings: Settings, engine: sa.Engine
) -> None:
    # The worker that stored the last shard died (or lost the database) before its merge.
    plan = {"trials": 40, "seed": 8, "families": ["evidence"]}
    assay_id = record(engine, settings, plan, lease_s=60)
    manifest, parsed = parse_manifest(manifest_document()), parse_plan(plan)
    with session_scope(engine) as session:
        inputs = assay_inputs(session, assay_id)
        assert inputs is not None
        for shard in shards_of(engine, assay_id):
            result = run_shard(manifest, parsed, ShardSpec.from_dict(shard.spec))
            store_shard_result(session, inputs, shard.shard_index, result.to_dict(), result.trials)
    assert assay_row(engine, assay_id).status == AssayStatus.QUEUED
    time.sleep(settings.reconcile_interval_s + 0.1)  # let the last store settle

    reconciler = Reconciler(settings, "leftovers")
    try:
        first, second = reconciler.run_once(), reconciler.run_once()
    finally:
        reconciler.client.close()
    assert (first.decided, second.decided) == (1, 0)
    assert figures(assay_row(engine, assay_id).report) == figures(
        run_assay(manifest, parsed).to_dict()
    )
    with Session(engine) as session:
        dossiers = session.exec(select(func.count()).where(col(Dossier.assay_id) == assay_id)).one()
    assert dossiers == 1


def test_a_stopping_assay_whose_worker_died_is_settled_and_decided_by_a_reconciler(
    settings: Settings, engine: sa.Engine
) -> None:
    # A stop condition tripped, then the worker holding shard 0 died: nobody will store it.
    assay_id = record(
        engine, settings, {"trials": 30, "seed": 2, "families": ["state"]}, lease_s=60
    )
    with session_scope(engine) as session:
        inputs = assay_inputs(session, assay_id)
        assert inputs is not None
        assert begin_shard(session, inputs, 0, "died", lease_s=0.001) is not None
        assert request_stop(
            session, assay_id, "effects above the cap", kind="assay.stopped", data={}
        )
    time.sleep(0.01)
    reconciler = Reconciler(settings, "settler")
    try:
        done = reconciler.run_once()
    finally:
        reconciler.client.close()
    shards = shards_of(engine, assay_id)
    assert done.settled == len(shards) and done.decided == 1
    row = assay_row(engine, assay_id)
    assert row.status == AssayStatus.STOPPED and row.decision == "block"
    assert row.report is not None and row.report["stopped"] == "effects above the cap"
    assert all(s.status == ShardStatus.DONE and s.trials == 0 for s in shards)


def pool_children(worker: WorkerProcess) -> list[int]:
    found = subprocess.run(
        ["pgrep", "-P", str(worker.process.pid)], capture_output=True, text=True
    ).stdout.split()
    return [int(pid) for pid in found]


def test_a_shard_whose_worker_is_killed_every_time_fails_the_assay_after_its_attempts(
    settings: Settings, engine: sa.Engine, tmp_path: Path
) -> None:
    # One long shard (several seconds), so each kill lands inside it.
    plan = parse_plan({"trials": 50_000, "seed": 3, "modes": ["subject_swap"]})
    assay_id = record(engine, settings, plan.model_dump(mode="json"), lease_s=60, shard=50_000)
    dispatcher = Dispatcher(settings)
    try:
        dispatcher.enqueue_shards(assay_id, [0])
    finally:
        dispatcher.close()
    # A prefork worker whose pool child is killed (as the OOM killer would) each time it starts
    # the shard: the worker lives on, forks another child, and its reconciler sends the shard
    # again once its lease lapses, until the attempts run out.
    patient = settings.model_copy(update={"shard_max_attempts": 2})
    worker = WorkerProcess(patient, "oom", tmp_path, pool="prefork")
    killed = 0
    try:
        worker.wait_ready()
        deadline = time.monotonic() + 90.0
        while True:
            # Starts first: a start is always seen, even one the failure follows within a poll.
            if len(events(engine, assay_id, "shard.started")) > killed:
                for child in pool_children(worker):
                    os.kill(child, signal.SIGKILL)
                killed += 1
            if assay_row(engine, assay_id).status == AssayStatus.FAILED:
                break
            assert time.monotonic() < deadline, "the assay never failed"
            time.sleep(0.05)
    finally:
        worker.stop()
    assert killed == 2
    row = assay_row(engine, assay_id)
    assert row.report is not None
    assert "shard 0 (subject_swap) did not finish after 2 attempts" in row.report["error"]
    assert row.decision is None
    (failed,) = events(engine, assay_id, "assay.failed")
    assert failed.data["error"] == row.report["error"]
    assert len(events(engine, assay_id, "shard.started")) == 2
    assert shards_of(engine, assay_id)[0].status != ShardStatus.DONE
    # The operator reads why on the candidate.
    headers = make_key(engine, "acme", ALL_ROLES).headers
    with (
        ApiServer(create_app(settings)) as server,
        httpx.Client(base_url=server.url, timeout=30.0, headers=headers) as client,
    ):
        candidate = client.get(f"/v1/candidates/{row.candidate_id}").json()
    assert candidate["status"] == "failed"
    assert candidate["decision"] is None and candidate["error"] == row.report["error"]
    # A failed assay runs nothing more: a late copy of the message starts nothing.
    starts = len(events(engine, assay_id, "shard.started"))
    assert execute_shard(WorkerContext(settings), assay_id, 0, "late")["stored"] is False
    assert len(events(engine, assay_id, "shard.started")) == starts


def test_an_abort_ends_an_assay_that_no_worker_is_running(
    settings: Settings, engine: sa.Engine
) -> None:
    headers = make_key(engine, "acme", ALL_ROLES).headers
    with (
        ApiServer(create_app(settings)) as server,
        httpx.Client(base_url=server.url, timeout=30.0, headers=headers) as client,
    ):
        body = {**candidate_body("typed", trials=50, seed=4), "system": "abort-idle"}
        submitted = client.post("/v1/candidates", json=body).json()
        aborted = client.post(
            f"/v1/assays/{submitted['assay_id']}/abort", json={"reason": "no workers"}
        )
        assert aborted.status_code == 202
        assert aborted.json()["status"] == "stopped"
        done = wait_decided(client, submitted["id"], timeout=5.0)
        assay = client.get(f"/v1/assays/{submitted['assay_id']}").json()
        dossier = client.get(f"/v1/candidates/{submitted['id']}/dossier")
    purge_queue(settings)
    assert done["status"] == "stopped"
    assert assay["decision"] == "block"
    assert assay["stop_reason"] == "aborted: no workers"
    assert assay["progress"]["shards_done"] == assay["progress"]["shard_count"]
    assert assay["progress"]["trials_done"] == 0
    assert dossier.status_code == 200


def test_a_database_that_does_not_answer_hands_the_shard_back_instead_of_acknowledging_it(
    settings: Settings, engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    assay_id = record(engine, settings, {"trials": 5, "modes": ["subject_swap"]}, lease_s=60)
    cut_off = settings.model_copy(update={"database_url": DEAD_POSTGRES, "store_retry_s": 1.0})
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        execute_shard(WorkerContext(cut_off), assay_id, 0, "cut-off")
    # Retried with back-off (0.25 s, then 0.5 s) until the next wait would pass the budget.
    assert time.monotonic() - started >= 0.7
    retries = [r for r in caplog.records if "database unavailable" in r.getMessage()]
    assert len(retries) == 2
    # Through Celery: the task rejects its message back to the queue, never acks it as done.
    task = make_celery(cut_off).tasks[RUN_SHARD]
    with pytest.raises(Reject) as rejected:
        task(str(assay_id), 0)
    assert rejected.value.requeue is True
    # Nothing was written, and the assay is not failed: the engine did nothing wrong.
    assert assay_row(engine, assay_id).status == AssayStatus.QUEUED
    assert all(s.attempts == 0 for s in shards_of(engine, assay_id))


def test_the_delivery_settings_the_operations_guide_documents(settings: Settings) -> None:
    app = make_celery(settings)
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1
    # A lost broker connection does not throw away the shard in hand...
    assert app.conf.worker_cancel_long_running_tasks_on_connection_loss is False
    # ...nor make the worker give up on the broker.
    assert app.conf.broker_connection_max_retries is None
    assert app.tasks[RUN_SHARD].ignore_result is True
    transport = app.conf.broker_transport_options
    assert transport["visibility_timeout"] == settings.broker_visibility_timeout


def test_lapsed_waivers_are_signed_once_however_many_reconcilers_look(
    settings: Settings, engine: sa.Engine
) -> None:
    assert settings.keys_dir is not None
    signer = KeyRing(settings.keys_dir).load_or_create()
    with session_scope(engine) as session:
        hold = seed_waiver(session, signer, expires_at=datetime.now(UTC) - timedelta(seconds=1))

    reconcilers = [Reconciler(settings, f"lapse{n}") for n in range(3)]
    try:
        with ThreadPoolExecutor(max_workers=3) as pool:
            signed = list(pool.map(lambda r: r.expire_reviews(), reconcilers))
        again = reconcilers[0].expire_reviews()
    finally:
        for reconciler in reconcilers:
            reconciler.client.close()

    with Session(engine) as session:
        versions = session.exec(
            select(Dossier)
            .where(Dossier.candidate_id == hold.candidate_id)
            .order_by(col(Dossier.version))
        ).all()
    assert (sum(signed), again) == (1, 0)
    assert [(d.version, d.decision) for d in versions] == [(1, "hold"), (2, "allow"), (3, "hold")]
    assert versions[-1].change == "waiver expired"
