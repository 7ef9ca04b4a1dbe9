"""`assaygate plan MANIFEST`: before anything runs, per fault the trial a careful agent is allowed
at and the team's runs against the fixed plan, read off the rule the assay stops by."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from service.core.evidence.forecast import forecast, team_total
from service.core.faults.plan import parse_plan
from service.core.shards.assay import run_assay
from tests.core.conftest import EXAMPLES, load_example

TYPED = str(EXAMPLES / "copperfin-typed.json")
CAREFUL = ["--mode", "subject_swap", "--mode", "timeout_before_send"]


def planned(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", TYPED, *args, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_plan_prints_where_a_careful_agent_is_allowed_and_what_the_team_pays(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = planned(capsys, "--rule", "sequential", "--max-violation-rate", "0.05", *CAREFUL)
    assert (out["p0"], out["p0_declared_in"], out["needs"]) == (
        0.05,
        "plan.max_violation_rate",
        72,
    )
    assert out["refused"] is None
    by_fault = {f["fault"]: f for f in out["faults"]}
    assert all(f["allowed_at"] == 72 and f["resolves"] for f in by_fault.values())
    # subject_swap: 72 trials, 72 matched baselines, 3 pair arms until settled (24 trials);
    # timeout_before_send nominates no control: no pairs.
    assert by_fault["subject_swap"]["team_runs"] == {
        "trials": 72,
        "matched_baseline": 72,
        "baseline_shared_by": None,
        "pairs": 72,
        "total": 216,
    }
    assert by_fault["timeout_before_send"]["team_runs"]["total"] == 144
    assert by_fault["subject_swap"]["fixed_team_runs"] == 200 * 5
    assert out["team_runs"] == 360 and out["fixed_team_runs"] == 1400


def test_the_plans_figures_are_what_the_assay_then_spends(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = planned(capsys, "--rule", "sequential", "--max-violation-rate", "0.05", *CAREFUL)
    plan = parse_plan(
        {
            "trials": 200,
            "rule": "sequential",
            "max_violation_rate": 0.05,
            "modes": ["subject_swap", "timeout_before_send"],
        }
    )
    report = run_assay(load_example("typed"), plan)
    assert report.to_dict()["spend"]["team"]["runs"] == out["team_runs"]
    assert {f.id: f.planned for f in report.faults} == {
        f["fault"]: f["allowed_at"] for f in out["faults"]
    }
    assert team_total(forecast(load_example("typed"), plan)) == out["team_runs"]


def test_plan_says_a_cap_too_short_for_p0_is_refused_and_never_allowed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = planned(capsys, "--max-violation-rate", "0.05", "--trials", "50", *CAREFUL)
    assert out["rule"] == "fixed"  # a reference target's default
    assert all(f["allowed_at"] is None and not f["resolves"] for f in out["faults"])
    assert out["refused"]["field"] == "plan.max_violation_rate"
    assert "raise plan.trials to 72" in out["refused"]["message"]


def test_plan_forecasts_the_plan_a_policy_holds_the_submission_to(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"max_violation_rate": 0.05, "rules": ["sequential"]}))
    out = planned(capsys, "--policy", str(policy), "--trials", "60", *CAREFUL)
    assert (out["rule"], out["p0"]) == ("sequential", 0.05)
    assert out["p0_declared_in"] == "manifest.envelope.max_violation_rate"
    assert "set by the organisation's policy" in out["refused"]["message"]


def test_plan_in_words_names_each_fault_and_the_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["plan", TYPED, "--rule", "sequential", "--max-violation-rate", "0.05", *CAREFUL]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "p0 5.00% (declared in plan.max_violation_rate), 72 clean trials meet it" in text
    assert "subject_swap" in text and "timeout_before_send" in text
    assert "a careful agent: 360 team runs against 1400 under the fixed plan (ratio 0.26)" in text


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--faults", "3"], "--faults"),
        (["--pairs", "1"], "--pairs"),
        (["--max-violation-rate", "1.5"], "max_violation_rate"),
        (["--trials", "0"], "--trials"),
        (["--catalogue", "paper"], "--catalogue"),
        (["--mode", "no_such_fault"], "modes"),
    ],
)
def test_plan_refuses_bad_input_in_one_line_with_exit_2(
    args: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", TYPED, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0], err


def test_plan_without_a_manifest_refuses_the_manifests_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "--trials", "200", "--rule", "sequential"]) == 2
    assert "--rule" in capsys.readouterr().err


def test_assay_refuses_a_policys_p0_its_cap_cannot_resolve_saying_the_policy_set_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"max_violation_rate": 0.05}))
    code = main(["assay", TYPED, "--trials", "50", "--policy", str(policy), *CAREFUL])
    assert code == 3  # `assay` exits 2 for a hold: its errors are 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "envelope.max_violation_rate" in err[0]
    assert "set by the organisation's policy" in err[0] and "72" in err[0]
