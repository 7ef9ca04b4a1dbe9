"""What reopens a system's gate: the trigger components it watches, and production changes
reported against them (each one that moves a trigger away from what a standing dossier was
assayed with signs that dossier's next version, `reopened`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlmodel import Session

from service.app.dossiers import reopen
from service.app.errors import NotFound
from service.core.decision.gate import Decision
from service.core.signing.dossier import Signer
from service.db import dossier as dossiers
from service.db import queries
from service.db.apikey import Principal, audit
from service.db.dossier import OpenChange
from service.db.models import ConfigChange, Dossier, System, utcnow


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
            assayed = queries.component_hashes(session, candidate.manifest_digest)
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
