"""Budgets admit a trial before it spends: the spend ends at most the trials in flight past a
budget, and the stop states the spend exactly as the report's `spend` does."""

from __future__ import annotations

import pytest

from service.core.evidence.spend import Meter, usage_invalid
from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan, StopConditions
from service.core.shards.assay import run_assay
from service.core.system.manifest import Manifest
from service.core.trial.record import TrialRecord
from tests.support.slots import ReferenceSlots, RunTrial

PLAN = AssayPlan(modes=("timeout_after_commit", "subject_swap"), trials=30, seed=7)


def _most_runs_a_trial(manifest: Manifest, plan: AssayPlan) -> int:
    """The most agent runs any one trial of the plan costs (intervention, baseline, pairs)."""
    report = run_assay(manifest, plan.model_copy(update={"trials": 1}), clock=lambda: 0.0)
    assert report.spend is not None
    faults = [f.spend for f in report.faults if f.spend is not None]
    return max(sum(int(arm["runs"]) for arm in spend.values()) for spend in faults)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_run_budget_stops_within_the_trials_in_flight_and_states_the_reports_spend(
    typed: Manifest, concurrency: int
) -> None:
    plan = PLAN.model_copy(update={"stop": StopConditions(max_runs=20)})
    engine = ReferenceSlots(typed, plan.resolve_catalogue(), 4)
    report = run_assay(typed, plan, target=engine, concurrency=concurrency)
    assert report.spend is not None
    spent = int(report.spend["total"]["runs"])
    most = _most_runs_a_trial(typed, PLAN)
    # Admitted before it spends: past the budget by at most one trial per slot.
    assert spent <= 20 + concurrency * most
    assert report.decision.value == "hold"
    assert report.stopped is not None and report.stopped.startswith("budget: agent runs ")
    assert f"agent runs {spent} " in report.stopped


def test_at_concurrency_one_a_budget_of_whole_trials_is_never_overshot(typed: Manifest) -> None:
    # The reference target's subject swap costs the same runs every trial: an estimate from the
    # finished trials is exact, so the trial that would cross the budget never starts.
    plan = AssayPlan(modes=("subject_swap",), trials=30, seed=7, evidence_sample=None)
    each = _most_runs_a_trial(typed, plan)
    budget = 5 * each + 1
    report = run_assay(typed, plan.model_copy(update={"stop": StopConditions(max_runs=budget)}))
    assert report.spend is not None
    assert report.spend["total"]["runs"] == 5 * each
    assert report.stopped == (
        f"budget: agent runs {5 * each} spent of the budget of {budget}; too little left for "
        f"another trial (about {each} each)"
    )


class InvalidUsage(ReferenceSlots):
    """The reference world whose agent reports a negative cost in every run."""

    def __init__(self, manifest: Manifest, plan: AssayPlan) -> None:
        super().__init__(manifest, plan.resolve_catalogue(), 2)
        self.around(self._bad)

    @staticmethod
    def _bad(
        inner: RunTrial,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord:
        rec = inner(spec, workload_key, storm_key, disabled, capture)
        rec.usage_invalid = True
        return rec


@pytest.mark.parametrize("concurrency", [1, 2])
def test_malformed_usage_under_a_cost_budget_holds_with_the_reason_usage_invalid(
    typed: Manifest, concurrency: int
) -> None:
    plan = PLAN.model_copy(update={"stop": StopConditions(max_cost=1.0)})
    report = run_assay(typed, plan, target=InvalidUsage(typed, plan), concurrency=concurrency)
    assert report.decision.value == "hold"
    assert [r.code for r in report.reasons if r.code == "usage_invalid"] == ["usage_invalid"]
    assert report.stopped is not None and report.stopped.startswith("usage_invalid: ")


def test_malformed_usage_without_a_token_or_cost_budget_stops_nothing(typed: Manifest) -> None:
    plan = PLAN.model_copy(update={"stop": StopConditions(max_runs=10_000)})
    report = run_assay(typed, plan, target=InvalidUsage(typed, plan), concurrency=2)
    assert report.stopped is None


@pytest.mark.parametrize(
    "usage",
    [
        {"cost": -0.01},
        {"tokens": -5},
        {"tokens": "12"},
        {"cost": "0.1"},
        {"tokens": 1.5},
        {"tokens": True},
        {"cost": float("nan")},
        {"cost": float("inf")},
        "lots",
        12,
    ],
)
def test_usage_that_is_not_a_count_is_invalid(usage: object) -> None:
    assert usage_invalid([{"status": "completed", "usage": usage}])


@pytest.mark.parametrize(
    "usage", [None, {}, {"tokens": 0}, {"tokens": 12, "cost": 0.25}, {"cost": 0}]
)
def test_counts_and_no_usage_are_valid(usage: object) -> None:
    claim: dict[str, object] = {"status": "completed"}
    if usage is not None:
        claim["usage"] = usage
    assert not usage_invalid([claim])


def test_the_meters_running_total_is_what_its_arms_sum_to() -> None:
    meter, part = Meter(), Meter()
    meter.add("f", "intervention", 1, (10, 0.5))
    part.add("g", "baseline", 2, (3, 0.25))
    meter.absorb(part)
    total = meter.total()
    assert (total.runs, total.tokens, total.cost) == (3, 13, 0.75)
    assert meter.view("fixed")["total"] == {"runs": 3, "seconds": 0.0, "tokens": 13, "cost": 0.75}


def test_a_run_budget_counts_the_teams_agent_never_the_gates_naive_agent() -> None:
    # Four trials of intervention, naive run and baseline: 12 runs, of which the team's are 8.
    stop = StopConditions(max_runs=8)
    meter = Meter()
    for _ in range(4):
        meter.add("f", "intervention", 1, (100, 0.01))
        meter.add("f", "sensitivity", 1, (0, 0.0))
        meter.add("f", "baseline", 1, (90, 0.01))
        meter.trials += 1
    assert (meter.total().runs, meter.team().runs) == (12, 8)
    assert meter.exceeded(stop) is None
    assert meter.refuses(stop) == (
        "budget: agent runs 8 spent of the budget of 8; too little left for another trial "
        "(about 2 each)"
    )
    view = meter.view("fixed")
    assert view["team"] == {"runs": 8, "seconds": 0.0, "tokens": 760, "cost": 0.08}
    assert view["gate"] == {"runs": 4}
