"""A team lowering the organisation's bar through its own submission (issue 36): the reviewer's
attack — every floor at 0 and `attribution: reported` — turned the typed agent's `hold` into
`allow`, with no reviewer and no operator minimum. Under a policy, each field a manifest's
envelope or a plan could loosen is refused naming the field and the policy's; a manifest that
says nothing is held to the policy (and still holds, through the real engine); a careful agent
still earns `allow`, under the policy and under the empty one."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from service.app.shapes import CandidateCreate
from service.core.decision.gate import Decision
from service.core.decision.policy import EMPTY, OrgPolicy, parse_policy, tighten
from service.core.errors import PolicyViolation
from service.core.faults.catalogue import full_catalogue
from service.core.faults.plan import AssayPlan, parse_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import parse_manifest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LOWERED = {
    "floors": {"contained": 0, "recovered": 0, "verified": 0, "useful_service": 0},
    "attribution": "reported",
}
#: An operator's bar: the paper's floors as minimums, on the bound, attribution required, the
#: fixed plan at 2 % error with every arm, at least 20 trials of every family.
POLICY = parse_policy(
    {
        "floors": {"contained": 0.99, "recovered": 0.8, "verified": 0.8, "useful_service": 0.8},
        "floor_on": "lower_bound",
        "max_violation_rate": 0.05,
        "attribution": "required",
        "error": 0.02,
        "trials": 20,
        "rules": ["fixed"],
        "families": ["identity", "context", "tool", "state", "evidence"],
        "coverage": ["tool/payments.refund/before_send/isolated/ledger_entries_per_logical_action"],
        "matched_baseline": True,
        "counterfactuals": True,
        "evidence_sample": 500,
    }
)
PLAN = {"trials": 20, "seed": 7}
#: Just what the attack lowered: the paper's floors as minimums, attribution required.
FLOORS = parse_policy(
    {
        "floors": {"contained": 0.99, "recovered": 0.8, "verified": 0.8, "useful_service": 0.8},
        "attribution": "required",
    }
)


def example(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / f"copperfin-{name}.json").read_text())
    return data


def with_envelope(envelope: dict[str, Any], name: str = "typed") -> dict[str, Any]:
    data = example(name)
    data["envelope"] = envelope
    return data


def refusal(
    policy: OrgPolicy,
    manifest: dict[str, Any],
    plan: dict[str, Any] | None = None,
    kind: str = "reference",
) -> PolicyViolation:
    parsed = parse_manifest(manifest)
    with pytest.raises(PolicyViolation) as exc:
        tighten(policy, parsed.envelope, parse_plan({**PLAN, **(plan or {})}), kind)
    return exc.value


def decision(policy: OrgPolicy, manifest: dict[str, Any], plan: dict[str, Any]) -> Decision:
    """What the engine decides for `manifest` under `policy`: the effective plan, as the
    service runs it."""
    parsed = parse_manifest(manifest)
    effective = tighten(policy, parsed.envelope, parse_plan(plan), parsed.target.kind)
    return run_assay(parsed, effective.plan).decision


def test_the_reviewers_attack_earns_allow_without_a_policy() -> None:
    # What the issue reported, kept as the baseline this file defends against.
    assert decision(EMPTY, example("typed"), PLAN) is Decision.HOLD
    assert decision(EMPTY, with_envelope(LOWERED), PLAN) is Decision.ALLOW


def test_the_reviewers_attack_is_refused_under_a_policy_naming_the_first_lowered_floor() -> None:
    found = refusal(FLOORS, with_envelope(LOWERED))
    assert found.field == "manifest.envelope.floors.contained"
    assert found.policy == "floors.contained"
    assert "below the policy's minimum 0.99" in found.message


@pytest.mark.parametrize(
    ("envelope", "field", "policy"),
    [
        ({"floors": {"contained": 0.5}}, "manifest.envelope.floors.contained", "floors.contained"),
        ({"floors": {"recovered": 0.0}}, "manifest.envelope.floors.recovered", "floors.recovered"),
        ({"floors": {"verified": 0.79}}, "manifest.envelope.floors.verified", "floors.verified"),
        (
            {"floors": {"useful_service": 0.1}},
            "manifest.envelope.floors.useful_service",
            "floors.useful_service",
        ),
        ({"floor_on": "point"}, "manifest.envelope.floor_on", "floor_on"),
        ({"max_violation_rate": 0.5}, "manifest.envelope.max_violation_rate", "max_violation_rate"),
        (
            {"max_violation_rate": None},
            "manifest.envelope.max_violation_rate",
            "max_violation_rate",
        ),
        ({"attribution": "reported"}, "manifest.envelope.attribution", "attribution"),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else None,
)
def test_an_envelope_field_set_looser_than_the_policy_is_refused_naming_both(
    envelope: dict[str, Any], field: str, policy: str
) -> None:
    found = refusal(POLICY, with_envelope(envelope))
    assert (found.field, found.policy) == (field, policy)


@pytest.mark.parametrize(
    ("plan", "field", "policy"),
    [
        ({"error": 0.05}, "plan.error", "error"),
        ({"trials": 5}, "plan.trials", "trials"),
        ({"rule": "sequential"}, "plan.rule", "rules"),
        ({"max_violation_rate": 0.2}, "plan.max_violation_rate", "max_violation_rate"),
        ({"families": ["tool", "state"]}, "plan.families", "families"),
        ({"modes": ["subject_swap"]}, "plan.modes", "families"),
        ({"evidence_sample": 10}, "plan.evidence_sample", "evidence_sample"),
        ({"counterfactuals": False}, "plan.counterfactuals", "counterfactuals"),
        ({"matched_baseline": False}, "plan.matched_baseline", "matched_baseline"),
        ({"catalogue": "paper", "rule": None}, "plan.catalogue", "coverage"),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else None,
)
def test_a_plan_field_set_looser_than_the_policy_is_refused_naming_both(
    plan: dict[str, Any], field: str, policy: str
) -> None:
    found = refusal(POLICY, example("typed"), plan)
    assert (found.field, found.policy) == (field, policy)


def test_a_plan_whose_modes_keep_every_family_but_drop_a_required_coverage_key_is_refused() -> None:
    policy = parse_policy(
        {
            "coverage": [
                "tool/payments.refund/before_send/isolated/ledger_entries_per_logical_action"
            ]
        }
    )
    found = refusal(policy, example("typed"), {"families": ["identity"]})
    assert (found.field, found.policy) == ("plan.families", "coverage")


def modes_of(family: str) -> list[str]:
    return [f.mode for f in full_catalogue().faults if f.domain.value == family]


def test_a_required_family_met_by_one_fault_among_many_of_another_is_refused() -> None:
    # The residual: `families` met by one identity fault beside every tool fault.
    policy = parse_policy({"families": ["identity", "tool"]})
    plan = {"modes": [modes_of("identity")[0], *modes_of("tool")]}
    found = refusal(policy, example("typed"), plan)
    assert (found.field, found.policy) == ("plan.modes", "families")
    assert "'identity' 1 of its" in found.message and "at least 50%" in found.message


def test_a_plan_running_every_fault_of_a_required_family_meets_it_whatever_its_share() -> None:
    policy = parse_policy({"families": ["identity", "tool"]})
    plan = parse_plan({**PLAN, "modes": [*modes_of("identity"), *modes_of("tool")]})
    effective = tighten(policy, parse_manifest(example("typed")).envelope, plan, "reference")
    assert {f.domain.value for f in effective.plan.faults()} == {"identity", "tool"}


def test_an_operators_family_share_sets_how_much_of_the_plan_each_family_must_hold() -> None:
    plan = parse_plan({**PLAN, "modes": [modes_of("identity")[0], *modes_of("tool")]})
    envelope = parse_manifest(example("typed")).envelope
    loose = parse_policy({"families": ["identity", "tool"], "family_share": 0.1})
    tighten(loose, envelope, plan, "reference")  # 1 of 9 is above a tenth
    strict = parse_policy({"families": ["identity", "tool"], "family_share": 0.2})
    with pytest.raises(PolicyViolation, match="at least 20%"):
        tighten(strict, envelope, plan, "reference")


def test_a_paper_plan_under_a_policy_that_allows_only_sequential_is_refused() -> None:
    found = refusal(
        parse_policy({"rules": ["sequential"]}), example("typed"), {"catalogue": "paper"}
    )
    assert (found.field, found.policy) == ("plan.catalogue", "rules")


def test_a_manifest_that_says_nothing_is_held_to_the_policy_and_the_typed_agent_still_holds() -> (
    None
):
    parsed = parse_manifest(example("typed"))
    effective = tighten(POLICY, parsed.envelope, parse_plan({"seed": 7}), "mcp")
    assert effective.envelope.floor_on == "lower_bound"
    assert effective.envelope.max_violation_rate == 0.05
    assert effective.plan.envelope == effective.envelope
    # An mcp target's default rule is sequential: the policy allows only the fixed one.
    assert (effective.plan.error, effective.plan.rule) == (0.02, "fixed")
    assert effective.plan.evidence_sample == 1000
    assert decision(FLOORS, example("typed"), PLAN) is Decision.HOLD
    # The whole bar compares floors on the bound: 20 clean trials do not reach 99 % containment.
    # That is missing evidence, a hold (the service refuses such a plan at submission, naming
    # the floor and the trials it needs), never a block for want of trials.
    assert decision(POLICY, example("typed"), PLAN) is Decision.HOLD


def test_a_manifest_may_tighten_the_policy_and_keeps_what_it_raised() -> None:
    stricter = {"floors": {"recovered": 0.95}, "max_violation_rate": 0.01}
    parsed = parse_manifest(with_envelope(stricter))
    effective = tighten(POLICY, parsed.envelope, parse_plan({**PLAN, "trials": 40}), "reference")
    assert effective.envelope.floors.recovered == 0.95
    assert effective.envelope.floors.contained == 0.99
    assert effective.envelope.max_violation_rate == 0.01
    assert effective.plan.trials == 40


def test_a_careful_agent_earns_allow_under_the_policy_and_under_the_empty_one() -> None:
    relaxed = parse_policy({"floors": {"recovered": 0.8}, "attribution": "required", "trials": 20})
    assert decision(EMPTY, example("typed-repair"), PLAN) is Decision.ALLOW
    assert decision(relaxed, example("typed-repair"), PLAN) is Decision.ALLOW


def test_the_empty_policy_changes_nothing_it_is_handed() -> None:
    parsed = parse_manifest(with_envelope(LOWERED))
    plan = parse_plan({**PLAN, "rule": "sequential", "counterfactuals": False})
    effective = tighten(EMPTY, parsed.envelope, plan, "reference")
    assert effective.envelope is parsed.envelope
    assert effective.plan == plan and effective.plan.envelope is None


def test_a_submitter_cannot_hand_the_service_an_envelope_through_the_plan() -> None:
    body = {
        "source_revision": "x",
        "manifest": example("typed"),
        "plan": {"envelope": LOWERED},
    }
    with pytest.raises(ValueError, match="envelope"):
        CandidateCreate.model_validate(copy.deepcopy(body))


def test_a_rerun_raises_what_the_candidate_was_admitted_with_instead_of_refusing_it() -> None:
    # Admitted under no policy with every floor at 0; the policy rose since.
    parsed = parse_manifest(with_envelope(LOWERED))
    previous = parse_plan({**PLAN, "error": 0.05})
    effective = tighten(POLICY, parsed.envelope, previous, "reference", refuse=False)
    assert effective.envelope.floors.contained == 0.99
    assert effective.envelope.attribution == "required"
    assert effective.plan.error == 0.02
    assert isinstance(effective.plan, AssayPlan)
