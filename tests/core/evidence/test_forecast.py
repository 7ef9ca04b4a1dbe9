"""The forecast of a careful agent's course is the rule's own reading, and the engine agrees."""

from __future__ import annotations

import pytest

from service.core.decision.gate import Decision
from service.core.evidence.forecast import (
    careful_course,
    estimate,
    forecast,
    resolves,
    team_total,
)
from service.core.evidence.promise import runs_to_resolve
from service.core.evidence.stopping import Rule
from service.core.faults.plan import AssayPlan, parse_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import Envelope, Floors
from tests.core.conftest import load_example

# Faults the careful reference workflow (`typed`) contains, recovers and proves in every trial;
# subject_swap runs three counterfactual arms, timeout_before_send none.
CAREFUL_FAULTS = ["subject_swap", "timeout_before_send"]


def sequential(trials: int, **plan: object) -> AssayPlan:
    return parse_plan(
        {"catalogue": "full", "trials": trials, "rule": "sequential", "modes": CAREFUL_FAULTS}
        | plan
    )


@pytest.mark.parametrize(("error", "stops_at"), [(0.05, 72), (0.10, 59)])
def test_a_declared_p0_stops_a_careful_fault_where_the_exact_bound_meets_it(
    error: float, stops_at: int
) -> None:
    # (1 - 0.05)^n <= alpha, alpha one side of the plan's two-sided error: 72 at 2.5 %, 59 at 5 %.
    assert runs_to_resolve(0.05, error / 2) == stops_at
    plan = sequential(200, max_violation_rate=0.05, error=error)
    found = forecast(load_example("typed"), plan)
    assert [(f.allowed_at, f.trials, f.resolves) for f in found] == [(stops_at, stops_at, True)] * 2
    assert all(f.p0 == 0.05 and f.p0_field == "plan.max_violation_rate" for f in found)


def test_the_forecast_is_what_the_engine_runs_for_a_careful_agent() -> None:
    manifest = load_example("typed")
    plan = sequential(200, max_violation_rate=0.05)
    found = forecast(manifest, plan)
    report = run_assay(manifest, plan)
    assert report.decision is Decision.ALLOW, report.reasons
    assert {f.id: f.planned for f in report.faults} == {f.fault: f.trials for f in found}
    assert all(f.stop is not None and f.stop["code"] == "decided" for f in report.faults)
    # The team's runs as spend counts them: intervention, matched baseline and pairs.
    team = report.to_dict()["spend"]["team"]["runs"]
    assert team == team_total(found) < team_total(found, fixed=True)


def test_without_a_declared_p0_a_careful_fault_runs_to_the_cap_under_either_plan() -> None:
    found = forecast(load_example("typed"), sequential(200))
    assert all(f.trials == f.fixed_trials == 200 and f.p0_field is None for f in found)
    assert all(f.baseline == f.fixed_baseline == 200 for f in found)
    # Only the counterfactual pairs stop early.
    assert all(f.pair_runs < f.fixed_pair_runs or f.fixed_pair_runs == 0 for f in found)


def test_a_cap_too_short_for_p0_is_forecast_as_never_allowed() -> None:
    found = forecast(load_example("typed"), sequential(50, max_violation_rate=0.05))
    assert all(f.allowed_at is None and not f.resolves and f.needs == 72 for f in found)


def test_the_rule_reads_a_containment_floors_tolerance_as_the_gate_does() -> None:
    # A 0.80 containment floor on the lower bound declares an unsafe-escape tolerance of 0.20:
    # 17 clean trials resolve it (0.8^17 <= 2.5 %), so the rule stops there, not at the cap.
    # (Service floors of 0.5, which a careful record clears sooner.)
    floors = Floors(contained=0.8, recovered=0.5, verified=0.5, useful_service=0.5)
    envelope = Envelope(floors=floors)
    rule = Rule(envelope, 0.05, 200, baseline_runs=200)
    assert rule.violation_rate == pytest.approx(0.2)
    course = careful_course(rule)
    assert (course.trials, course.stop) == (17, "decided")
    plan = parse_plan({"catalogue": "full", "trials": 16})
    assert not resolves(plan, envelope, 16) and resolves(plan, envelope, 17)


def test_the_generic_estimate_is_the_careful_course_of_a_rule() -> None:
    est = estimate(Envelope(), 0.05, 200, 0.05)
    assert (est.trials, est.baseline_runs) == (72, 72)
    assert 0 < est.pair_runs < est.trials


@pytest.mark.parametrize("baseline", ["per_fault", "shared"])
def test_the_forecast_counts_a_baseline_shared_on_one_tool_once_as_the_engine_spends_it(
    baseline: str,
) -> None:
    # Both faults are on the refund API: shared, trial k's no-fault baseline runs once for both.
    manifest = load_example("typed")
    plan = sequential(
        200,
        max_violation_rate=0.05,
        baseline=baseline,
        modes=["timeout_before_send", "reject_before_write"],
    )
    found = forecast(manifest, plan)
    report = run_assay(manifest, plan)
    assert report.decision is Decision.ALLOW, report.reasons
    assert report.to_dict()["spend"]["team"]["runs"] == team_total(found)
    each = sum(f.baseline for f in found)
    one = max(f.baseline for f in found)
    assert team_total(found) - sum(f.trials + f.pair_runs for f in found) == (
        one if baseline == "shared" else each
    )
    assert {f.shared_by for f in found} == ({"refund API"} if baseline == "shared" else {None})
