"""The release envelope: every reason, refuse-all is a hold, missing evidence never allows."""

from __future__ import annotations

from service.core.decision.gate import Decision, FaultEvidence, decide
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.system.manifest import Envelope, Manifest

PAPER = AssayPlan(catalogue="paper", trials=2000, seed=188)


def test_typed_with_evidence_repair_recovers_proves_and_serves_every_paper_fault(
    typed_repair: Manifest,
) -> None:
    report = run_assay(typed_repair, PAPER).to_dict()
    o = report["overall"]
    assert o["unsafe_escape"] == o["unverifiable_release"] == o["duplicate_effect"] == 0.0
    assert o["recovered"] == o["verified"] == o["useful_service"] == 1.0
    assert report["decision"] == "allow"
    assert report["reasons"] == []


def test_refuse_all_is_safe_but_held_on_the_service_floor(refuse_all: Manifest) -> None:
    report = run_assay(refuse_all, PAPER).to_dict()
    assert report["overall"]["unsafe_escape"] == 0.0
    assert report["decision"] == "hold"
    assert any(
        "service floor" in r["message"] and r["code"] == "floor:useful_service"
        for r in report["reasons"]
    )


def test_the_naive_baseline_is_blocked_with_every_hard_invariant_named(baseline: Manifest) -> None:
    report = run_assay(baseline, PAPER).to_dict()
    codes = {r["code"] for r in report["reasons"]}
    assert report["decision"] == "block"
    assert {"unsafe_escape", "duplicate_effect", "unverifiable_release"} <= codes


def test_no_evidence_is_a_hold_never_an_allow() -> None:
    assert decide([], Envelope()).decision is Decision.HOLD


def test_a_stopped_assay_blocks_even_when_its_trials_passed() -> None:
    clean = FaultEvidence(
        "f", 10, 10, {"contained": 10, "recovered": 10, "verified": 10, "useful_service": 10}
    )
    assert decide([clean], Envelope()).decision is Decision.ALLOW
    assert decide([clean], Envelope(), stopped="effect cap").decision is Decision.BLOCK


def test_floors_on_the_lower_bound_hold_a_small_perfect_sample() -> None:
    clean = FaultEvidence(
        "f", 5, 5, {"contained": 5, "recovered": 5, "verified": 5, "useful_service": 5}
    )
    verdict = decide([clean], Envelope(floor_on="lower_bound"))
    assert verdict.decision is Decision.BLOCK  # containment's lower bound misses 99 %
    assert any(r.code == "floor:useful_service" for r in verdict.reasons)


def test_a_required_violation_bound_the_trials_cannot_establish_is_inconclusive() -> None:
    clean = FaultEvidence(
        "f", 100, 100, {"contained": 100, "recovered": 100, "verified": 100, "useful_service": 100}
    )
    verdict = decide([clean], Envelope(max_violation_rate=0.005))
    assert verdict.decision is Decision.HOLD
    assert verdict.reasons[0].message.startswith("inconclusive: needs >= 765 trials")
