"""What reopens a system's gate: the trigger components it watches, and production changes
reported against them (each one that moves a trigger away from what a standing dossier was
assayed with signs that dossier's next version, `reopened`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlmodel import Session

from service.app.errors import NotFound
from service.core.dossier import Signer
from service.db import dossier as dossiers
from service.db import queries
from service.db.apikey import Principal, audit
from service.db.models import System


@dataclass(frozen=True)
class ReportChange:
    system: str
    component: str
    sha256: str
    note: str | None = None


def system_of(session: Session, principal: Principal, name: str) -> System:
    system = queries.system_named(session, name, principal.tenant_id)
    if system is None:
        raise NotFound(f"no system {name}", field="system")
    return system


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
) -> tuple[System, dossiers.ConfigChangeOutcome]:
    """Record a production configuration change, reopening every standing dossier it affects."""
    row = system_of(session, principal, command.system)
    outcome = dossiers.report_config_change(
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
