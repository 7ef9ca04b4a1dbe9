"""Sequential plans: anytime-valid bounds, a rule that stops a fault once its decision cannot
change, the same decisions as the fixed plan on the examples, and paper mode kept fixed."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from service.core.errors import PlanInvalid
from service.core.evidence.forecast import estimate
from service.core.evidence.sequential import (
    clean_runs_for,
    confidence_sequence,
    runs_to_bound,
    violation_bound,
    zero_event_bound,
)
from service.core.evidence.signature import trials_for_bound, wilson
from service.core.faults.plan import AssayPlan, parse_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import Envelope, parse_manifest_json
from tests.core.conftest import load_example

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ("baseline", "typed", "typed-repair", "refuse-all")


def test_the_confidence_sequence_holds_its_error_over_every_prefix_of_a_run() -> None:
    # 400 seeded sequences of 200 Bernoulli(0.3) draws: the share in which the sequence ever
    # excludes the true rate stays below the stated 10 % (Wilson, read at every step, does not).
    rng = random.Random(7)
    p, error, misses, wilson_misses = 0.3, 0.10, 0, 0
    for _ in range(400):
        k = 0
        missed = wilson_missed = False
        for n in range(1, 201):
            k += rng.random() < p
            low, high = confidence_sequence(k, n, error)
            missed |= not low <= p <= high
            wl, wh = wilson(k, n)
            wilson_missed |= not wl <= p <= wh
        misses += missed
        wilson_misses += wilson_missed
    assert misses / 400 <= error
    assert wilson_misses > misses, "a fixed-n interval read after every run loses its level"


def test_the_confidence_sequence_is_wider_than_a_fixed_interval_and_contains_the_estimate() -> None:
    for k, n in ((0, 10), (3, 10), (10, 10), (40, 100)):
        low, high = confidence_sequence(k, n, 0.05)
        assert low <= k / n <= high
        wl, wh = wilson(k, n)
        assert low <= wl + 1e-9 and high >= wh - 1e-9


def test_no_runs_bound_nothing() -> None:
    assert confidence_sequence(0, 0, 0.05) == (0.0, 1.0)
    assert zero_event_bound(0, 0.05) == 1.0


def test_the_betting_test_bounds_a_clean_rate_with_fewer_runs_than_wilson() -> None:
    n = runs_to_bound(0.05, 0.05)
    assert zero_event_bound(n, 0.05) <= 0.05 < zero_event_bound(n - 1, 0.05)
    assert n == math.ceil(math.log(0.05) / math.log(0.95))
    assert n < trials_for_bound(0.05)


@pytest.mark.parametrize("n", [1, 5, 24, 94, 95, 149, 199, 200, 1000])
def test_the_violation_bound_is_the_exact_bound_at_one_side_of_the_error(n: int) -> None:
    # Clopper-Pearson for zero events: an agent violating at exactly the bound leaves n runs
    # clean with probability 2.5 %, the stated level, at every n (Wilson's was looser at small n).
    bound = violation_bound(n, 0.05)
    assert bound == pytest.approx(zero_event_bound(n, 0.025))
    assert (1 - bound) ** n == pytest.approx(0.025)


@pytest.mark.parametrize(
    ("rate", "error"), [(0.0188, 0.05), (0.01, 0.05), (0.2, 0.05), (0.02, 0.1)]
)
def test_clean_runs_for_a_rate_is_the_first_count_whose_bound_reaches_it(
    rate: float, error: float
) -> None:
    n = clean_runs_for(rate, error)
    assert violation_bound(n, error) <= rate < violation_bound(n - 1, error)


def test_the_docs_clean_run_figures_for_a_one_percent_rate() -> None:
    # docs/mcp.md and docs/operations.md quote these: a 0.99 containment floor is a 1 % rate of
    # uncontained runs. The exact bound one-sided at 5 % needs 299 clean runs; at the plan's
    # level (2.5 % a side) 368, what every plan now reads; Wilson's 95 % bound read 381; the
    # mixture sequence 680.
    assert runs_to_bound(0.01, 0.05) == 299
    assert runs_to_bound(0.01, 0.025) == 368
    assert trials_for_bound(0.01) == 381
    assert clean_runs_for(0.01, 0.05) == 368
    assert next(n for n in range(1, 2000) if confidence_sequence(n, n, 0.05)[0] >= 0.99) == 680


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_sequential_plan_decides_the_examples_as_the_fixed_plan_does(name: str) -> None:
    manifest = load_example(name)
    fixed = run_assay(manifest, parse_plan({"trials": 40, "rule": "fixed"}))
    sequential = run_assay(manifest, parse_plan({"trials": 40, "rule": "sequential"}))
    assert sequential.decision == fixed.decision
    assert {r.code for r in sequential.reasons} == {r.code for r in fixed.reasons}
    assert sequential.trials_executed <= fixed.trials_executed
    assert sequential.rule == "sequential" and fixed.rule == "fixed"
    for fault in sequential.faults:
        assert fault.stop is not None
        assert fault.stop["code"] in ("violation", "futile", "decided", "max_runs")


def test_a_violation_ends_its_fault_at_the_first_trial_that_shows_it() -> None:
    report = run_assay(load_example("baseline"), parse_plan({"trials": 40, "rule": "sequential"}))
    stopped = [f for f in report.faults if f.stop and f.stop["code"] == "violation"]
    assert stopped, "the unguarded baseline breaks hard invariants"
    for fault in stopped:
        assert fault.stop is not None and fault.stop["trials"] == 1
        assert fault.planned == 1
        assert "in 1 of 1" in str(fault.stop["message"])


def test_a_declared_tolerance_stops_a_careful_fault_where_the_exact_bound_meets_it() -> None:
    # A declared max_violation_rate of 0.2: any violation blocks, so 17 clean trials (0.8^17 <=
    # 2.5 % < 0.8^16) keep P(allow | rate >= 0.2) <= 2.5 % exactly, and the careful workflow's
    # fault stops there with its matched baseline; the fixed plan decides the same.
    data = json.loads((ROOT / "examples" / "copperfin-typed-repair.json").read_text())
    data["envelope"] = {
        "floors": {"contained": 0.5, "recovered": 0.5, "verified": 0.5, "useful_service": 0.5}
    }
    manifest = parse_manifest_json(json.dumps(data))
    plan = parse_plan(
        {
            "trials": 200,
            "rule": "sequential",
            "max_violation_rate": 0.2,
            "modes": ["timeout_after_commit"],
        }
    )
    report = run_assay(manifest, plan)
    fault = report.faults[0]
    assert report.decision.value == "allow", report.reasons
    assert fault.stop is not None and fault.stop["code"] == "decided"
    assert fault.planned == runs_to_bound(0.2, 0.025) == 17
    assert fault.baseline is not None and fault.baseline.trials == 17
    fixed = run_assay(manifest, plan.model_copy(update={"rule": "fixed"}))
    assert fixed.decision == report.decision


def test_a_floor_the_runs_cannot_meet_stops_its_fault_as_futile() -> None:
    # The refuse-all profile serves nobody: its service floors' sequences fall below 0.80 within
    # a few trials, and more trials could only confirm the hold.
    report = run_assay(
        load_example("refuse-all"),
        parse_plan({"trials": 200, "rule": "sequential", "modes": ["timeout_before_send"]}),
    )
    fault = report.faults[0]
    assert report.decision.value == "hold"
    assert fault.stop is not None and fault.stop["code"] == "futile", fault.stop
    assert fault.planned < 20


def test_paper_mode_refuses_a_sequential_rule_naming_the_field() -> None:
    with pytest.raises(PlanInvalid) as exc:
        parse_plan({"catalogue": "paper", "trials": 100, "rule": "sequential"})
    assert exc.value.field == "rule"


def test_paper_mode_and_a_reference_target_run_the_fixed_plan_by_default() -> None:
    assert parse_plan({"catalogue": "paper"}).rule_for("reference") == "fixed"
    assert parse_plan({"catalogue": "paper"}).rule_for("mcp") == "fixed"
    assert AssayPlan().rule_for("reference") == "fixed"
    assert AssayPlan().rule_for("mcp") == "sequential"
    assert AssayPlan(rule="fixed").rule_for("mcp") == "fixed"


def test_a_fixed_plan_report_reads_as_before_sequential_plans_existed() -> None:
    report = run_assay(load_example("typed-repair"), parse_plan({"trials": 5})).to_dict()
    assert "rule" not in report and "spend" not in report
    assert set(report["plan"]) >= {"trials", "seed"}
    assert "rule" not in report["plan"] and "max_runs" not in report["plan"]["stop"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("rule", "bayesian"), ("error", 0.0), ("error", 0.7), ("max_violation_rate", 1.5)],
)
def test_a_bad_sequential_field_is_refused_naming_it(field: str, value: object) -> None:
    with pytest.raises(PlanInvalid) as exc:
        parse_plan({field: value})
    assert exc.value.field == field


def test_the_estimate_spends_fewer_pair_runs_than_trials_on_a_careful_agent() -> None:
    est = estimate(Envelope(), 0.05, 200, None)
    assert est.trials <= 200
    assert 0 < est.pair_runs < est.trials
