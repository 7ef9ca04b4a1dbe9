"""The tables. Their shape changes only through Alembic revisions in `migrations/`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

# SQLite only autoincrements an INTEGER primary key (the rowid); PostgreSQL gets a bigint.
BIGINT_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """An instant read back from the database, with its zone: SQLite hands stored instants back
    without one, and every one was written in UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def as_utc_or_none(value: datetime | None) -> datetime | None:
    return as_utc(value) if value is not None else None


class AssayStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    # The engine raised: a bug or an impossible input. Never retried, never decided.
    FAILED = "failed"
    # A stop condition tripped or a reviewer aborted: decided, and never `allow`.
    STOPPED = "stopped"


class ShardStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"


class KeyRole(StrEnum):
    """What an API key may do; its wire form is the value."""

    SUBMITTER = "submitter"  # CI: submit candidates, ask the gate, report config changes
    REVIEWER = "reviewer"  # holds, waivers, rejections, aborts, re-runs
    ADMIN = "admin"  # API keys, systems and trigger configuration


class Tenant(SQLModel, table=True):
    """A team: every system, and through it every candidate, assay, dossier, hold and event,
    belongs to exactly one tenant, and a key sees only its own tenant's."""

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    name: str = Field(max_length=100, unique=True)
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    # Whether an operator allowed this tenant's manifests to name code (python, command, stdio,
    # framework runners): code runs only on the tenant's own workers, inside the OS sandbox.
    code_allowed: bool = Field(
        default=False, sa_column=sa.Column(sa.Boolean(), nullable=False, server_default=sa.false())
    )
    code_changed_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )


class TenantSecret(SQLModel, table=True):
    """A tenant's named secret: encrypted at rest, for its sandboxed code (of `systems`) alone."""

    __tablename__ = "tenant_secret"

    tenant_id: uuid.UUID = Field(foreign_key="tenant.id", primary_key=True)
    name: str = Field(primary_key=True, max_length=64)
    ciphertext: bytes = Field(sa_column=sa.Column(sa.LargeBinary(), nullable=False))
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    updated_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    systems: list[str] | None = Field(default=None, sa_column=sa.Column(sa.JSON()))


class OrgPolicyRow(SQLModel, table=True):
    """One version of an organisation's policy for a tenant (`system` empty) or for one system
    of it (by name: it may be set before the system's first candidate). Rows are only ever
    added: a change is a new version. (The row; the policy is `core.decision.policy.OrgPolicy`.)"""

    __tablename__ = "org_policy"
    __table_args__ = (sa.UniqueConstraint("tenant_id", "system", "version"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    tenant_id: uuid.UUID = Field(foreign_key="tenant.id", index=True)
    system: str = Field(default="", max_length=200)
    version: int
    document: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))
    digest: str = Field(max_length=64)
    # "operator:<name>" for the command line, else the key's actor.
    set_by: str = Field(max_length=200)
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class PersonKind(StrEnum):
    PERSON = "person"
    SERVICE = "service"  # a service account: CI, a deploy bot


class Person(SQLModel, table=True):
    """Who holds keys: a named person or service account of a tenant, recorded when a key is
    minted for them. Separation of duties compares people, not keys (`service.db.apikey`)."""

    __table_args__ = (sa.UniqueConstraint("tenant_id", "name"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    tenant_id: uuid.UUID = Field(foreign_key="tenant.id", index=True)
    name: str = Field(max_length=200)
    kind: str = Field(default=PersonKind.PERSON.value, max_length=16)
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class ApiKey(SQLModel, table=True):
    """An API key: only the SHA-256 of the secret is kept, with a short prefix to recognise it.
    It belongs to one person (or service account) and records the key that minted it."""

    __tablename__ = "api_key"

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    tenant_id: uuid.UUID = Field(foreign_key="tenant.id", index=True)
    person_id: uuid.UUID = Field(foreign_key="person.id", index=True)
    roles: list[str] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))
    name: str | None = Field(default=None, max_length=200)
    prefix: str = Field(max_length=16)
    key_sha256: str = Field(max_length=64, unique=True)
    created_by: uuid.UUID | None = Field(default=None)
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    revoked_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )


class BrowserSession(SQLModel, table=True):
    """A signed-in dashboard session, kept on the server so that it can be ended: signing out
    or revoking the key ends it at once. Only the SHA-256 of the session id is stored."""

    __tablename__ = "browser_session"

    id: str = Field(primary_key=True, max_length=64)
    key_id: uuid.UUID = Field(foreign_key="api_key.id", index=True)
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    expires_at: datetime = Field(
        sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False, index=True)
    )
    ended_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))


class System(SQLModel, table=True):
    """A configured system that releases candidates (one Copperfin refund agent, say). Its name
    is unique within its tenant: two teams may both call theirs `refunds`."""

    __table_args__ = (sa.UniqueConstraint("tenant_id", "name"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    tenant_id: uuid.UUID = Field(foreign_key="tenant.id", index=True)
    name: str = Field(max_length=200)
    # The manifest components whose change reopens the gate; None: the default triggers.
    triggers: list[str] | None = Field(
        default=None, sa_column=sa.Column(sa.JSON(none_as_null=True))
    )
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    # Bumped by the database (triggers of migration 0009) with every write that can change what
    # this system's gate says; the gate read caches its answer under it.
    gate_epoch: int = Field(
        default=0, sa_column=sa.Column(sa.BigInteger(), nullable=False, server_default="0")
    )


class ArtifactRow(SQLModel, table=True):
    """A tenant's code: the bytes as uploaded, by the SHA-256 the service computed over them."""

    __tablename__ = "artifact"

    tenant_id: uuid.UUID = Field(foreign_key="tenant.id", primary_key=True)
    sha256: str = Field(primary_key=True, max_length=64)
    size: int = Field(sa_column=sa.Column(sa.BigInteger(), nullable=False))
    content: bytes = Field(sa_column=sa.Column(sa.LargeBinary(), nullable=False))


class CandidateArtifact(SQLModel, table=True):
    """An artifact a candidate ships (its dossier's subjects), by digest, with its assurance."""

    __tablename__ = "candidate_artifact"

    candidate_id: uuid.UUID = Field(foreign_key="candidate.id", primary_key=True)
    sha256: str = Field(primary_key=True, max_length=64, index=True)
    name: str = Field(max_length=64)
    assurance: str = Field(max_length=16)
    source: str | None = Field(default=None, max_length=32)


class ManifestRow(SQLModel, table=True):
    """A manifest stored once per digest (`service.core.system.manifest.Manifest` parses it)."""

    __tablename__ = "manifest"

    digest: str = Field(primary_key=True, max_length=64)
    document: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class ComponentHash(SQLModel, table=True):
    """Per-component hashes, queryable so a changed `tools` or `policy` can reopen a gate."""

    __tablename__ = "component_hash"

    manifest_digest: str = Field(foreign_key="manifest.digest", primary_key=True, max_length=64)
    component: str = Field(primary_key=True, max_length=64)
    sha256: str = Field(max_length=64, index=True)


class Candidate(SQLModel, table=True):
    # The gate's read: a system's newest candidate, or the one of a given version.
    __table_args__ = (
        sa.Index("ix_candidate_system_id_created_at", "system_id", "created_at", "id"),
        sa.Index("ix_candidate_system_id_version", "system_id", "version"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    system_id: uuid.UUID = Field(foreign_key="system.id", index=True)
    version: str = Field(max_length=200)
    source_revision: str = Field(max_length=200)
    manifest_digest: str = Field(foreign_key="manifest.digest", max_length=64, index=True)
    # The hex SHA-256 of the tenant's code artifact the candidate names (None: none).
    code_sha256: str | None = Field(default=None, max_length=64)
    # The id of the API key that submitted it, and the name of the person it belongs to.
    submitter: str | None = Field(default=None, max_length=200)
    submitted_by: str | None = Field(default=None, max_length=200)
    created_at: datetime = Field(
        default_factory=utcnow,
        sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False, index=True),
    )


class Assay(SQLModel, table=True):
    # A candidate's newest assay, read with every status.
    __table_args__ = (
        sa.Index("ix_assay_candidate_id_created_at", "candidate_id", "created_at", "id"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    candidate_id: uuid.UUID = Field(foreign_key="candidate.id", index=True)
    status: str = Field(default=AssayStatus.QUEUED.value, max_length=16, index=True)
    catalogue: str = Field(max_length=32)
    # The plan exactly as the core normalised it; the seed lives here.
    plan: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))
    shard_count: int
    shards_done: int = 0
    trials_planned: int
    trials_done: int = 0
    decision: str | None = Field(default=None, max_length=16)
    # Kept apart from the report so a status read does not load the whole report.
    reasons: list[dict[str, Any]] | None = Field(
        default=None, sa_column=sa.Column(sa.JSON(none_as_null=True))
    )
    report: dict[str, Any] | None = Field(
        default=None, sa_column=sa.Column(sa.JSON(none_as_null=True))
    )
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
    started_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )
    finished_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )
    # The signed injector credential every shard of this assay runs under.
    credential: str | None = Field(default=None, sa_column=sa.Column(sa.Text()))
    # Declared stop conditions: max_effects, max_unsafe, max_target_errors, deadline (epoch s).
    limits: dict[str, Any] | None = Field(
        default=None, sa_column=sa.Column(sa.JSON(none_as_null=True))
    )
    effects: int = 0
    unsafe: int = 0
    target_errors: int = 0
    stop_reason: str | None = Field(default=None, max_length=300)
    aborted_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )
    # The organisation's policy in force when the assay was planned (its digest, the versions it
    # combines and its document: `service.app.policies.InForce.record`); None before policies.
    policy: dict[str, Any] | None = Field(
        default=None, sa_column=sa.Column(sa.JSON(none_as_null=True))
    )


class AssayShard(SQLModel, table=True):
    """One fault x trial range. (assay_id, shard_index) is the key a redelivered task writes to:
    the result is set only while it is unset, so a shard is counted once however often it runs.

    Until it is done a shard holds a lease: from its dispatch while it waits in the queue, then
    renewed by the worker running it. A shard whose lease lapsed has been lost (its message, or
    its worker); the reconciler of any worker sends it again (see service.db.lease)."""

    __tablename__ = "assay_shard"

    assay_id: uuid.UUID = Field(foreign_key="assay.id", primary_key=True)
    shard_index: int = Field(primary_key=True)
    fault_id: str | None = Field(default=None, max_length=64)
    start: int
    stop: int
    # The core's own description of the shard, handed back to `run_shard` verbatim.
    spec: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))
    status: str = Field(default=ShardStatus.PENDING.value, max_length=16)
    # Starts by a worker (`shard.started` events), and messages sent for it (the first included).
    attempts: int = 0
    dispatches: int = 0
    lease_expires_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )
    trials: int | None = None
    result: dict[str, Any] | None = Field(
        default=None, sa_column=sa.Column(sa.JSON(none_as_null=True))
    )
    worker: str | None = Field(default=None, max_length=200)
    # The hex SHA-256 of the tenant's code this shard ran (an artifact, or an operator's folder).
    code_sha256: str | None = Field(default=None, max_length=64)
    tenant_image: str | None = Field(default=None, max_length=300)  # ASSAYGATE_TENANT_IMAGE
    # The running worker's engine activity, written with its heartbeat: runs done, slots busy,
    # what each busy slot waits for (service.mcp.engine.McpEngine.activity).
    progress: dict[str, Any] | None = Field(
        default=None, sa_column=sa.Column(sa.JSON(none_as_null=True))
    )
    started_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )
    finished_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )


class FaultResultRow(SQLModel, table=True):
    """The merged containment signature of one fault, with its sampled trial evidence."""

    __tablename__ = "fault_result"

    assay_id: uuid.UUID = Field(foreign_key="assay.id", primary_key=True)
    fault_id: str = Field(primary_key=True, max_length=64)
    domain: str | None = Field(default=None, max_length=32)
    trials: int
    signature: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))
    evidence: list[Any] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))


class Event(SQLModel, table=True):
    """Append-only: the database refuses UPDATE on this table (see the initial migration)."""

    id: int | None = Field(
        default=None, sa_column=sa.Column(BIGINT_ID, primary_key=True, autoincrement=True)
    )
    at: datetime = Field(
        default_factory=utcnow,
        sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False, index=True),
    )
    kind: str = Field(max_length=64, index=True)
    # Set on audit events (and readable through the candidate for the rest).
    tenant_id: uuid.UUID | None = Field(default=None, index=True)
    candidate_id: uuid.UUID | None = Field(default=None, index=True)
    assay_id: uuid.UUID | None = Field(default=None, index=True)
    shard_index: int | None = None
    data: dict[str, Any] = Field(
        default_factory=dict, sa_column=sa.Column(sa.JSON(), nullable=False)
    )


class IdempotencyKey(SQLModel, table=True):
    """The first response to a keyed submission, replayed for the same key and body."""

    __tablename__ = "idempotency_key"

    # "<tenant id hex>:<the client's key>": one tenant's keys never replay another's responses.
    key: str = Field(primary_key=True, max_length=240)
    request_sha256: str = Field(max_length=64)
    candidate_id: uuid.UUID = Field(foreign_key="candidate.id")
    status_code: int
    response: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class HoldStatus(StrEnum):
    OPEN = "open"
    WAIVED = "waived"
    REJECTED = "rejected"
    # A later assay of the same candidate replaced the evidence the hold was about.
    SUPERSEDED = "superseded"


class Dossier(SQLModel, table=True):
    """One signed dossier version. Rows are only ever added: a change is a new version."""

    # The last allowed dossier of a system, and the newest version of each of its candidates.
    __table_args__ = (
        sa.UniqueConstraint("candidate_id", "version"),
        sa.Index("ix_dossier_system_id_decision", "system_id", "decision"),
        sa.Index(
            "ix_dossier_system_id_candidate_id_version", "system_id", "candidate_id", "version"
        ),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    candidate_id: uuid.UUID = Field(foreign_key="candidate.id", index=True)
    system_id: uuid.UUID = Field(foreign_key="system.id", index=True)
    assay_id: uuid.UUID | None = Field(default=None, foreign_key="assay.id")
    version: int
    # The exact RFC 8785 bytes that were signed, and the envelope exactly as it was written.
    payload: bytes = Field(sa_column=sa.Column(sa.LargeBinary(), nullable=False))
    envelope: str = Field(sa_column=sa.Column(sa.Text(), nullable=False))
    digest: str = Field(max_length=64, unique=True)
    previous: str | None = Field(default=None, max_length=64)
    decision: str = Field(max_length=16, index=True)
    reasons: list[dict[str, Any]] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))
    change: str = Field(max_length=500)
    # Trigger component -> hash, as recorded in the predicate; the gate compares these.
    triggers: dict[str, str] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))
    catalogue_version: str = Field(max_length=64)
    keyid: str = Field(max_length=64)
    created_at: datetime = Field(
        default_factory=utcnow,
        sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False, index=True),
    )


class Hold(SQLModel, table=True):
    """A dossier that did not allow, awaiting review: waived, rejected, or superseded."""

    # A candidate's reviews (the gate's read) and the lapsed ones (the reconciler's).
    __table_args__ = (
        sa.Index("ix_hold_candidate_id_status", "candidate_id", "status"),
        sa.Index("ix_hold_status_expires_at", "status", "expires_at"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    candidate_id: uuid.UUID = Field(foreign_key="candidate.id", index=True)
    dossier_id: uuid.UUID = Field(foreign_key="dossier.id")
    status: str = Field(default=HoldStatus.OPEN.value, max_length=16, index=True)
    reasons: list[dict[str, Any]] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))
    # The reviewing key's id and the name of the person it belongs to.
    reviewer: str | None = Field(default=None, max_length=200)
    reviewed_by: str | None = Field(default=None, max_length=200)
    review_reason: str | None = Field(default=None, max_length=2000)
    reviewed_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True))
    )
    expires_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True), index=True)
    )
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )


class ConfigChange(SQLModel, table=True):
    """A production configuration change reported for a system (component and its new hash)."""

    # A system's reported changes in order (the gate's read).
    __table_args__ = (sa.Index("ix_config_change_system_id_created_at", "system_id", "created_at"),)

    __tablename__ = "config_change"

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    system_id: uuid.UUID = Field(foreign_key="system.id", index=True)
    component: str = Field(max_length=64)
    sha256: str = Field(max_length=64)
    trigger: bool
    reported_by: str | None = Field(default=None, max_length=200)
    note: str | None = Field(default=None, max_length=2000)
    reopened: int = 0
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False)
    )
