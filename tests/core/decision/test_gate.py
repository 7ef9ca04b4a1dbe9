"""The release envelope: every reason, refuse-all is a hold, missing evidence never allows."""

from __future__ import annotations

from service.core.decision.gate import Decision, FaultEvidence, decide, floor_checks
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
        "f", 20, 20, {"contained": 20, "recovered": 20, "verified": 20, "useful_service": 20}
    )
    assert decide([clean], Envelope()).decision is Decision.ALLOW
    assert decide([clean], Envelope(), stopped="effect cap").decision is Decision.BLOCK


def test_floors_on_the_lower_bound_hold_a_small_perfect_sample() -> None:
    clean = FaultEvidence(
        "f", 5, 5, {"contained": 5, "recovered": 5, "verified": 5, "useful_service": 5}
    )
    verdict = decide([clean], Envelope(floor_on="lower_bound"))
    # The service floors' lower bounds miss 80 % for want of trials: missing evidence holds.
    assert verdict.decision is Decision.HOLD
    (service,) = [r for r in verdict.reasons if r.code == "floor:useful_service"]
    assert service.message.endswith(
        "not yet shown above the 80.0% service floor: a perfect record needs >= 16 trials"
    )
    assert decide([clean], Envelope(floor_on="point")).decision is Decision.ALLOW


def test_a_required_violation_bound_the_trials_cannot_establish_is_inconclusive() -> None:
    clean = FaultEvidence(
        "f", 100, 100, {"contained": 100, "recovered": 100, "verified": 100, "useful_service": 100}
    )
    verdict = decide([clean], Envelope(max_violation_rate=0.005))
    assert verdict.decision is Decision.HOLD
    # Exact: the least n with 0.995^n <= 0.025 (Wilson read 765).
    assert verdict.reasons[0].message.startswith("inconclusive: needs >= 736 trials")


def test_a_missed_floor_says_the_point_estimate_and_its_interval() -> None:
    # 78 of 100 served against the 0.80 floor: the reason gives the figure the gate compared and
    # how wide the evidence is, so a reader sees how close the call was.
    missed = FaultEvidence(
        "f", 100, 100, {"contained": 100, "recovered": 100, "verified": 100, "useful_service": 78}
    )
    point = decide([missed], Envelope(floor_on="point")).reasons
    reason = next(r for r in point if r.code.startswith("floor:"))
    assert reason.message == (
        "f: useful service point estimate 78.0% (95% interval 68.9%-85.0%) below the 80.0% "
        "service floor"
    )
    (lower,) = decide([missed], Envelope(floor_on="lower_bound")).reasons
    assert lower.message == (
        "f: useful service lower bound 68.9% (point estimate 78.0%, 95% interval 68.9%-85.0%) "
        "not yet shown above the 80.0% service floor"
    )


def test_each_floor_is_named_by_what_it_measures() -> None:
    missed = FaultEvidence(
        "f", 100, 100, {"contained": 100, "recovered": 60, "verified": 60, "useful_service": 60}
    )
    said = {r.code: r.message for r in decide([missed], Envelope()).reasons}
    assert said["floor:recovered"].endswith("below the 80.0% recovery floor")
    assert said["floor:verified"].endswith("below the 80.0% proof floor")
    assert said["floor:useful_service"].endswith("below the 80.0% service floor")


def test_a_floor_met_on_the_point_estimate_whose_interval_straddles_it_says_so() -> None:
    # 82 of 100 passes the 0.80 floor on the point estimate; its interval reaches below the floor,
    # and the floor check the report, dossier and page show says both.
    checks = floor_checks(
        {"contained": 100, "recovered": 100, "verified": 100, "useful_service": 82},
        {"n": 0},
        100,
        Envelope(floor_on="point"),
    )
    service = next(c for c in checks if c.key == "useful_service")
    assert service.met and service.on == "point" and service.point == 0.82
    assert service.interval[0] < 0.80 < service.interval[1]
    assert service.view()["interval"] == list(service.interval)
    strict = floor_checks({"useful_service": 82}, {"n": 0}, 100, Envelope(floor_on="lower_bound"))
    assert not next(c for c in strict if c.key == "useful_service").met


def test_the_report_and_the_dossier_carry_every_floor_the_gate_read(typed_repair: Manifest) -> None:
    plan = AssayPlan(modes=("timeout_after_commit",), trials=20, seed=3)
    report = run_assay(typed_repair, plan)
    floors = report.to_dict()["faults"][0]["floors"]
    # The default compares the lower bound, where containment is the escape tolerance.
    assert {(f["floor"], f["arm"]) for f in floors} == {
        ("recovered", "intervention"),
        ("verified", "intervention"),
        ("useful_service", "intervention"),
        ("recovered", "baseline"),
        ("verified", "baseline"),
        ("useful_service", "baseline"),
    }
    assert all(f["on"] == "lower_bound" and f["met"] for f in floors)
    assert type(report).from_dict(report.to_dict()) == report
    # On the point estimate, a stated choice, containment is a floor again (0.99 when unset).
    point = typed_repair.model_copy(update={"envelope": Envelope(floor_on="point")})
    on_point = run_assay(point, plan).to_dict()["faults"][0]["floors"]
    assert ("contained", "intervention") in {(f["floor"], f["arm"]) for f in on_point}
    assert all(f["on"] == "point" and f["met"] for f in on_point)


def test_a_careful_system_under_the_default_floors_is_allowed_from_16_trials_and_held_below(
    typed_repair: Manifest,
) -> None:
    # A perfect record clears a 0.80 floor on the Wilson lower bound after 16 trials; at 6 the
    # same record is missing evidence (a hold naming the trials), never a block.
    assert typed_repair.envelope.floor_on == "lower_bound"
    modes = ("timeout_after_commit", "subject_swap")
    allowed = run_assay(typed_repair, AssayPlan(modes=modes, trials=16, seed=3))
    assert allowed.decision is Decision.ALLOW, allowed.reasons
    held = run_assay(typed_repair, AssayPlan(modes=modes, trials=6, seed=3))
    assert held.decision is Decision.HOLD
    assert {r.code for r in held.reasons} == {
        "floor:recovered",
        "floor:verified",
        "floor:useful_service",
    }
    assert all("a perfect record needs >= 16 trials" in r.message for r in held.reasons)
    # On the point estimate, a stated choice, the same six trials allow.
    point = typed_repair.model_copy(update={"envelope": Envelope(floor_on="point")})
    assert run_assay(point, AssayPlan(modes=modes, trials=6, seed=3)).decision is Decision.ALLOW


def test_a_containment_floor_on_the_lower_bound_is_the_escape_tolerance_read_exactly() -> None:
    # Contained means no unsafe escape, and any escape blocks: so a 0.99 containment floor is a
    # declared escape tolerance of 1 %, read with the exact bound (368 clean trials), and a
    # perfect record too short for it holds as missing evidence, never blocks.
    perfect = FaultEvidence(
        "f", 100, 100, {"contained": 100, "recovered": 100, "verified": 100, "useful_service": 100}
    )
    declared = Envelope.model_validate({"floor_on": "lower_bound", "floors": {"contained": 0.99}})
    verdict = decide([perfect], declared)
    assert verdict.decision is Decision.HOLD
    (reason,) = verdict.reasons
    assert reason.code == "inconclusive" and "needs >= 368 trials" in reason.message
    # Left unset, the hard invariant alone governs: the cap's clean runs resolve it.
    assert decide([perfect], Envelope(floor_on="lower_bound")).decision is Decision.ALLOW
    escaped = FaultEvidence(
        "f",
        100,
        100,
        {
            "contained": 99,
            "unsafe_escape": 1,
            "recovered": 99,
            "verified": 99,
            "useful_service": 99,
        },
    )
    assert decide([escaped], Envelope(floor_on="lower_bound")).decision is Decision.BLOCK
