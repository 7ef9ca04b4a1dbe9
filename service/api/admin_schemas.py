"""Request and response shapes of a tenant's administration: people, keys, secrets, the tenant
and its organisation policy (split from `schemas.py`, which holds the release's own)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.app.records import KeyRole
from service.app.shapes import Name, SystemName
from service.core.system.secret import MAX_VALUE_BYTES


class PersonCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name = Field(description="e.g. `Ada Lovelace`, or `ci` for a service account")
    kind: Literal["person", "service"] = Field(
        default="person", description="a person, or a service account (CI, a deploy bot)"
    )


class ApiKeyCreate(BaseModel):
    """A key for the caller's own tenant (new tenants come from `assaygate keys create`)."""

    model_config = ConfigDict(extra="forbid")

    roles: list[KeyRole] = Field(
        min_length=1, max_length=3, description="submitter, reviewer, admin"
    )
    name: Name | None = Field(default=None, description="what the key is for, e.g. `ci-main`")
    person: PersonCreate | None = Field(
        default=None,
        description="who holds the key (created in the tenant if new; an existing name must "
        "keep its kind, else 409); default: the person of the admin key minting it",
    )


class ApiKeyPublic(BaseModel):
    id: uuid.UUID
    tenant: str
    roles: list[KeyRole]
    name: str | None
    person: str = Field(description="the person or service account the key belongs to")
    kind: Literal["person", "service"]
    minted_by: str | None = Field(
        description="the person whose key minted this one; null: an operator on the command line"
    )
    created_at: datetime
    revoked_at: datetime | None


class ApiKeyCreated(ApiKeyPublic):
    key: str = Field(description="the key itself: shown this once, stored only as its SHA-256")


class ApiKeyList(BaseModel):
    items: list[ApiKeyPublic]


class SecretPut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: str = Field(
        min_length=1,
        max_length=MAX_VALUE_BYTES,
        repr=False,
        description=f"the secret's value: text of at most {MAX_VALUE_BYTES} bytes (UTF-8); "
        "stored encrypted, never shown again",
        json_schema_extra={"writeOnly": True},
    )
    systems: list[SystemName] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="the systems whose manifests may name it; left out: every system",
    )


class SecretPublic(BaseModel):
    """A secret as the API shows it: its name and when it was last written, never its value."""

    name: str
    updated_at: datetime
    systems: list[str] | None = None


class SecretList(BaseModel):
    items: list[SecretPublic]


class TenantPublic(BaseModel):
    """The caller's tenant, and whether an operator allowed it to run code on this service."""

    name: str
    code_allowed: bool = Field(
        description="whether manifests may name code (python, command, stdio, framework "
        "runners); an operator allows it with `assaygate tenants allow-code NAME`"
    )
    code_changed_at: datetime | None = Field(
        description="when an operator last allowed or revoked the tenant's code"
    )
    code_queue: str = Field(
        description="the queue the tenant's code shards go to, consumed only by its own workers"
    )


class PolicyLayerPublic(BaseModel):
    """One scope's newest policy version: the tenant's own (`system` null) or one system's."""

    system: str | None = Field(description="null: the tenant's own policy")
    version: int
    digest: str = Field(description="SHA-256 over the policy's RFC 8785 JSON")
    policy: dict[str, Any] = Field(description="what it requires (docs/operations.md)")
    set_by: str = Field(description="`operator:<name>`, or the id of the admin key that raised it")
    set_at: datetime


class PolicyPublic(BaseModel):
    """The organisation's policy in force for the tenant (or one of its systems), and each
    scope's newest version. A manifest's envelope and a plan may tighten it, never loosen it."""

    tenant: str
    system: str | None = Field(description="the system asked about; null: the tenant's own")
    digest: str = Field(
        description="of the policy in force; signed into every dossier as "
        "`organisation_policy.digest`, and a change of it reopens the gate"
    )
    versions: dict[str, int] = Field(
        description="the tenant's and the system's versions it combines (0: never set)"
    )
    policy: dict[str, Any] = Field(
        description="in force: the tenant's and the system's combined, each field the stricter"
    )
    layers: list[PolicyLayerPublic]


class PolicySetPublic(PolicyPublic):
    changed: bool = Field(description="false: the same policy again, nothing written")
    reopened: int = Field(description="dossiers whose gate the change reopened")
