"""The organisation's policy as the application keeps it: versioned per tenant and system,
combined at the stricter, audited, and a change reopens the standing dossiers it touches (and
only those)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlmodel import Session, col, select

from service.app import changes, policies
from service.app.dossiers import policy_digest, record_assay_dossier
from service.app.errors import Conflict, FieldInvalid, NotFound, PolicyLowered
from service.core.decision.policy import EMPTY
from service.core.evidence.quota import Quota
from service.core.signing.dossier import Signer
from service.db import dossier as dossiers
from service.db.apikey import Principal, ensure_tenant
from service.db.models import Event, KeyRole, OrgPolicyRow
from tests.web.seed import report_of, seed_candidate


def tenant() -> str:
    return f"policy-{uuid.uuid4().hex[:8]}"


def put(
    session: Session, signer: Signer, name: str, document: dict[str, Any], system: str | None = None
) -> changes.PolicySet:
    return changes.set_policy(session, signer, changes.SetPolicy(name, system, document, "ops"))


def in_force(session: Session, name: str, system: str | None = None) -> policies.InForce:
    row = ensure_tenant(session, name)
    return policies.in_force(session, row.id, name, system)


def admin_of(session: Session, name: str) -> Principal:
    row = ensure_tenant(session, name)
    return Principal(
        key_id=uuid.uuid4(),
        tenant_id=row.id,
        tenant=name,
        roles=frozenset({KeyRole.ADMIN}),
        prefix="ag_test",
        person_id=uuid.uuid4(),
        person="alice",
    )


def test_a_tenant_never_given_a_policy_is_held_to_the_empty_one(session: Session) -> None:
    force = in_force(session, tenant(), "refunds")
    assert force.policy == EMPTY
    assert force.versions == {"tenant": 0, "system": 0}
    assert force.record()["digest"] == EMPTY.digest()


def test_a_systems_policy_and_its_tenants_combine_at_the_stricter_of_each_field(
    session: Session, signer: Signer
) -> None:
    name = tenant()
    ensure_tenant(session, name)
    put(session, signer, name, {"floors": {"recovered": 0.9}, "error": 0.05, "trials": 300})
    put(session, signer, name, {"floors": {"recovered": 0.85}, "error": 0.01}, "refunds")
    force = in_force(session, name, "refunds")
    assert force.policy.document() == {
        "floors": {"recovered": 0.9},
        "error": 0.01,
        "trials": 300,
    }
    assert force.versions == {"tenant": 1, "system": 1}
    # Another system of the tenant is held to the tenant's alone.
    assert in_force(session, name, "payments").policy.error == 0.05


def test_each_change_is_a_new_version_audited_with_the_operator_and_a_repeat_writes_nothing(
    session: Session, signer: Signer
) -> None:
    name = tenant()
    row = ensure_tenant(session, name)
    first = put(session, signer, name, {"trials": 300})
    again = put(session, signer, name, {"trials": 300})
    second = put(session, signer, name, {"trials": 500})
    assert (first.changed, again.changed, second.changed) == (True, False, True)
    versions = session.exec(
        select(OrgPolicyRow.version, OrgPolicyRow.set_by).where(OrgPolicyRow.tenant_id == row.id)
    ).all()
    assert sorted(versions) == [(1, "operator:ops"), (2, "operator:ops")]
    audits = session.exec(
        select(Event).where(Event.tenant_id == row.id, col(Event.kind) == "audit")
    ).all()
    assert [(e.data["action"], e.data["version"], e.data["person"]) for e in audits] == [
        ("policy.set", 1, "ops"),
        ("policy.set", 2, "ops"),
    ]


def test_a_policy_for_an_unknown_tenant_or_an_unknown_key_is_refused_naming_it(
    session: Session, signer: Signer
) -> None:
    with pytest.raises(NotFound):
        put(session, signer, f"nobody-{uuid.uuid4().hex[:6]}", {})
    name = tenant()
    ensure_tenant(session, name)
    with pytest.raises(FieldInvalid) as exc:
        put(session, signer, name, {"floors": {"recoverd": 0.9}})
    assert exc.value.field == "floors.recoverd"


def test_a_systems_policy_that_leaves_no_plan_rule_to_run_is_refused(
    session: Session, signer: Signer
) -> None:
    name = tenant()
    ensure_tenant(session, name)
    put(session, signer, name, {"rules": ["fixed"]})
    with pytest.raises(Conflict) as exc:
        put(session, signer, name, {"rules": ["sequential"]}, "refunds")
    assert exc.value.field == "rules"


def seeded(session: Session, signer: Signer, name: str, system: str) -> uuid.UUID:
    """A decided candidate of `system` whose assay ran under the policy in force now."""
    force = in_force(session, name, system)
    recorded = seed_candidate(
        session, system=system, version="1.0", signer=signer, tenant=name, policy=force.record()
    )
    return recorded.candidate.id


def decision_of(session: Session, candidate_id: uuid.UUID) -> str:
    latest = dossiers.latest(session, candidate_id)
    assert latest is not None
    return latest.decision


def test_a_policy_change_reopens_the_standing_dossier_assayed_under_another_policy(
    session: Session, signer: Signer
) -> None:
    name = tenant()
    candidate = seeded(session, signer, name, "refunds")
    assayed = decision_of(session, candidate)
    assert assayed in ("allow", "hold")
    done = put(session, signer, name, {"floors": {"recovered": 0.9}})
    assert done.reopened == 1
    latest = dossiers.latest(session, candidate)
    assert latest is not None and latest.decision == "reopened"
    assert [r["code"] for r in latest.reasons] == ["policy_changed"]
    # The signed version still records the policy its evidence was gathered under.
    assert policy_digest(latest) == EMPTY.digest()
    assert dossiers.predicate_of(latest)["change_triggers"]["organisation_policy"] == (
        EMPTY.digest()
    )


def test_a_systems_policy_change_leaves_the_tenants_other_systems_standing(
    session: Session, signer: Signer
) -> None:
    name = tenant()
    refunds = seeded(session, signer, name, "refunds")
    payments = seeded(session, signer, name, "payments")
    put(session, signer, name, {"trials": 400}, "refunds")
    assert decision_of(session, refunds) == "reopened"
    assert decision_of(session, payments) != "reopened"


def test_a_change_that_leaves_the_policy_in_force_unchanged_reopens_nothing(
    session: Session, signer: Signer
) -> None:
    name = tenant()
    ensure_tenant(session, name)
    put(session, signer, name, {"floors": {"recovered": 0.9}})
    put(session, signer, name, {"floors": {"recovered": 0.95}}, "refunds")
    candidate = seeded(session, signer, name, "refunds")
    # The tenant's bar moves, but the system's own stays the stricter: the same policy in force.
    done = put(session, signer, name, {"floors": {"recovered": 0.85}})
    assert done.changed and done.reopened == 0
    assert decision_of(session, candidate) != "reopened"


def test_a_policy_set_while_an_assay_ran_reopens_its_dossier_when_it_finishes(
    session: Session, signer: Signer
) -> None:
    name = tenant()
    force = in_force(session, name, "refunds")
    recorded = seed_candidate(
        session,
        system="refunds",
        version="1.0",
        tenant=name,
        decided=False,
        policy=force.record(),
    )
    put(session, signer, name, {"attribution": "required"})
    report = report_of("typed")
    dossier = record_assay_dossier(session, signer, recorded.assay.id, report, quota=Quota())
    assert dossier.version == 2
    assert dossier.decision == "reopened"
    assert [r["code"] for r in dossier.reasons] == ["policy_changed"]


def test_a_tenants_admin_may_raise_the_bar_and_never_lower_it(
    session: Session, signer: Signer
) -> None:
    name = tenant()
    admin = admin_of(session, name)
    put(session, signer, name, {"floors": {"recovered": 0.9}, "trials": 300})
    raised = changes.raise_policy(
        session, signer, admin, None, {"floors": {"recovered": 0.95}, "trials": 300, "error": 0.01}
    )
    assert raised.changed
    assert raised.view.force.own is not None
    assert raised.view.force.own.set_by == str(admin.key_id)
    with pytest.raises(PolicyLowered) as exc:
        changes.raise_policy(session, signer, admin, None, {"floors": {"recovered": 0.95}})
    assert exc.value.field in ("error", "trials")
    # The body replaces the whole policy: a field it leaves out is lowered, and it says so.
    said = {"error": "(0.01)", "trials": "(300)"}[exc.value.field]
    assert exc.value.message.startswith(
        f"left out of the body, and the body replaces the whole policy: leaving out a field "
        f"the policy in force sets {said} lowers it; send the whole policy (GET /v1/policy)"
    ), exc.value.message
    with pytest.raises(PolicyLowered) as lower:
        changes.raise_policy(
            session,
            signer,
            admin,
            None,
            {"floors": {"recovered": 0.5}, "trials": 300, "error": 0.01},
        )
    assert lower.value.field == "floors.recovered"
    assert lower.value.message.startswith("looser than the policy in force (0.95). ")
