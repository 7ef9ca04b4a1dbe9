"""Slots: trials run at once on isolated worlds fold into exactly the serial run's tallies."""

from __future__ import annotations

import threading

import pytest

from service.core.evidence.stopping import Watch, rule_for
from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import StopLimits, merge, plan_shards, run_assay, run_shard
from service.core.shards.slots import InOrder, slots_of
from service.core.system.manifest import Manifest
from service.core.trial.engine import SlottedEngine, TrialEngine
from service.core.trial.record import TrialRecord
from tests.core.conftest import load_example
from tests.support.slots import ReferenceSlots, RunTrial

PLAN = AssayPlan(
    modes=("timeout_after_commit", "subject_swap", "retry_storm", "fork_run"), trials=12, seed=7
)


def test_the_slotted_engine_is_what_run_shard_checks_for(typed: Manifest) -> None:
    engine = ReferenceSlots(typed, PLAN.resolve_catalogue(), 3)
    assert isinstance(engine, SlottedEngine)
    assert isinstance(engine.slot(0), TrialEngine)


@pytest.mark.parametrize("concurrency", [2, 4])
def test_an_assay_at_any_concurrency_has_the_serial_assays_report(
    typed: Manifest, concurrency: int
) -> None:
    serial = run_assay(typed, PLAN).to_dict()
    engine = ReferenceSlots(typed, PLAN.resolve_catalogue(), 4)
    slotted = run_assay(typed, PLAN, target=engine, concurrency=concurrency).to_dict()
    assert slotted == serial
    # The trials really ran on several slots at once.
    assert len(set(engine.ran)) == concurrency


def test_a_paper_mode_assay_on_slots_has_the_serial_assays_report(typed: Manifest) -> None:
    # Paper mode's shards mix faults trial by trial: each is one work of the scheduler.
    plan = AssayPlan(catalogue="paper", trials=120, seed=9)
    serial = run_assay(typed, plan, trials_per_shard=50).to_dict()
    engine = ReferenceSlots(typed, plan.resolve_catalogue(), 4)
    slotted = run_assay(typed, plan, target=engine, concurrency=4, trials_per_shard=50)
    assert slotted.to_dict() == serial
    assert len(set(engine.ran)) == 4


def test_a_stop_condition_trips_at_the_same_trial_at_any_concurrency(typed: Manifest) -> None:
    plan = AssayPlan(modes=("timeout_after_commit",), trials=60, seed=1)
    shard = plan_shards(typed, plan)[0]
    serial = run_shard(typed, plan, shard, limits=StopLimits(max_effects=5))
    engine = ReferenceSlots(typed, plan.resolve_catalogue(), 4)
    slotted = run_shard(
        typed, plan, shard, target=engine, limits=StopLimits(max_effects=5), concurrency=4
    )
    assert slotted.stop_reason == serial.stop_reason
    assert slotted.stop_reason is not None
    assert slotted.trials == serial.trials < 60
    assert (slotted.effects, slotted.unsafe) == (serial.effects, serial.unsafe)
    assert merge(typed, plan, [slotted]).to_dict() == merge(typed, plan, [serial]).to_dict()


def test_an_abort_requested_before_the_shard_runs_no_trial_on_any_slot(typed: Manifest) -> None:
    engine = ReferenceSlots(typed, PLAN.resolve_catalogue(), 4)
    shard = plan_shards(typed, PLAN)[0]
    result = run_shard(typed, PLAN, shard, target=engine, should_stop=lambda: True, concurrency=4)
    assert (result.trials, result.stop_reason) == (0, "aborted")
    assert engine.ran == []


def test_a_slot_whose_trial_raises_fails_the_shard_like_the_serial_loop(typed: Manifest) -> None:
    engine = ReferenceSlots(typed, PLAN.resolve_catalogue(), 3)
    broken = engine.slot(1)
    lock = threading.Lock()

    def explode(*args: object) -> TrialRecord:
        with lock:
            raise RuntimeError("the slot's world is gone")

    broken.run_trial = explode  # type: ignore[method-assign]
    shard = plan_shards(typed, PLAN)[0]
    with pytest.raises(RuntimeError, match="world is gone"):
        run_shard(typed, PLAN, shard, target=engine, concurrency=3)


def test_in_order_releases_results_only_without_a_gap() -> None:
    order: InOrder[str] = InOrder(start=10)
    order.put(12, "c")
    order.put(11, "b")
    assert order.ready() == []
    assert order.pending() == 2
    order.put(10, "a")
    assert order.ready() == [(10, "a"), (11, "b"), (12, "c")]
    with pytest.raises(ValueError):
        order.put(11, "again")


def test_slots_are_what_was_asked_but_never_more_than_the_world_offers() -> None:
    assert slots_of(None, 8) == 1
    assert slots_of(1, 8) == 1
    assert slots_of(4, 8) == 4
    assert slots_of(8, 3) == 3
    assert slots_of(8, 0) == 1


def test_a_workers_shard_of_a_sequential_fault_stops_where_the_serial_run_does() -> None:
    # The unguarded baseline workflow violates on almost every trial. A worker's shard of a
    # sequential fault runs through the one scheduler, one trial at a time whatever the slots:
    # what its next trial runs is read from every trial before it, so its first violation stops
    # the fault at the serial run's trial and no trial past the stop ever starts.
    manifest = load_example("baseline")
    plan = AssayPlan(modes=("timeout_after_commit",), trials=40, seed=3, rule="sequential")
    engine = ReferenceSlots(manifest, plan.resolve_catalogue(), 4)
    started: list[int] = []
    lock = threading.Lock()

    def counted(
        inner: RunTrial,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord:
        if spec is not None and not disabled:
            with lock:
                started.append(workload_key)
        return inner(spec, workload_key, storm_key, disabled, capture)

    engine.around(counted)
    spec = plan.faults()[0]
    watch = Watch(rule_for(manifest, plan, spec))
    shard = plan_shards(manifest, plan)[0]
    result = run_shard(manifest, plan, shard, target=engine, concurrency=4, watch=watch)
    tally = result.tallies[spec.id]
    assert watch.stop is not None and watch.stop.code == "violation"
    serial_watch = Watch(rule_for(manifest, plan, spec))
    serial = run_shard(manifest, plan, shard, watch=serial_watch)
    assert tally.planned == len(started) == serial.tallies[spec.id].planned == 1
    assert serial_watch.stop is not None and watch.stop.view() == serial_watch.stop.view()
    assert merge(manifest, plan, [result]).to_dict() == merge(manifest, plan, [serial]).to_dict()
