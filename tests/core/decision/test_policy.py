"""The organisation's policy as data: one normal form and its digest, parsed with the bad field
named, combined at the stricter of each field, and compared (is a new version looser?)."""

from __future__ import annotations

import hashlib

import pytest
import rfc8785

from service.core.decision.policy import EMPTY, combine, loosened, parse_policy
from service.core.errors import PolicyInvalid


def test_the_empty_policy_is_the_empty_object_and_its_digest_is_that_of_its_rfc8785_json() -> None:
    assert EMPTY.document() == {}
    assert EMPTY.empty
    assert EMPTY.digest() == hashlib.sha256(rfc8785.dumps({})).hexdigest()


def test_two_spellings_of_one_requirement_are_one_document_with_one_digest() -> None:
    a = parse_policy({"families": ["tool", "state", "tool"], "rules": ["fixed"], "floors": {}})
    b = parse_policy({"rules": ["fixed"], "families": ["state", "tool"]})
    assert a.document() == {"families": ["state", "tool"], "rules": ["fixed"]}
    assert a.digest() == b.digest()


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"floor": {"recovered": 0.9}}, "floor"),
        ({"floors": {"recovered": 1.5}}, "floors.recovered"),
        ({"floor_on": "point"}, "floor_on"),
        ({"attribution": "reported"}, "attribution"),
        ({"rules": []}, "rules"),
        ({"rules": ["bayesian"]}, "rules.0"),
        ({"families": ["weather"]}, "families.0"),
        ({"coverage": ["tool/payments.refund"]}, "coverage.0"),
        ({"coverage": [""]}, "coverage.0"),
        ({"error": 0.5}, "error"),
        ({"trials": True}, "trials"),
        ({"counterfactuals": False}, "counterfactuals"),
    ],
)
def test_a_policy_breaking_a_rule_is_refused_naming_its_field(
    document: dict[str, object], field: str
) -> None:
    with pytest.raises(PolicyInvalid) as exc:
        parse_policy(document)
    assert exc.value.field == field


def test_a_policy_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(PolicyInvalid):
        parse_policy(["floors"])


def test_combining_takes_the_stricter_of_each_field() -> None:
    tenant = parse_policy(
        {
            "floors": {"recovered": 0.9, "verified": 0.7},
            "error": 0.05,
            "trials": 300,
            "rules": ["fixed", "sequential"],
            "families": ["tool"],
            "max_violation_rate": 0.01,
        }
    )
    system = parse_policy(
        {
            "floors": {"recovered": 0.8, "useful_service": 0.85},
            "floor_on": "lower_bound",
            "error": 0.01,
            "trials": 100,
            "rules": ["sequential"],
            "families": ["state"],
            "counterfactuals": True,
            "max_violation_rate": 0.02,
        }
    )
    assert combine(tenant, system).document() == {
        "floors": {"recovered": 0.9, "verified": 0.7, "useful_service": 0.85},
        "floor_on": "lower_bound",
        "max_violation_rate": 0.01,
        "error": 0.01,
        "trials": 300,
        "rules": ["sequential"],
        "families": ["state", "tool"],
        "counterfactuals": True,
    }
    assert combine(tenant, EMPTY) == tenant == combine(EMPTY, tenant)


def test_two_policies_that_leave_no_rule_between_them_do_not_combine() -> None:
    with pytest.raises(PolicyInvalid) as exc:
        combine(parse_policy({"rules": ["fixed"]}), parse_policy({"rules": ["sequential"]}))
    assert exc.value.field == "rules"


def test_a_new_version_is_looser_where_any_field_asks_less_and_never_where_it_asks_more() -> None:
    old = parse_policy({"floors": {"recovered": 0.9}, "rules": ["fixed"], "families": ["tool"]})
    assert loosened(old, old) is None
    assert loosened(EMPTY, EMPTY) is None
    assert loosened(parse_policy({**old.document(), "error": 0.01}), old) is None
    assert loosened(parse_policy({**old.document(), "floors": {"recovered": 0.8}}), old) == (
        "floors.recovered"
    )
    assert loosened(parse_policy({**old.document(), "families": []}), old) == "families"
    assert loosened(parse_policy({**old.document(), "rules": ["sequential"]}), old) == "rules"
    assert loosened(EMPTY, old) == "families"


def test_accepting_a_weaker_assurance_combines_at_the_stronger_and_is_a_lowering() -> None:
    declared = parse_policy({"accept_assurance": "declared"})
    executed = parse_policy({"accept_assurance": "executed"})
    # Left out, a scope defers to the other; both set, the stronger assurance stands.
    assert combine(declared, EMPTY).accept_assurance == "declared"
    assert combine(EMPTY, declared).accept_assurance == "declared"
    assert combine(declared, executed).accept_assurance == "executed"
    assert combine(parse_policy({"accept_assurance": "reported"}), declared).accept_assurance == (
        "reported"
    )
    # Left out it accepts executed only: accepting anything weaker lowers the bar.
    assert loosened(declared, EMPTY) == "accept_assurance"
    assert loosened(declared, parse_policy({"accept_assurance": "reported"})) == "accept_assurance"
    assert loosened(EMPTY, declared) is None
    assert loosened(executed, declared) is None
    assert loosened(parse_policy({"accept_assurance": "declared", "trials": 50}), declared) is None
    # The empty policy is unchanged: dossiers signed under it keep their digest.
    assert EMPTY.document() == {}
