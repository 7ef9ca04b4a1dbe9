"""What each dossier version says: the version a finished assay signs, the next version over
unchanged evidence (a review, a reopened gate), and deciding an assay once every shard is stored.

Deciding runs in one transaction, written by whoever gets there first: the worker that stores the
last shard, a reconciler that finds an assay every shard of which is stored but nobody merged, an
abort that settles the last shards itself. Any number may race: the report is written only while
the assay is open, so one wins and the others change nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from service.app import notify, policies
from service.app.artifacts import images_after, subjects_after
from service.app.errors import NotFound
from service.app.notify import HookEvent
from service.core.decision.gate import Decision, Reason, ReasonView
from service.core.decision.release import carry
from service.core.errors import EvidenceUnsealable
from service.core.evidence.quota import Quota, cut_dossier
from service.core.faults.plan import AssayPlan
from service.core.signing.dossier import (
    CandidateRef,
    Signer,
    compare_triggers,
    predicate_from_report,
    release_hashes,
    successor,
    trigger_hashes,
)
from service.core.system.manifest import Manifest
from service.db import dossier as dossiers
from service.db import queries
from service.db import release as releases
from service.db import tenant as tenants
from service.db.apikey import actor_view
from service.db.assay import fail_assay
from service.db.dossier import REOPENED, REVIEWABLE, OpenChange, iso
from service.db.merge import record_merge
from service.db.models import Assay, Candidate, Dossier, Hold, System, utcnow


@dataclass(frozen=True)
class Decided:
    """`won`: this call recorded the report and the dossier (else another caller had)."""

    decision: str
    won: bool


def of_tenant(session: Session, tenant_id: uuid.UUID, dossier_id: uuid.UUID) -> Dossier:
    """A dossier version of the tenant's; NotFound for another tenant's or none."""
    found = dossiers.dossier_of_tenant(session, dossier_id, tenant_id)
    if found is None:
        raise NotFound(f"no dossier {dossier_id}", field="dossier_id")
    return found


@dataclass(frozen=True)
class Decide:
    """Decide a finished assay: its manifest and plan, and the storage quota its report and
    dossier are cut to (the deployment's: `Settings.quota()`)."""

    assay_id: uuid.UUID
    manifest: Manifest
    plan: AssayPlan
    quota: Quota


def decide(session: Session, signer: Signer, command: Decide) -> Decided | None:
    """Merge and record the decision if every shard is stored and nobody has, the report and
    the dossier within the command's quota; None otherwise. The caller commits."""
    assay_id, quota = command.assay_id, command.quota
    merged = record_merge(session, assay_id, command.manifest, command.plan, quota)
    if merged is None:
        return None
    if merged.won:
        # In the same transaction: exactly one signed dossier version per finished assay.
        record_assay_dossier(session, signer, assay_id, merged.report, quota=quota)
    return Decided(merged.decision, merged.won)


#: What a result that cannot be stored or signed raises: the core's refusal, or PostgreSQL's
#: (a value its JSON or text columns refuse). Neither is an outage: trying again fails again.
UNSEALABLE: tuple[type[Exception], ...] = (EvidenceUnsealable, sa.exc.DataError)


def unsealable_reason(exc: Exception, what: str) -> str:
    """One readable line saying why `what` (or what the core's error names) cannot be stored or
    signed: the core's words, or PostgreSQL's first line (never the statement and its
    parameters, which would repeat the whole result)."""
    if isinstance(exc, EvidenceUnsealable):
        what, why = exc.field or what, exc.message
    elif isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None:
        lines = str(exc.orig).splitlines()
        why = f"the database refused it: {lines[0] if lines else type(exc.orig).__name__}"
    else:
        why = str(exc)
    text = f"{what} cannot be stored or signed: {why}"
    return text if len(text) <= 400 else text[:399] + "…"


def decide_or_fail(session: Session, signer: Signer, command: Decide) -> Decided | None:
    """`decide` in a savepoint: a merge whose report or dossier cannot be stored or signed rolls
    back to it and fails the assay with the reason, once (None), so a poisoned result ends its
    own assay and never comes back to the next worker, abort or reconciler round."""
    try:
        with session.begin_nested():
            return decide(session, signer, command)
    except UNSEALABLE as exc:
        fail_assay(session, command.assay_id, unsealable_reason(exc, "the assay's evidence"))
        return None


# ------------------------------------------------------------------------- a finished assay


def record_assay_dossier(
    session: Session,
    signer: Signer,
    assay_id: uuid.UUID,
    report: Mapping[str, Any],
    *,
    quota: Quota,
    now: datetime | None = None,
) -> Dossier:
    """The dossier version for a finished assay; call once, in the transaction that stored the
    report (the worker that wins the merge). The predicate is cut to `quota` before it is
    signed, and says what was cut on the way (`cut`, only when anything was)."""
    now = now or utcnow()
    assay = session.get(Assay, assay_id)
    assert assay is not None
    owner = session.get(Candidate, assay.candidate_id)
    assert owner is not None
    system = dossiers.lock_system(session, owner.system_id)
    candidate = dossiers.lock(session, assay.candidate_id)
    before = dossiers.latest(session, candidate.id)
    # Every finished attempt of the release, this one among them: a block an earlier one earned
    # on evidence stands (`record_merge` carried it already; a report recorded without it
    # carries it here), and the dossier lists them all.
    attempts = releases.attempts(session, releases.of(candidate, assay))
    report = carry(report, [a for a in attempts if a.assay_id != str(assay_id)])
    triggers = _triggers(session, system, report, candidate.code_sha256)
    # What the release ships, by digest: the code this assay's workers ran, and what the
    # candidate names besides.
    shipped = [
        *subjects_after(session, candidate.id, candidate.code_sha256, assay_id),
        *images_after(session, assay_id),
    ]
    if assay.policy is not None:
        triggers["organisation_policy"] = assay.policy["digest"]
    dossiers.supersede_reviews(session, candidate.id)
    decision = str(report["decision"])
    dossier_id = uuid.uuid4()
    hold = None
    if decision in REVIEWABLE:
        hold = Hold(
            candidate_id=candidate.id,
            dossier_id=dossier_id,
            reasons=list(report.get("reasons", [])),
            created_at=now,
        )
    predicate = predicate_from_report(
        report,
        _candidate_ref(session, candidate, system),
        version=before.version + 1 if before else 1,
        previous=before.digest if before else None,
        issued_at=iso(now),
        triggers=triggers,
        holds=[dossiers.hold_view(hold)] if hold else [],
        stop_conditions=_stop_conditions(assay, report),
        change=f"assay {assay_id} finished"
        if before is None
        else f"re-run: assay {assay_id} replaces the evidence of version {before.version}",
        artifacts=shipped,
        policy=assay.policy,
        attempts=[a.view() for a in attempts],
    )
    predicate = cut_dossier(predicate, quota, report.get("cut"))
    dossier = dossiers.store(
        session,
        signer,
        dossier_id=dossier_id,
        candidate=candidate,
        manifest_digest=str(report["manifest_digest"]),
        predicate=predicate,
        assay_id=assay_id,
    )
    if hold is not None:
        session.add(hold)
        session.flush()
    # The outbox rows commit with the dossier, or not at all (service.app.notify).
    notify.emit(session, candidate, dossier, HookEvent.DECISION, hold)
    if hold is not None:
        notify.emit(session, candidate, dossier, HookEvent.HOLD_OPENED, hold)
    if decision in (Decision.ALLOW, Decision.HOLD):
        dossier = _reopen_if_changed(session, signer, candidate, system, dossier, now)
    if dossier.decision in (Decision.ALLOW, Decision.HOLD) and assay.policy is not None:
        dossier = _reopen_if_policy_changed(session, signer, candidate, system, dossier, now)
    return dossier


def _triggers(
    session: Session, system: System, report: Mapping[str, Any], code: str | None
) -> dict[str, Any]:
    """The trigger hashes the assay ran with (its code artifact's among them), compared with the
    system's last allowed dossier."""
    components = dossiers.system_triggers(system)
    hashes = trigger_hashes(release_hashes(report["component_hashes"], code), components)
    allowed = dossiers.allowed_view(session, dossiers.last_allowed(session, system.id))
    return {
        "components": list(components),
        "hashes": hashes,
        "catalogue_version": report["catalogue_version"],
        **compare_triggers(hashes, str(report["catalogue_version"]), allowed),
    }


def _candidate_ref(session: Session, candidate: Candidate, system: System) -> CandidateRef:
    return CandidateRef(
        str(candidate.id),
        system.name,
        candidate.version,
        candidate.source_revision,
        candidate.submitter,
        actor_view(session, candidate.submitter),
    )


def _stop_conditions(assay: Assay, report: Mapping[str, Any]) -> dict[str, Any]:
    plan = report.get("plan") or {}
    return {
        "declared": assay.limits if assay.limits is not None else plan.get("stop"),
        "stopped": report.get("stopped"),
        "status": assay.status,
        "aborted_at": iso(assay.aborted_at) if assay.aborted_at else None,
    }


def _reopen_if_changed(
    session: Session,
    signer: Signer,
    candidate: Candidate,
    system: System,
    dossier: Dossier,
    now: datetime,
) -> Dossier:
    """A production change reported before this assay finished, that this candidate does not
    carry, still stands: the evidence is about another configuration than the live one."""
    assayed = queries.release_hashes_one(session, candidate)
    changes = dossiers.open_config_changes(session, [system.id]).get(system.id, [])
    pending = unmet(assayed, changes)
    if not pending:
        return dossier
    return reopen(session, signer, candidate, dossier, pending, assayed, now)


def _reopen_if_policy_changed(
    session: Session,
    signer: Signer,
    candidate: Candidate,
    system: System,
    dossier: Dossier,
    now: datetime,
) -> Dossier:
    """A policy set while this assay ran (after it was planned) still stands: the evidence was
    gathered against another bar than the one in force. (Setting a policy takes the system's
    lock too, so one of the two always sees the other.)"""
    tenant = tenants.by_id(session, system.tenant_id)
    force = policies.in_force(session, system.tenant_id, tenant.name if tenant else "", system.name)
    assayed = policy_digest(dossier)
    if assayed == force.digest:
        return dossier
    return reopen_for_policy(session, signer, candidate, dossier, force, assayed, now)


def policy_digest(dossier: Dossier) -> str | None:
    """The digest of the organisation's policy a dossier's assay ran under (None: before
    policies were recorded)."""
    found = dossiers.predicate_of(dossier).get("organisation_policy") or {}
    digest = found.get("digest")
    return str(digest) if digest is not None else None


def reopen_for_policy(
    session: Session,
    signer: Signer,
    candidate: Candidate,
    before: Dossier,
    force: policies.InForce,
    assayed: str | None,
    now: datetime,
) -> Dossier:
    """The next version, `reopened`: the organisation's policy changed since the assay."""
    dossiers.supersede_reviews(session, candidate.id)
    message = (
        f"the organisation's policy changed from {(assayed or 'none recorded')[:12]} to "
        f"{force.digest[:12]} ({force.named()}); the evidence was gathered against another "
        "bar, and the gate stays reopened until an assay under the policy in force passes"
    )
    reopened = derive(
        session,
        signer,
        candidate,
        before,
        change="reopened: the organisation's policy changed",
        decision=REOPENED,
        reasons=[Reason("policy_changed", message).view()],
        now=now,
    )
    notify.emit(session, candidate, reopened, HookEvent.GATE_REOPENED)
    return reopened


# ------------------------------------------------------------------ over unchanged evidence


def derive(
    session: Session,
    signer: Signer,
    candidate: Candidate,
    before: Dossier,
    *,
    change: str,
    decision: str,
    reasons: list[ReasonView],
    now: datetime,
    hold: Hold | None = None,
    waiver: dict[str, Any] | None = None,
) -> Dossier:
    """The next version over unchanged evidence."""
    prev = dossiers.predicate_of(before)
    hold_list: list[dict[str, Any]] = list(prev.get("holds") or [])
    if hold is not None:
        view = dossiers.hold_view(hold)
        hold_list = [h for h in hold_list if h.get("id") != view["id"]] + [view]
    waivers = list(prev.get("waivers") or []) + ([waiver] if waiver else [])
    predicate = successor(
        prev,
        version=before.version + 1,
        previous=before.digest,
        issued_at=iso(now),
        change=change,
        decision=decision,
        reasons=reasons,
        holds=hold_list,
        waivers=waivers,
    )
    return dossiers.store(
        session,
        signer,
        dossier_id=uuid.uuid4(),
        candidate=candidate,
        manifest_digest=candidate.manifest_digest,
        predicate=predicate,
        assay_id=before.assay_id,
    )


def unmet(assayed: Mapping[str, str], changes: Sequence[OpenChange]) -> list[OpenChange]:
    """The open changes a manifest with these component hashes does not carry."""
    return [c for c in changes if assayed.get(c.component) != c.sha256]


def config_changed_reason(change: OpenChange, assayed: str | None) -> ReasonView:
    message = (
        f"production {change.component} changed from {(assayed or 'unknown')[:12]} to "
        f"{change.sha256[:12]}; the evidence no longer describes the live system, and the "
        "gate stays reopened until a candidate with this configuration passes its assay"
    )
    return Reason("config_changed", message).view()


def reopen(
    session: Session,
    signer: Signer,
    candidate: Candidate,
    before: Dossier,
    changes: Sequence[OpenChange],
    assayed: Mapping[str, str],
    now: datetime,
) -> Dossier:
    """The next version, `reopened` by production changes this candidate does not carry."""
    dossiers.supersede_reviews(session, candidate.id)
    what = ", ".join(c.component for c in changes)
    reopened = derive(
        session,
        signer,
        candidate,
        before,
        change=f"reopened: production {what} changed",
        decision=REOPENED,
        reasons=[config_changed_reason(c, assayed.get(c.component)) for c in changes],
        now=now,
    )
    notify.emit(session, candidate, reopened, HookEvent.GATE_REOPENED)
    return reopened
