"""One order for reasons everywhere: block reasons lead, then hold reasons, each group as the
evidence gave it — the decision, the signed dossier and every reader use `block_first`."""

from __future__ import annotations

from service.core.decision.gate import Decision, FaultEvidence, Reason, block_first, decide
from service.core.signing.dossier import successor
from service.core.system.manifest import Envelope


def test_block_reasons_lead_and_each_group_keeps_the_order_it_was_given_in() -> None:
    given = [
        Reason("target_errors", "first hold", "f", Decision.HOLD),
        Reason("duplicate_effect", "first block", "f", Decision.BLOCK),
        Reason("counterfactual_untested", "second hold", "g", Decision.HOLD),
        Reason("unsafe_escape", "second block", "g", Decision.BLOCK),
    ]
    assert [r.message for r in block_first(given)] == [
        "first block",
        "second block",
        "first hold",
        "second hold",
    ]


def test_stored_reasons_are_ordered_the_same_way_as_the_cores() -> None:
    stored = [
        {"code": "counterfactual_untested", "severity": "hold"},
        {"code": "waived", "severity": "allow"},
        {"code": "rejected", "severity": "block"},
    ]
    assert [r["code"] for r in block_first(stored)] == [
        "rejected",
        "counterfactual_untested",
        "waived",
    ]


def test_a_reason_without_a_known_severity_never_overtakes_a_block() -> None:
    stored = [
        {"code": "odd", "severity": "later"},
        {"code": "old"},
        {"code": "dup", "severity": "block"},
    ]
    assert [r["code"] for r in block_first(stored)] == ["dup", "odd", "old"]


def test_a_blocked_decision_is_headed_by_its_block_reason_though_a_hold_was_found_first() -> None:
    # The target's own failures (a hold) are found before the hard invariants (a block).
    fault = FaultEvidence(
        "timeout_after_commit",
        10,
        10,
        {"duplicate_effect": 2, "contained": 8, "recovered": 8, "verified": 8, "useful_service": 8},
        target_errors=1,
        error_kinds={"crash": 1},
    )
    verdict = decide([fault], Envelope())
    assert verdict.decision is Decision.BLOCK
    assert {r.severity for r in verdict.reasons} == {Decision.BLOCK, Decision.HOLD}
    assert verdict.reasons[0].severity is Decision.BLOCK
    assert verdict.reasons[0].code == "duplicate_effect"
    assert list(verdict.reasons) == block_first(verdict.reasons)


def test_a_dossier_version_signs_its_reasons_block_first() -> None:
    nxt = successor(
        {"decision": "hold", "reasons": []},
        version=2,
        previous="sha256:0",
        issued_at="2026-12-03T00:00:00Z",
        change="rejected",
        decision="block",
        reasons=[
            {"code": "counterfactual_untested", "severity": "hold"},
            {"code": "rejected", "severity": "block"},
        ],
    )
    assert [r["code"] for r in nxt["reasons"]] == ["rejected", "counterfactual_untested"]
