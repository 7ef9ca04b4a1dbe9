"""Floors on a release's record: an attempt's floor on the lower bound reads its own Wilson bound
the first time a fault and arm are graded, and from the release's second attempt on the record of
every attempt so far, read with the anytime-valid confidence sequence; the point estimate stays
per attempt."""

from __future__ import annotations

from service.core.decision.floors import Record, floor_check, stored_records
from service.core.decision.gate import Decision, FaultEvidence, decide
from service.core.evidence.sequential import confidence_sequence
from service.core.evidence.signature import wilson
from service.core.system.manifest import Envelope

ENVELOPE = Envelope()  # floors of 0.80 on the lower bound
SERVICE = ("useful_service", "intervention")


def served(k: int, n: int, earlier: Record | None = None) -> FaultEvidence:
    counts = {"contained": n, "recovered": n, "verified": n, "useful_service": k}
    prior = {} if earlier is None else {SERVICE: earlier}
    return FaultEvidence("f", n, n, counts, earlier=prior)


def test_a_first_attempt_reads_its_own_wilson_bound_and_says_what_it_graded() -> None:
    check = floor_check("useful_service", "intervention", 16, 16, ENVELOPE)
    assert check.pooled is None
    assert check.met and check.measure == wilson(16, 16)[0]
    view = check.view()
    assert (view["successes"], view["trials"]) == (16, 16)
    assert "pooled" not in view


def test_a_rerun_reads_the_releases_record_with_the_confidence_sequence() -> None:
    check = floor_check(
        "useful_service", "intervention", 16, 16, ENVELOPE, {SERVICE: Record(1, 16, 16)}
    )
    assert check.pooled is not None
    assert check.pooled.record == Record(2, 32, 32)
    # One side of the plan's 5 % error, valid at every attempt's look at once.
    assert check.measure == confidence_sequence(32, 32, 0.025)[0]
    assert check.met
    assert check.view()["pooled"] == {
        "attempts": 2,
        "successes": 32,
        "trials": 32,
        "interval": list(confidence_sequence(32, 32, 0.025)),
        "error": 0.025,
    }


def test_a_rerun_that_would_pass_on_its_own_is_held_on_the_releases_record() -> None:
    # 20 of 20 alone clears 0.80 (Wilson 83.9 %); after 15 of 20 it is 35 of 40, which does not.
    assert floor_check("useful_service", "intervention", 20, 20, ENVELOPE).met
    verdict = decide([served(20, 20, Record(1, 15, 20))], ENVELOPE)
    assert verdict.decision is Decision.HOLD
    (reason,) = verdict.reasons
    assert reason.code == "floor:useful_service"
    low, high = confidence_sequence(35, 40, 0.025)
    assert reason.message == (
        f"f: useful service lower bound {100 * low:.1f}% on the release's record of 2 attempts "
        f"(35 of 40 trials; anytime-valid interval {100 * low:.1f}%-{100 * high:.1f}%), this "
        "attempt's point estimate 100.0% (95% interval 83.9%-100.0%) not yet shown above the "
        "80.0% service floor: a perfect re-run needs >= 41 trials"
    )


def test_a_release_held_for_too_few_trials_is_allowed_once_its_record_earns_it() -> None:
    # Six perfect trials hold (a perfect record needs 16 on its own); 24 more make a perfect 30,
    # which the confidence sequence puts above 0.80 (it needs 27).
    assert decide([served(6, 6)], ENVELOPE).decision is Decision.HOLD
    assert decide([served(24, 24, Record(1, 6, 6))], ENVELOPE).decision is Decision.ALLOW
    assert decide([served(20, 20, Record(1, 6, 6))], ENVELOPE).decision is Decision.HOLD


def test_a_rerun_declaring_a_looser_error_reads_its_floors_no_looser() -> None:
    earlier = {SERVICE: Record(1, 35, 40)}
    loose = floor_check("useful_service", "intervention", 40, 40, ENVELOPE, earlier, error=0.4)
    strict = floor_check("useful_service", "intervention", 40, 40, ENVELOPE, earlier, error=0.01)
    assert loose.pooled is not None and loose.pooled.error == 0.025
    assert strict.pooled is not None and strict.pooled.error == 0.005
    assert loose.measure == confidence_sequence(75, 80, 0.025)[0] > strict.measure


def test_floors_on_the_point_estimate_stay_per_attempt() -> None:
    point = Envelope(floor_on="point")
    check = floor_check(
        "useful_service", "intervention", 17, 20, point, {SERVICE: Record(3, 0, 60)}
    )
    assert check.pooled is None and check.met


def test_an_arm_no_earlier_attempt_graded_reads_its_own_bound() -> None:
    check = floor_check("useful_service", "baseline", 16, 16, ENVELOPE, {SERVICE: Record(1, 0, 20)})
    assert check.pooled is None and check.met


def test_a_stored_fault_gives_back_what_it_graded_of_each_floor() -> None:
    views = [
        {
            "floor": "useful_service",
            "arm": "intervention",
            "point": 0.75,
            "successes": 15,
            "trials": 20,
        },
        # Written before views counted: the point estimate of the arm's trials.
        {"floor": "recovered", "arm": "baseline", "point": 0.9},
    ]
    fault = {"id": "f", "exercised": 20, "baseline": {"trials": 10}, "floors": views}
    assert stored_records(fault) == {
        ("useful_service", "intervention"): (15, 20),
        ("recovered", "baseline"): (9, 10),
    }


def test_a_stored_fault_without_floor_views_counts_its_trials_with_no_success() -> None:
    fault = {"id": "f", "exercised": 20, "baseline": {"trials": 10}}
    found = stored_records(fault)
    assert found[SERVICE] == (0, 20)
    assert found[("verified", "baseline")] == (0, 10)
    assert len(found) == 6
