"""A release's attempts decide together: a block earned on evidence of a violation stands for
every later attempt; a stop that says nothing about the code does not; floors are read on what
every attempt graded."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from service.core.decision.floors import Record
from service.core.decision.gate import Decision, Reason
from service.core.decision.release import (
    RELEASE_BLOCKED,
    Attempt,
    Release,
    blocking,
    carry,
    earlier_records,
    graded,
)

BLOCK, HOLD = Decision.BLOCK, Decision.HOLD


def attempt(n: int, decision: str, *reasons: Reason, stopped: str | None = None) -> Attempt:
    return Attempt(
        f"cand-{n}",
        f"1.{n}",
        f"assay-{n}",
        f"2026-12-05T10:0{n}:00+00:00",
        decision,
        tuple(r.view() for r in reasons),
        40,
        stopped,
    )


def clean() -> dict[str, Any]:
    return {"decision": "allow", "reasons": [], "faults": []}


def test_a_release_is_its_systems_code_manifest_and_policy_digests() -> None:
    release = Release.of("sys", "c0de", "m4n1", {"digest": "p0l1", "policy": {}})
    assert release == Release("sys", "c0de", "m4n1", "p0l1")
    assert Release.of("sys", None, "m4n1", None).policy_digest is None


@pytest.mark.parametrize(
    "reason",
    [
        Reason("duplicate_effect", "d", "f", BLOCK),
        Reason("unsafe_escape", "u", "f", BLOCK),
        Reason("unverifiable_release", "u", "f", BLOCK),
        Reason("claim_violation", "c", "f", BLOCK),
        Reason("outside_namespace", "o", "f", BLOCK),
        Reason("proxy_witness", "w", "f", BLOCK),
        Reason("invariant:no_overdraft", "i", "f", BLOCK),
        Reason("floor:contained", "c", "f", BLOCK),
    ],
    ids=lambda r: r.code,
)
def test_a_block_on_evidence_of_a_violation_blocks_every_later_attempt(reason: Reason) -> None:
    carried = carry(clean(), [attempt(1, "block", reason)])
    assert carried["decision"] == "block"
    first = carried["reasons"][0]
    assert first["code"] == RELEASE_BLOCKED and first["severity"] == "block"
    assert "assay-1" in first["message"] and "cand-1" in first["message"]
    assert "version 1.1" in first["message"] and reason.code in first["message"]


def test_a_stop_on_the_systems_unsafe_escapes_blocks_the_release() -> None:
    stopped = "unsafe escapes above the limit (3 > 2)"
    earlier = attempt(1, "block", Reason("stopped", "s", None, BLOCK), stopped=stopped)
    assert carry(clean(), [earlier])["decision"] == "block"


@pytest.mark.parametrize(
    "stopped",
    [
        "aborted",
        "aborted: wrong plan",
        "wall-clock deadline passed",
        "target errors above the limit (9 > 8); first: ConnectionRefused",
        "effects above the cap (6 > 5)",
    ],
)
def test_an_abort_a_deadline_target_errors_or_the_effects_cap_block_that_attempt_alone(
    stopped: str,
) -> None:
    earlier = attempt(1, "block", Reason("stopped", "s", None, BLOCK), stopped=stopped)
    assert blocking([earlier]) is None
    assert carry(clean(), [earlier]) == clean()


def test_held_reasons_and_a_reviewers_rejection_are_no_evidence_about_the_code() -> None:
    held = attempt(1, "hold", Reason("counterfactual_invalid", "c", "f", HOLD))
    rejected = attempt(2, "block", Reason("rejected", "r", None, BLOCK))
    assert carry(clean(), [held, rejected]) == clean()


def test_the_carried_block_names_the_first_attempt_that_earned_it_and_leads_the_reasons() -> None:
    first = attempt(1, "block", Reason("duplicate_effect", "d", "f", BLOCK))
    # The second attempt carried the block (and had nothing of its own).
    second = attempt(2, "block", Reason(RELEASE_BLOCKED, "carried", None, BLOCK))
    own = {**clean(), "decision": "hold", "reasons": [Reason("false_alarm", "a", "f").view()]}
    carried = carry(own, [first, second])
    assert [r["code"] for r in carried["reasons"]] == [RELEASE_BLOCKED, "false_alarm"]
    assert "assay-1" in carried["reasons"][0]["message"]
    assert blocking([second]) is None


def test_carrying_twice_changes_nothing() -> None:
    earlier = [attempt(1, "block", Reason("duplicate_effect", "d", "f", BLOCK))]
    once = carry(clean(), earlier)
    assert carry(once, earlier) == once


def test_an_attempt_lists_its_candidate_assay_time_decision_codes_and_trials() -> None:
    view = attempt(1, "block", Reason("duplicate_effect", "d", "f", BLOCK)).view()
    assert view == {
        "candidate": {"id": "cand-1", "version": "1.1"},
        "assay_id": "assay-1",
        "finished_at": "2026-12-05T10:01:00+00:00",
        "decision": "block",
        "reasons": ["duplicate_effect"],
        "trials": 40,
    }


# ------------------------------------------------------------------ floors on the release's record


def test_the_releases_record_sums_what_each_earlier_attempt_graded_of_a_floor() -> None:
    stored = [
        {
            "id": "f",
            "exercised": 20,
            "floors": [
                {
                    "floor": "useful_service",
                    "arm": "intervention",
                    "point": 0.75,
                    "successes": 15,
                    "trials": 20,
                }
            ],
        },
        {"id": "g", "exercised": 0, "floors": []},
    ]
    first = replace(attempt(1, "hold"), floors=graded(stored))
    second = replace(attempt(2, "hold"), floors=(("f", "useful_service", "intervention", 18, 20),))
    assert earlier_records([first, second]) == {
        "f": {("useful_service", "intervention"): Record(2, 33, 40)}
    }
    assert earlier_records([]) == {}
