"""The organisation's policy in force (docs/operations.md, "Organisation policy"): the bar a
tenant's systems are held to, read for a submission, a re-run, a finishing assay and the pages,
and admitted against.

The policy in force for a system combines the tenant's newest version and the system's (each
field at the stricter; `service.core.decision.policy.combine`). A tenant or system never given
one is held to the empty policy, which asks nothing. Setting a policy is a change that reopens
gates: `service.app.changes.set_policy`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlmodel import Session

from service.app.errors import NotFound, PolicyRefused
from service.core.decision.policy import (
    EMPTY,
    Effective,
    OrgPolicy,
    combine,
    parse_policy,
    tighten,
)
from service.core.errors import PolicyViolation
from service.core.faults.plan import AssayPlan
from service.core.system.manifest import Envelope, Manifest
from service.db import policy as policies
from service.db import tenant as tenants
from service.db.models import OrgPolicyRow, as_utc

#: The audit action of a new version.
SET = "policy.set"


@dataclass(frozen=True)
class Layer:
    """One version of a policy at one scope: the tenant's own (`system` None) or a system's."""

    system: str | None
    version: int
    policy: OrgPolicy
    digest: str
    set_by: str
    set_at: datetime

    @classmethod
    def of(cls, row: OrgPolicyRow) -> Layer:
        return cls(
            row.system or None,
            row.version,
            parse_policy(row.document),
            row.digest,
            row.set_by,
            as_utc(row.created_at),
        )


@dataclass(frozen=True)
class InForce:
    """The policy a tenant's system is held to now, and the versions it combines (none set:
    the empty policy, version 0)."""

    tenant: str
    system: str | None
    policy: OrgPolicy
    own: Layer | None  # the tenant's
    system_layer: Layer | None

    @property
    def digest(self) -> str:
        return self.policy.digest()

    @property
    def versions(self) -> dict[str, int]:
        return {
            "tenant": self.own.version if self.own else 0,
            "system": self.system_layer.version if self.system_layer else 0,
        }

    def record(self) -> dict[str, Any]:
        """What an assay keeps and its dossier signs: the digest, the versions, the document."""
        return {
            "digest": self.digest,
            "tenant": self.tenant,
            "system": self.system,
            "versions": self.versions,
            "policy": self.policy.document(),
        }

    def named(self) -> str:
        """The policy as a refusal names it."""
        where = f"tenant {self.tenant} (version {self.versions['tenant']})"
        if self.system is not None:
            where += f", system {self.system} (version {self.versions['system']})"
        return f"the organisation's policy for {where}, digest {self.digest[:12]}"


def in_force(session: Session, tenant_id: uuid.UUID, tenant: str, system: str | None) -> InForce:
    """The policy `system` of the tenant is held to now (None: the tenant's own, alone)."""
    own_row = policies.latest(session, tenant_id)
    own = Layer.of(own_row) if own_row is not None else None
    mine = None
    if system is not None:
        row = policies.latest(session, tenant_id, system)
        mine = Layer.of(row) if row is not None else None
    combined = combine(own.policy if own else EMPTY, mine.policy if mine else EMPTY)
    return InForce(tenant, system, combined, own, mine)


def admit(force: InForce, manifest: Manifest, plan: AssayPlan, *, refuse: bool = True) -> Effective:
    """The effective envelope and plan of a submission under the policy in force; PolicyRefused
    naming the submitted field, the policy's field and the policy when it sets one looser."""
    try:
        return tighten(force.policy, manifest.envelope, plan, manifest.target.kind, refuse=refuse)
    except PolicyViolation as exc:
        raise PolicyRefused(
            f"{exc.message} ({exc.policy} of {force.named()}); a manifest and a plan may tighten "
            "the policy, never loosen it",
            field=exc.field,
        ) from None


def admit_rerun(
    force: InForce, manifest: Manifest, plan: AssayPlan, overrides: Sequence[str]
) -> Effective:
    """A re-run's effective envelope and plan: what the candidate was admitted with is raised
    to the policy in force (never refused: the policy may have risen since), and the re-run's
    own plan fields (`overrides`) are refused where they are looser."""
    said = AssayPlan.model_construct(
        _fields_set=set(overrides), **{k: getattr(plan, k) for k in AssayPlan.model_fields}
    )
    admit(force, manifest.model_copy(update={"envelope": Envelope()}), said)
    return admit(force, manifest, plan, refuse=False)


@dataclass(frozen=True)
class PolicyView:
    """A tenant's policies as `assaygate policy show`, `GET /v1/policy` and the pages show them:
    the one in force at the asked scope, and every scope's newest version."""

    force: InForce
    layers: Sequence[Layer]


def show(
    session: Session, tenant_id: uuid.UUID, tenant: str, system: str | None = None
) -> PolicyView:
    rows = policies.newest_of_tenant(session, tenant_id)
    return PolicyView(in_force(session, tenant_id, tenant, system), [Layer.of(r) for r in rows])


def show_by_name(session: Session, tenant: str, system: str | None = None) -> PolicyView:
    """The operator's read: any tenant, by name."""
    row = tenants.by_name(session, tenant)
    if row is None:
        raise NotFound(f"no tenant {tenant}", field="tenant")
    return show(session, row.id, row.name, system)
