"""Every stop falls at the serial run's trial at any concurrency: target errors, effects, unsafe
escapes, a budget and an abort are read in the trial order (each fault's trials, the faults in
turn), never in the order slots finish, so per-fault results are the same at 1, 4 and 8 slots;
the trials that ran past the stop are discarded, their runs reported as `past_stop`."""

from __future__ import annotations

from typing import Any

import pytest

from service.core.evidence.stopping import watch_for
from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan, StopConditions
from service.core.shards.assay import StopLimits, plan_shards, run_assay, run_shard
from service.core.system.manifest import Manifest
from service.core.trial.record import TrialRecord
from tests.core.conftest import load_example
from tests.support.slots import ReferenceSlots, RunTrial

MODES = ("timeout_after_commit", "subject_swap", "retry_storm", "fork_run")
SLOTS = 8


class Crashing(ReferenceSlots):
    """The reference world whose agent crashes, deterministically, in two of every three runs
    (by the run's workload: the same runs crash at any concurrency)."""

    def __init__(self, manifest: Manifest, plan: AssayPlan) -> None:
        super().__init__(manifest, plan.resolve_catalogue(), SLOTS)
        self.around(self._crash)

    @staticmethod
    def _crash(
        inner: RunTrial,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord:
        rec = inner(spec, workload_key, storm_key, disabled, capture)
        if workload_key % 3:
            rec.target_error = "TargetFailed: the agent crashed"
        return rec


def _reports(
    manifest: Manifest,
    plan: AssayPlan,
    limits: StopLimits | None = None,
    engine: type[ReferenceSlots] | None = None,
) -> list[dict[str, Any]]:
    reports = []
    for concurrency in (1, 4, SLOTS):
        target = (
            Crashing(manifest, plan)
            if engine is Crashing
            else ReferenceSlots(manifest, plan.resolve_catalogue(), SLOTS)
        )
        report = run_assay(
            manifest, plan, target=target, limits=limits, concurrency=concurrency, clock=lambda: 0
        )
        reports.append(report.to_dict())
    return reports


def _same(reports: list[dict[str, Any]]) -> None:
    """The reports agree at every concurrency but for what ran past the stop (paid, not
    evidence): every fault's counts, samples, stop and spend, the decision and the stop."""
    assert reports[0]["stopped"] is not None
    assert "past_stop" not in reports[0].get("spend", {})
    for report in reports:
        report.get("spend", {}).pop("past_stop", None)
    assert reports[0]["faults"] == reports[1]["faults"] == reports[2]["faults"]
    assert reports[0] == reports[1] == reports[2]


@pytest.mark.parametrize("rule", ["fixed", "sequential"])
def test_a_target_error_stop_falls_at_the_serial_trial_at_1_4_and_8_slots(rule: str) -> None:
    typed = load_example("typed")
    plan = AssayPlan(modes=MODES, trials=8, seed=5, rule=rule)
    # Two runs in three crash: the limit is crossed within the second fault.
    reports = _reports(typed, plan, StopLimits(max_target_errors=12), Crashing)
    assert reports[0]["stopped"].startswith("target errors above the limit (14 > 12)")
    planned = [f["planned"] for f in reports[0]["faults"]]
    assert planned[0] == 8 and 0 < planned[1] < 8 and planned[2:] == [0, 0]
    _same(reports)


def test_an_effects_stop_falls_at_the_serial_trial_at_1_4_and_8_slots() -> None:
    typed = load_example("typed")
    plan = AssayPlan(modes=MODES, trials=10, seed=5)
    reports = _reports(typed, plan, StopLimits(max_effects=30))
    assert reports[0]["stopped"].startswith("effects above the cap")
    _same(reports)


def test_an_unsafe_escape_stop_falls_at_the_serial_trial_at_1_4_and_8_slots() -> None:
    # The unguarded workflow escapes under most faults.
    baseline = load_example("baseline")
    plan = AssayPlan(modes=MODES, trials=10, seed=5)
    reports = _reports(baseline, plan, StopLimits(max_unsafe=6))
    assert reports[0]["stopped"].startswith("unsafe escapes above the limit")
    _same(reports)


@pytest.mark.parametrize("rule", ["fixed", "sequential"])
def test_a_budget_stop_falls_at_the_serial_trial_at_1_4_and_8_slots(rule: str) -> None:
    typed = load_example("typed")
    plan = AssayPlan(modes=MODES, trials=10, seed=5, rule=rule, stop=StopConditions(max_runs=70))
    reports = _reports(typed, plan)
    assert reports[0]["stopped"].startswith("budget: agent runs ")
    assert reports[0]["decision"] == "hold"
    # The budget counts the trials that count, as the serial run does; past it ran at most the
    # trials in flight (a trial is at most five runs here).
    for report in reports:
        assert report["spend"]["team"]["runs"] <= 70
        assert report["spend"].get("past_stop", {}).get("team_runs", 0) <= SLOTS * 5
    _same(reports)


def test_an_abort_falls_at_the_serial_trial_at_1_4_and_8_slots() -> None:
    # A worker's shard reads its abort every `batch` trials: the third reading says stop.
    typed = load_example("typed")
    plan = AssayPlan(modes=MODES[:1], trials=30, seed=5, rule="fixed")
    shard = plan_shards(typed, plan)[0]
    results = []
    for concurrency in (1, 4, SLOTS):
        asked = [0]

        def should_stop(asked: list[int] = asked) -> bool:
            asked[0] += 1
            return asked[0] >= 3

        engine = ReferenceSlots(typed, plan.resolve_catalogue(), SLOTS)
        result = run_shard(
            typed, plan, shard, should_stop, engine, batch=5, concurrency=concurrency
        )
        results.append(result.to_dict())
        assert asked[0] == 3
    assert results[0]["stop_reason"] == "aborted" and results[0]["trials"] == 10
    assert results[0] == results[1] == results[2]


def test_a_sequential_shards_abort_falls_at_the_serial_trial_at_1_4_and_8_slots() -> None:
    baseline = load_example("typed")
    plan = AssayPlan(modes=MODES[1:2], trials=30, seed=5, rule="sequential")
    shard = plan_shards(baseline, plan)[0]
    results = []
    for concurrency in (1, 4, SLOTS):
        asked = [0]

        def should_stop(asked: list[int] = asked) -> bool:
            asked[0] += 1
            return asked[0] >= 2

        engine = ReferenceSlots(baseline, plan.resolve_catalogue(), SLOTS)
        watch = watch_for(baseline, plan, shard.fault_id)
        result = run_shard(
            baseline,
            plan,
            shard,
            should_stop,
            engine,
            batch=4,
            concurrency=concurrency,
            watch=watch,
        )
        assert watch is not None and watch.stop is None
        results.append(result.to_dict())
    assert results[0]["stop_reason"] == "aborted" and results[0]["trials"] == 4
    assert results[0] == results[1] == results[2]
