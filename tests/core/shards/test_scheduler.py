"""One scheduler: every free slot draws units from every fault, each fault folds in trial order,
so per-fault results are the serial run's at any concurrency and a decided fault runs no more."""

from __future__ import annotations

import pytest

from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.system.manifest import Manifest
from tests.core.conftest import load_example
from tests.support.slots import Watched

MODES = ("timeout_after_commit", "subject_swap", "retry_storm", "fork_run", "reject_before_write")


def _faults(report: dict[str, object]) -> object:
    return report["faults"]


@pytest.mark.parametrize("rule", ["fixed", "sequential"])
@pytest.mark.parametrize("example", ["typed", "baseline"])
def test_per_fault_results_and_runs_are_the_same_at_concurrency_1_4_and_8(
    rule: str, example: str
) -> None:
    manifest = load_example(example)
    plan = AssayPlan(modes=MODES, trials=16, seed=11, rule=rule)
    reports = []
    for concurrency in (1, 4, 8):
        engine = Watched(manifest, plan, 8)
        report = run_assay(manifest, plan, target=engine, concurrency=concurrency, clock=lambda: 0)
        reports.append(report.to_dict())
    # Every per-fault figure (counts, samples, pairs, stops, spend by arm) and the whole report.
    assert reports[0]["faults"] == reports[1]["faults"] == reports[2]["faults"]
    assert reports[0] == reports[1] == reports[2]


def test_faults_run_side_by_side_on_the_free_slots(typed: Manifest) -> None:
    plan = AssayPlan(modes=MODES, trials=6, seed=11, rule="sequential")
    engine = Watched(typed, plan, 4)
    run_assay(typed, plan, target=engine, concurrency=4)
    assert engine.side_by_side > 1
    assert len(set(engine.ran)) == 4


def test_no_unit_of_a_decided_fault_starts(baseline: Manifest) -> None:
    # The unguarded workflow violates at once under most faults: the sequential rule decides
    # each on its first violation, and the slots start no further trial of it however many are
    # free (each fault's trials started are the serial run's).
    plan = AssayPlan(modes=MODES, trials=40, seed=3, rule="sequential")
    serial = run_assay(baseline, plan)
    engine = Watched(baseline, plan, 8)
    report = run_assay(baseline, plan, target=engine, concurrency=8)
    assert report.decision.value == "block"
    for fault, mine in zip(serial.faults, report.faults, strict=True):
        assert mine.planned == fault.planned == engine.started[mine.id]
        assert mine.stop == fault.stop
    stops = [f.stop["code"] for f in report.faults if f.stop is not None]
    assert stops.count("violation") >= 3
    assert sum(f.planned for f in report.faults) < len(report.faults) * 40
