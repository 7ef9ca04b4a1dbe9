"""What reopens a system's gate: the trigger components it watches, production changes reported
against them (each one that moves a trigger away from what a standing dossier was assayed with
signs that dossier's next version, `reopened`), and a new version of the organisation's policy
(each standing dossier whose assay ran under another policy than the one now in force)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlmodel import Session

from service.app import policies
from service.app.dossiers import policy_digest, reopen, reopen_for_policy
from service.app.errors import Conflict, FieldInvalid, NotFound, PolicyLowered
from service.core.decision.gate import Decision
from service.core.decision.policy import (
    EMPTY,
    OrgPolicy,
    combine,
    in_force_value,
    loosened,
    parse_policy,
    sets,
)
from service.core.errors import AssaygateError
from service.core.signing.dossier import Signer
from service.core.system.text import check_system_name
from service.db import dossier as dossiers
from service.db import policy as policy_rows
from service.db import queries
from service.db import tenant as tenants
from service.db.apikey import Principal, audit
from service.db.dossier import OpenChange
from service.db.models import ConfigChange, Dossier, System, Tenant, utcnow


@dataclass(frozen=True)
class ReportChange:
    system: str
    component: str
    sha256: str
    note: str | None = None


def system_of(session: Session, principal: Principal, name: str) -> System:
    system = queries.system_named(session, name, principal.tenant_id)
    if system is None:
        raise no_system(name)
    return system


def triggers_of(system: System) -> tuple[str, ...]:
    """The components whose change reopens the system's gate (its own, else the default)."""
    return dossiers.system_triggers(system)


def no_system(name: str) -> NotFound:
    """The caller's tenant has no system of this name (another tenant's reads the same)."""
    return NotFound(f"no system {name}", field="system")


def set_triggers(
    session: Session, principal: Principal, system: str, components: Sequence[str]
) -> System:
    """Name the trigger components; applies to dossiers issued and changes reported from now."""
    row = dossiers.set_triggers(session, system, components, tenant_id=principal.tenant_id)
    audit(
        session,
        principal,
        "system.set_triggers",
        f"system:{system}",
        components=sorted(set(components)),
    )
    session.commit()
    return row


def report(
    session: Session, signer: Signer, principal: Principal, command: ReportChange
) -> tuple[System, ConfigChangeOutcome]:
    """Record a production configuration change, reopening every standing dossier it affects."""
    row = system_of(session, principal, command.system)
    outcome = report_config_change(
        session,
        signer,
        row,
        component=command.component,
        sha256=command.sha256,
        reported_by=principal.actor,
        note=command.note,
    )
    audit(
        session,
        principal,
        "system.config_change",
        f"system:{command.system}",
        component=command.component,
        sha256=command.sha256,
        reopened=len(outcome.reopened),
    )
    session.commit()
    return row, outcome


@dataclass
class ConfigChangeOutcome:
    change: ConfigChange
    trigger: bool
    reopened: list[Dossier] = field(default_factory=list)


def report_config_change(
    session: Session,
    signer: Signer,
    system: System,
    *,
    component: str,
    sha256: str,
    reported_by: str | None,
    note: str | None,
    now: datetime | None = None,
) -> ConfigChangeOutcome:
    """Record a production change; when it moves a trigger component away from what a standing
    dossier was assayed with, that dossier's next version reopens the gate and says why. The
    change stays open until a candidate carrying `sha256` passes (`open_config_changes`). The
    caller commits."""
    now = now or utcnow()
    dossiers.lock_system(session, system.id)
    trigger = component in dossiers.system_triggers(system)
    reopened: list[Dossier] = []
    if trigger:
        change = OpenChange(component, sha256, now, reported_by)
        for dossier in dossiers.standing(session, system.id):
            candidate = dossiers.lock(session, dossier.candidate_id)
            before = dossiers.latest(session, candidate.id)
            if before is None or before.decision not in (Decision.ALLOW, Decision.HOLD):
                continue
            assayed = queries.release_hashes_one(session, candidate)
            if assayed.get(component) == sha256:
                continue
            reopened.append(reopen(session, signer, candidate, before, [change], assayed, now))
    recorded = dossiers.record_config_change(
        session,
        system,
        component=component,
        sha256=sha256,
        trigger=trigger,
        reported_by=reported_by,
        note=note,
        now=now,
        reopened=reopened,
    )
    return ConfigChangeOutcome(recorded, trigger, reopened)


# ------------------------------------------------------------------ the organisation's policy


@dataclass(frozen=True)
class SetPolicy:
    """A new version of a tenant's policy (`system` None) or of one system's. `by`: who, as the
    audit records them (an operator's name, or a key's actor)."""

    tenant: str
    system: str | None
    document: Mapping[str, Any]
    by: str


@dataclass(frozen=True)
class PolicySet:
    """`changed`: a new version was written (the same policy again writes nothing); `reopened`:
    the dossiers whose gate it reopened."""

    view: policies.PolicyView
    changed: bool
    reopened: int = 0


def set_policy(session: Session, signer: Signer, command: SetPolicy) -> PolicySet:
    """An operator's change (`assaygate policy set`): any policy, lower or higher."""
    tenant = tenants.by_name(session, command.tenant)
    if tenant is None:
        raise NotFound(f"no tenant {command.tenant}", field="tenant")
    policy = _parsed(command)
    return _write(session, signer, tenant, command, policy, operator=True)


def raise_policy(
    session: Session,
    signer: Signer,
    principal: Principal,
    system: str | None,
    document: Mapping[str, Any],
) -> PolicySet:
    """A tenant admin's change (`PUT /v1/policy`): the tenant's bar may be raised, never
    lowered; lowering is an operator's (`assaygate policy set`)."""
    command = SetPolicy(principal.tenant, system, document, principal.actor)
    tenant = tenants.by_id(session, principal.tenant_id)
    if tenant is None:
        raise NotFound(f"no tenant {principal.tenant}", field="tenant")
    policy = _parsed(command)
    before = policy_rows.latest(session, tenant.id, system or policy_rows.TENANT)
    old = parse_policy(before.document) if before else EMPTY
    lower = loosened(policy, old)
    if lower is not None:
        # The field is the error's own `field`, named once (the CLI prints `field: message`).
        was = json.dumps(in_force_value(old, lower))
        if sets(policy, lower):
            why = f"looser than the policy in force ({was})"
        else:
            # The body replaces the whole policy: a field it leaves out is dropped, and a
            # dropped requirement is a lowered one (issue 47: the message named it and no more).
            why = (
                f"left out of the body, and the body replaces the whole policy: leaving out a "
                f"field the policy in force sets ({was}) lowers it; send the whole policy "
                "(GET /v1/policy) with your change"
            )
        raise PolicyLowered(
            f"{why}. A tenant's admin may raise the bar, never lower it; an operator lowers it "
            "with `assaygate policy set`",
            field=lower,
        )
    return _write(session, signer, tenant, command, policy, principal=principal)


def _parsed(command: SetPolicy) -> OrgPolicy:
    try:
        if command.system is not None:
            check_system_name(command.system)
        return parse_policy(dict(command.document))
    except AssaygateError as exc:
        raise FieldInvalid(exc.message, field=exc.field) from None


def _write(
    session: Session,
    signer: Signer,
    tenant: Tenant,
    command: SetPolicy,
    policy: OrgPolicy,
    *,
    operator: bool = False,
    principal: Principal | None = None,
) -> PolicySet:
    """Write the version, audit it and reopen what it touches, in one transaction."""
    policy_rows.lock_tenant(session, tenant.id)
    scope = command.system or policy_rows.TENANT
    before = policy_rows.latest(session, tenant.id, scope)
    if before is not None and before.digest == policy.digest():
        session.rollback()
        return PolicySet(policies.show(session, tenant.id, tenant.name, command.system), False)
    _check_combines(session, tenant, command.system, policy)
    row = policy_rows.add(
        session,
        tenant.id,
        scope,
        document=policy.document(),
        digest=policy.digest(),
        set_by=f"operator:{command.by}" if operator else command.by,
    )
    reopened = _reopen_for(session, signer, tenant, command.system)
    data: dict[str, Any] = {
        "system": command.system,
        "version": row.version,
        "digest": row.digest,
        "policy": row.document,
        "reopened": reopened,
    }
    target = f"policy:{tenant.name}" + (f"/{command.system}" if command.system else "")
    if principal is not None:
        audit(session, principal, policies.SET, target, **data)
    else:
        tenants.audit_operator(session, tenant, command.by, policies.SET, **data)
    session.commit()
    return PolicySet(policies.show(session, tenant.id, tenant.name, command.system), True, reopened)


def _check_combines(
    session: Session, tenant: Tenant, system: str | None, policy: OrgPolicy
) -> None:
    """Refuse a version that leaves some system of the tenant no plan rule to run (a conflict
    with the other scope's policy, not a bad document)."""
    if system is not None:
        own = policy_rows.latest(session, tenant.id)
        others = [("", parse_policy(own.document))] if own else []
    else:
        others = [
            (row.system, parse_policy(row.document))
            for row in policy_rows.newest_of_tenant(session, tenant.id)
            if row.system
        ]
    for name, other in others:
        try:
            combine(other, policy)
        except AssaygateError as exc:
            raise Conflict(
                f"{exc.message} (with the policy of {f'system {name}' if name else 'the tenant'})",
                field=exc.field,
            ) from None


def _reopen_for(session: Session, signer: Signer, tenant: Tenant, system: str | None) -> int:
    """Reopen every standing dossier of the systems the new version touches whose assay ran
    under another policy than the one now in force. The caller commits."""
    now = utcnow()
    count = 0
    for row in policy_rows.systems_of(session, tenant.id, system):
        dossiers.lock_system(session, row.id)
        force = policies.in_force(session, tenant.id, tenant.name, row.name)
        for dossier in dossiers.standing(session, row.id):
            assayed = policy_digest(dossier)
            if assayed == force.digest:
                continue
            candidate = dossiers.lock(session, dossier.candidate_id)
            before = dossiers.latest(session, candidate.id)
            if before is None or before.decision not in (Decision.ALLOW, Decision.HOLD):
                continue
            reopen_for_policy(session, signer, candidate, before, force, assayed, now)
            count += 1
    return count
