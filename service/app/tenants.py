"""Tenants and their code: the execution policy a submission meets, the queue its shards go to,
and the operator's commands that allow or revoke a tenant's code (docs/operations.md,
"Running tenant code").

A manifest whose parts are all remote (URLs the gate calls) is accepted from any tenant and runs
on the shared workers. A manifest that names the tenant's code (`service.core.system.execution`) is
refused unless an operator allowed that tenant (`assaygate tenants allow-code NAME`); its shards
go to the tenant's own queue, which only that tenant's workers consume."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from service.app import operations
from service.app.errors import NotFound
from service.core.system.manifest import Manifest, code_parts, parse_manifest
from service.db import tenant as tenants
from service.db.assay import assay_inputs
from service.db.models import Tenant, as_utc_or_none
from service.settings import Settings

ALLOWED = "tenant.code_allowed"
REVOKED = "tenant.code_revoked"
log = logging.getLogger("assaygate.egress")


def allow_hint(tenant: str) -> str:
    return f"an operator allows it with `assaygate tenants allow-code {tenant}`"


def queue_for(settings: Settings, tenant: str, manifest: Manifest) -> str:
    """Where an assay's shards go: the tenant's own queue when the manifest runs code, else the
    shared queue."""
    return settings.tenant_queue(tenant) if code_parts(manifest) else settings.queue


def queue_of_assay(session: Session, settings: Settings, assay_id: uuid.UUID) -> str:
    """The queue an existing assay's shards belong to (the shared queue for an unknown one)."""
    inputs = assay_inputs(session, assay_id)
    if inputs is None:
        return settings.queue
    return queue_for(settings, inputs.tenant, parse_manifest(inputs.manifest))


@dataclass(frozen=True)
class TenantView:
    name: str
    code_allowed: bool
    code_changed_at: datetime | None
    # The queue its code shards go to (consumed only by its own workers).
    code_queue: str


def view(settings: Settings, row: Tenant) -> TenantView:
    changed = as_utc_or_none(row.code_changed_at)
    return TenantView(row.name, row.code_allowed, changed, settings.tenant_queue(row.name))


def of(session: Session, settings: Settings, tenant_id: uuid.UUID) -> TenantView:
    """The caller's own tenant."""
    row = tenants.by_id(session, tenant_id)
    if row is None:
        raise NotFound(f"no tenant {tenant_id}", field="tenant")
    return view(settings, row)


def listing(session: Session, settings: Settings) -> Sequence[TenantView]:
    """Every tenant, by name (operators)."""
    return [view(settings, row) for row in tenants.every(session)]


@dataclass(frozen=True)
class SetCode:
    """An operator allows (or revokes) a tenant's code; `operator`: who, for the audit."""

    tenant: str
    allowed: bool
    operator: str


def set_code(session: Session, settings: Settings, command: SetCode) -> TenantView:
    """Allow or revoke; audited and `code_changed_at` set when it changes anything (repeating
    it changes nothing). A revocation refuses new submissions at once, and the tenant's workers
    refuse its queued code shards (the assay fails with the reason)."""
    row = tenants.by_name(session, command.tenant)
    if row is None:
        raise NotFound(f"no tenant {command.tenant}", field="tenant")
    if tenants.set_code_allowed(session, row, command.allowed):
        tenants.audit_operator(
            session,
            row,
            command.operator,
            ALLOWED if command.allowed else REVOKED,
            code_allowed=command.allowed,
        )
    session.commit()
    session.refresh(row)
    return view(settings, row)


def shared_loopback(settings: Settings, code_tenants: Sequence[str]) -> str | None:
    """The warning an operator needs when loopback ports are allowed to every tenant alike
    (`ASSAYGATE_EGRESS_ALLOW_LOOPBACK`, or an embedded deployment's default) while some tenant
    may run code; None otherwise. Not a refusal: the gate cannot tell whether tenants' workers
    share a host (a host of one tenant's workers is safe), so the operator is told what to set."""
    loopback, ports = settings.egress_loopback_of(None)
    if not loopback or not code_tenants:
        return None
    reach = (
        "loopback ports " + ",".join(f"{lo}-{hi}" if hi != lo else f"{lo}" for lo, hi in ports)
        if ports
        else "every loopback port"
    )
    named = ", ".join(code_tenants[:5]) + (
        f" and {len(code_tenants) - 5} more" if len(code_tenants) > 5 else ""
    )
    return (
        f"egress reaches {reach} for every tenant alike while tenants may run code ({named}): "
        "where tenants' workers share a host, one tenant's code and webhooks reach another's "
        "local services there; name each tenant's own ports with "
        'ASSAYGATE_EGRESS_LOOPBACK_TENANTS instead (docs/operations.md, "Egress policy")'
    )


def say_shared_loopback(engine: Engine, settings: Settings) -> None:
    """At a worker's start: `shared_loopback`'s warning, once, if it applies (nothing when the
    database does not answer or is not migrated yet: the worker's readiness says so)."""
    try:
        code_tenants = operations.code_tenants(engine) or []
    except SQLAlchemyError:
        return
    warning = shared_loopback(settings, code_tenants)
    if warning is not None:
        log.warning(warning)
