"""A worker holding several shards of one assay: on an engine with slots to spare, one message
begins the assay's free shards too, runs them side by side under leases it keeps renewing, and
stores each; the other messages find them held or stored; shards held by a worker that died are
sent again once their leases lapse. Real PostgreSQL and Redis, the task body called directly."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.app import shards
from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan, parse_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import Manifest, parse_manifest
from service.core.trial.record import TrialRecord
from service.db.assay import assay_inputs, begin_shard
from service.db.models import Assay, AssayShard, AssayStatus, Event, ShardStatus
from service.db.session import session_scope
from service.settings import Settings
from tests.support.reports import figures
from tests.support.service import example
from tests.support.slots import RunTrial, Watched
from tests.support.worker import record_assay
from tests.worker.test_reconciler import purge_queue
from worker import held
from worker.context import WorkerContext
from worker.reconciler import Reconciler
from worker.tasks import execute_shard

pytestmark = pytest.mark.integration

MODES = ["subject_swap", "timeout_after_commit", "retry_storm", "fork_run"]
SLOTS = 4
#: The held shards' lease: renewed every third of it, so a renewal must slip by two thirds (1.3 s)
#: before a lease lapses. A 0.3 s lease lapsed on a busy CI box (a renewal 0.2 s late).
LEASE_S = 2.0
#: When the first trials stop stalling and one looks: the shards begun with them are then held a
#: lease and a half, which only a renewed lease survives.
LATE_S = 1.5 * LEASE_S


class Observed(Watched):
    """The reference world on `SLOTS` slots whose trials each take a little while, noting (from
    a trial, once the first trials have stalled until `LATE_S`) which shards the worker holds and
    whether another worker could take any of them."""

    def __init__(self, engine: sa.Engine, manifest: Manifest, plan: AssayPlan, assay_id: uuid.UUID):
        super().__init__(manifest, plan, SLOTS)
        self.db, self.assay_id = engine, assay_id
        self.began = time.monotonic()
        self.looked = threading.Event()
        self.holding: list[int] = []
        self.taken_late: list[int | None] = []
        self.looking = threading.Lock()
        self.looks = 0
        # Trials in flight now, and the most at once (one shard of three trials offers three).
        self.busy = self.most = 0
        # The first SLOTS trials wait for each other: the worker offering SLOTS at once is shown by
        # them meeting (an event), not by hoping the scheduler overlaps them on a busy machine. A
        # worker that never offers SLOTS at once breaks the barrier after its guard and fails.
        self.met = threading.Event()
        self.together = threading.Barrier(SLOTS, action=self.met.set, timeout=60)
        self.around(self._slow)

    def _slow(
        self,
        inner: RunTrial,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord:
        with self.lock:
            self.busy += 1
            self.most = max(self.most, self.busy)
        if not self.met.is_set():
            with contextlib.suppress(threading.BrokenBarrierError):
                self.together.wait()
        time.sleep(0.01)
        if not self.looked.is_set():
            # The slots stall here, their shards held, until the first leases would have lapsed.
            time.sleep(max(0.0, self.began + LATE_S - time.monotonic()))
        if not self.looked.is_set() and self.looking.acquire(blocking=False):
            # Until it has seen several held at once: a held shard that just finished
            # may be stored a moment before the worker holds the next in its place.
            try:
                if self.looks < 10 and len(self.holding) < 2:
                    self.looks += 1
                    self.look()
                if self.looks == 10 or len(self.holding) >= 2:
                    self.looked.set()
            finally:
                self.looking.release()
        try:
            return inner(spec, workload_key, storm_key, disabled, capture)
        finally:
            with self.lock:
                self.busy -= 1

    def look(self) -> None:
        with Session(self.db) as session:
            self.holding = list(
                session.exec(
                    select(AssayShard.shard_index).where(
                        AssayShard.assay_id == self.assay_id,
                        AssayShard.status == ShardStatus.RUNNING.value,
                        AssayShard.worker == "w1",
                    )
                ).all()
            )
        # A lease and a half later, another worker still finds each held shard taken.
        with session_scope(self.db) as session:
            inputs = assay_inputs(session, self.assay_id)
            assert inputs is not None
            taken = [begin_shard(session, inputs, i, "w2", lease_s=60) for i in self.holding]
            self.taken_late = [
                None if start is None else i for i, start in zip(self.holding, taken, strict=True)
            ]


def shard_rows(engine: sa.Engine, assay_id: uuid.UUID) -> list[AssayShard]:
    with Session(engine) as session:
        return list(
            session.exec(
                select(AssayShard)
                .where(AssayShard.assay_id == assay_id)
                .order_by(col(AssayShard.shard_index))
            ).all()
        )


def report_of(engine: sa.Engine, assay_id: uuid.UUID) -> dict[str, Any]:
    with Session(engine) as session:
        row = session.get(Assay, assay_id)
        assert row is not None and row.status == AssayStatus.DONE and row.report is not None
        return dict(row.report)


def slotted(settings: Settings, engine: Any, **update: Any) -> WorkerContext:
    ctx = WorkerContext(settings.model_copy(update={"worker_slots": SLOTS, **update}))
    # The reference world with slots as the assay's engine (an mcp world with `tools.slots`).
    ctx.target = lambda assay_id, manifest, inputs: engine  # type: ignore[method-assign]
    return ctx


@pytest.mark.parametrize("rule", ["sequential", "fixed"])
def test_one_worker_holds_an_assays_shards_at_once_and_its_figures_are_the_local_runs(
    settings: Settings, engine: sa.Engine, rule: str
) -> None:
    # A sequential fault is one shard that runs one trial at a time: alone it would leave three
    # of the four slots idle. Fixed shards of three trials each fill three.
    plan = {"trials": 24, "seed": 9, "modes": MODES, "rule": rule}
    assay_id = record_assay(engine, settings, plan, version=f"held-{rule}", trials_per_shard=3)
    manifest, parsed = parse_manifest(example("typed")), parse_plan(plan)
    world = Observed(engine, manifest, parsed, assay_id)
    ctx = slotted(settings, world, shard_lease_s=LEASE_S)
    shards = shard_rows(engine, assay_id)
    started = time.monotonic()
    # Every shard's message, in order, as a worker takes them from its queue.
    outcomes = [execute_shard(ctx, assay_id, s.shard_index, "w1") for s in shards]
    took = time.monotonic() - started

    final = shard_rows(engine, assay_id)
    assert all(s.status == ShardStatus.DONE and s.worker == "w1" for s in final)
    # Several shards ran at once in the one worker, and their leases were all kept alive.
    assert len(world.holding) > 1, (world.holding, took)
    assert world.most == SLOTS
    if rule == "sequential":
        assert world.side_by_side > 1  # faults side by side, each one trial at a time
    assert world.taken_late == [None] * len(world.holding)
    # A held shard's own message found it stored and was acknowledged without running it.
    not_run = [o for o in outcomes if not o["stored"]]
    assert not_run, "no shard was held with another"
    assert all(s.attempts == 1 for s in final)
    expected = run_assay(manifest, parsed).to_dict()
    assert figures(report_of(engine, assay_id)) == figures(expected)
    purge_queue(settings)  # the messages sent again, for no worker of this test
    with Session(engine) as session:
        stored = session.exec(
            select(Event.shard_index).where(
                Event.assay_id == assay_id, Event.kind == "shard.stored"
            )
        ).all()
    assert sorted(i or 0 for i in stored) == [s.shard_index for s in final]


def test_shards_a_dead_worker_held_are_sent_again_and_completed_once_their_leases_lapse(
    settings: Settings, engine: sa.Engine
) -> None:
    plan = {"trials": 6, "seed": 9, "modes": MODES, "rule": "sequential"}
    assay_id = record_assay(engine, settings, plan, version="held-dead", trials_per_shard=6)
    manifest, parsed = parse_manifest(example("typed")), parse_plan(plan)
    purge_queue(settings)
    doomed = slotted(settings, Watched(manifest, parsed, SLOTS), shard_lease_s=0.2)
    assay = doomed.assay(assay_id)
    assert assay is not None
    lead = shards.begin(engine, assay.inputs, 0, "doomed", lease_s=0.2)
    assert lead.start is not None and lead.state is not None
    more = held.hold_more(doomed, assay, (0, lead.start, lead.state), "doomed")
    assert [m[0] for m in more] == [1, 2, 3]
    # The worker dies here: it holds four shards and runs none. Their leases lapse.
    time.sleep(0.3)
    reconciler = Reconciler(settings, "held-dead")
    try:
        resent = reconciler.run_once().resent
    finally:
        reconciler.client.close()
    rows = shard_rows(engine, assay_id)
    assert resent >= len(rows) == 4
    assert all(s.status == ShardStatus.PENDING and s.dispatches == 2 for s in rows)
    # The messages sent again, taken by a worker that lives: every shard runs and is stored.
    rescuer = slotted(settings, Watched(manifest, parsed, SLOTS))
    for s in rows:
        execute_shard(rescuer, assay_id, s.shard_index, "rescuer")
    final = shard_rows(engine, assay_id)
    assert all(s.status == ShardStatus.DONE and s.attempts == 2 for s in final)
    expected = run_assay(manifest, parsed).to_dict()
    assert figures(report_of(engine, assay_id)) == figures(expected)
    purge_queue(settings)  # the messages sent again, for no worker of this test


def test_a_worker_holds_one_more_shard_as_each_held_one_finishes_and_runs_the_assay_in_one_message(
    settings: Settings, engine: sa.Engine
) -> None:
    # Two slots: the worker begins two of the four sequential faults' shards (at most as many
    # shards as slots), and as each finishes it holds one more of the assay's free shards in
    # its place. Without that, this message would have stored two.
    plan = {"trials": 6, "seed": 9, "modes": MODES, "rule": "sequential"}
    assay_id = record_assay(engine, settings, plan, version="held-more", trials_per_shard=6)
    manifest, parsed = parse_manifest(example("typed")), parse_plan(plan)
    purge_queue(settings)
    world = Watched(manifest, parsed, SLOTS)
    ctx = slotted(settings, world, worker_slots=2)
    first = execute_shard(ctx, assay_id, 0, "w1")
    final = shard_rows(engine, assay_id)
    # The one message ran every shard: the two it began with, and two it took up after.
    assert all(s.status == ShardStatus.DONE and s.worker == "w1" for s in final)
    assert first["decision"] is not None
    later = [execute_shard(ctx, assay_id, s.shard_index, "w1") for s in final[1:]]
    assert not any(o["stored"] for o in later)
    expected = run_assay(manifest, parsed).to_dict()
    assert figures(report_of(engine, assay_id)) == figures(expected)
    purge_queue(settings)
