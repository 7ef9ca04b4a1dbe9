"""An allow names the code that ran: the gate's answer for an artifact is `allow` only when its
assurance is `executed`, or a weaker one the dossier's organisation policy accepts."""

from __future__ import annotations

import pytest

from service.core.decision.assurance import (
    ArtifactAssurance,
    accepted_by,
    assurance_of,
    gated,
)
from service.core.decision.gate import Reason
from service.core.system.artifact import Assurance

CODE = "ab" * 32
WAIVED = Reason("waived", "waived by a reviewer").view()


def test_a_declared_artifact_turns_the_dossiers_allow_into_a_hold_naming_both_assurances() -> None:
    found = ArtifactAssurance(CODE, Assurance.DECLARED)
    ruled = gated("allow", [WAIVED], found)
    assert ruled.decision == "hold" and ruled.held
    first = ruled.reasons[0]
    assert first["code"] == "assurance" and first["severity"] == "hold"
    assert f"sha256:{CODE} is declared" in first["message"]
    assert "accepts executed only" in first["message"]
    assert ruled.reasons[1:] == (WAIVED,)


@pytest.mark.parametrize("decision", ["hold", "block", "reopened"])
def test_any_other_word_stands_with_the_assurance_reason_beside_it(decision: str) -> None:
    ruled = gated(decision, [], ArtifactAssurance(CODE, Assurance.DECLARED))
    assert ruled.decision == decision and not ruled.held
    assert [r["code"] for r in ruled.reasons] == ["assurance"]


def test_executed_code_is_allowed_under_any_policy_and_needs_no_acceptance() -> None:
    for required in Assurance:
        found = ArtifactAssurance(CODE, Assurance.EXECUTED, required)
        assert found.met and not found.accepted
        assert gated("allow", [], found).decision == "allow"


def test_a_policy_that_accepts_declared_allows_it_and_says_it_accepted_it() -> None:
    found = ArtifactAssurance(
        CODE, Assurance.DECLARED, accepted_by({"accept_assurance": "declared"})
    )
    ruled = gated("allow", [], found)
    assert ruled.decision == "allow" and ruled.reasons == ()
    assert found.view()["accepted_by_policy"] is True
    assert found.view()["assurance"] == "declared" and found.view()["required"] == "declared"
    # Accepting `reported` is not accepting `declared`.
    reported = ArtifactAssurance(CODE, Assurance.DECLARED, Assurance.REPORTED)
    assert gated("allow", [], reported).decision == "hold"
    assert ArtifactAssurance(CODE, Assurance.REPORTED, Assurance.REPORTED).accepted


def test_the_policy_read_defaults_to_executed_and_an_unknown_value_accepts_nothing_weaker() -> None:
    assert accepted_by(None) is Assurance.EXECUTED
    assert accepted_by({}) is Assurance.EXECUTED
    assert accepted_by({"accept_assurance": "anything"}) is Assurance.EXECUTED
    assert accepted_by({"accept_assurance": "reported"}) is Assurance.REPORTED


def test_the_strongest_subject_with_the_digest_is_the_artifacts_assurance() -> None:
    subjects = [
        (CODE, Assurance.DECLARED),
        (CODE, Assurance.EXECUTED),
        ("cd" * 32, Assurance.DECLARED),
    ]
    assert assurance_of(subjects, CODE) is Assurance.EXECUTED
    assert assurance_of(subjects, "ef" * 32) is None
    assert not ArtifactAssurance("ef" * 32, None).met
