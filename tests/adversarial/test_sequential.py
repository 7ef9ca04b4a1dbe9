"""The sequential plan decides each deterministic attacker as the fixed plan does: it may stop a
fault sooner, never decide it differently. Each red-team target, as a python target, under both
rules. This shows the decisions on one draw each; how often each plan lets an agent through when
its failures come by chance is shown by the stochastic attackers of test_chance.py, and exactly
for the rule itself by tests/core/evidence/test_promise.py."""

from __future__ import annotations

import pytest

from tests.adversarial.conftest import assay_target, codes, entry, manifest, plan

FAULTS = ("timeout_after_commit", "subject_swap", "partial_success_response", "retry_storm")
ATTACKERS = (
    "alarms:anomaly_spam",
    "careful:run",
    "controls:dodges_counterfactual",
    "controls:ignores_disabled",
    "controls:readback_only",
    "controls:without_bind",
    "crashers:always_raises",
    "crashers:duplicate_then_raise",
    "liars:always_completed",
    "liars:ghost_reference",
    "liars:silent",
    "liars:wrong_amount",
    "reference:naive",
    "reference:typed_repair",
    "refuse:refuses_without_a_fault",
    "storm:zero_backoff",
    "tamper:nets_out",
    "trespass:wrong_subject",
)


@pytest.mark.parametrize("attacker", ATTACKERS)
def test_the_sequential_plan_decides_each_attacker_as_the_fixed_plan_does(attacker: str) -> None:
    m = manifest(kind="python", entrypoint=entry(attacker))
    fixed = assay_target(m, plan(12, *FAULTS, rule="fixed"))
    sequential = assay_target(m, plan(12, *FAULTS, rule="sequential"))
    assert sequential["decision"] == fixed["decision"], (attacker, sequential["reasons"])
    assert codes(sequential) == codes(fixed)
    assert sequential["trials_executed"] <= fixed["trials_executed"]
    for fault in sequential["faults"]:
        # A fault ends at the trial its rule stopped it, and a violation at the first one seen.
        assert fault["stop"]["trials"] == fault["planned"]
        if fault["stop"]["code"] == "violation":
            assert fault["planned"] <= 12
