"""Request and response shapes: `CandidateCreate` in, `CandidatePublic` out."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.app.records import AssayStatus
from service.app.shapes import (
    CandidateCreate,
    Component,
    Name,
    PlanCreate,
    SystemName,
    Text,
)
from service.core.decision.gate import ReasonView
from service.core.system.manifest import TRIGGER_COMPONENTS

__all__ = [
    "CandidateCreate",
    "Component",
    "Name",
    "PlanCreate",
    "SystemName",
    "Text",
]


class Progress(BaseModel):
    shard_count: int
    shards_done: int
    trials_planned: int
    trials_done: int
    # From the workers' heartbeats (mcp targets): the team's agent runs done so far and the
    # gate's own (the sensitivity pair's naive agent), slots running a trial now, and what those
    # slots wait for ("agent", "reset", "probe", "grade", "lock").
    runs_done: int = 0
    gate_runs_done: int = 0
    slots_busy: int = 0
    waiting: dict[str, int] = Field(default_factory=dict)


GateWord = Literal["allow", "hold", "block", "reopened"]
GateBasis = Literal[
    "assay",
    "waived",
    "rejected",
    "expired",
    "config_changed",
    "policy_changed",
    "trigger_changed",
    "pending",
    "failed",
    "assurance",
]


class GateState(BaseModel):
    """The gate's word for a candidate now: the standing dossier version (the assay's decision,
    a waiver, a rejection, a lapsed review, a reopened gate), never the assay's first answer."""

    decision: GateWord
    basis: GateBasis = Field(description="what the word rests on")
    reasons: list[ReasonView]
    dossier_version: int | None = Field(description="the signed version it rests on")
    hold_id: uuid.UUID | None = Field(default=None, description="the open hold, if any")
    until: datetime | None = Field(
        default=None, description="when the waiver or rejection it rests on lapses"
    )
    waived: list[ReasonView] = Field(
        default_factory=list,
        description="under a waiver in force: the held reasons it lifted (else empty)",
    )


class ArtifactPublic(BaseModel):
    """A stored artifact: the digest the service computed over the bytes it received."""

    digest: str = Field(
        description="`sha256:` and the SHA-256 of the bytes, as the service hashed them"
    )
    size: int = Field(description="bytes")
    created: bool = Field(description="this upload stored them (false: the same bytes were there)")


class SubjectPublic(BaseModel):
    """An artifact a candidate ships, as its dossier names it (docs/dossier.md, "Subjects")."""

    name: str
    digest: str = Field(description="`sha256:…`")
    assurance: Literal["executed", "reported", "declared"] = Field(
        description="executed: the gate ran these bytes, checked by digest; declared: the "
        "candidate names them, nothing the gate ran vouches for them"
    )
    source: str | None = Field(
        default=None, description="artifact (uploaded) or operator_dir (a worker's folder)"
    )


class ArtifactAssurancePublic(BaseModel):
    """What an answer asked by artifact rests on (docs/evidence.md, "An allow names the code
    that ran")."""

    digest: str = Field(description="`sha256:…`, the artifact asked about")
    assurance: Literal["executed", "reported", "declared"] | None = Field(
        description="its assurance in the candidate's dossier (the strongest of its subjects "
        "with this digest); null: no subject names it yet (its assay has not finished)"
    )
    required: Literal["executed", "reported", "declared"] = Field(
        description="the weakest assurance the organisation's policy the dossier was signed "
        "under accepts: `executed` unless the policy's `accept_assurance` says otherwise"
    )
    met: bool = Field(description="the assurance is `required` or stronger")
    accepted_by_policy: bool = Field(
        description="met only because the policy accepts an assurance weaker than `executed`: "
        "an allow on it says so (`assaygate gate` exits 4)"
    )
    policy: str | None = Field(
        description="the digest of the policy read (`organisation_policy.digest` of the "
        "dossier); null before a dossier, or for one signed before policies were recorded"
    )


class CandidatePublic(BaseModel):
    id: uuid.UUID
    system: str
    version: str
    source_revision: str
    code: str | None = Field(
        default=None, description="the code artifact the candidate names (`sha256:…`)"
    )
    manifest_digest: str
    component_hashes: dict[str, str]
    created_at: datetime
    submitted_by: str | None = Field(
        default=None, description="the person or service account whose key submitted it"
    )
    assay_id: uuid.UUID
    status: AssayStatus
    progress: Progress
    decision: Literal["allow", "hold", "block"] | None = Field(
        default=None,
        description="the assay's own decision; what the deploy gate says now is `gate`",
    )
    reasons: list[ReasonView] = Field(default_factory=list, description="the assay's own reasons")
    gate: GateState = Field(description="what the deploy gate says now about this candidate")
    error: str | None = Field(
        default=None,
        description="why a `failed` assay could not be decided: an engine error, or a shard "
        "that did not finish after its attempts",
    )


class CandidatePage(BaseModel):
    items: list[CandidatePublic]
    next_cursor: str | None = Field(description="pass as `cursor` for the next (older) page")


class SystemPublic(BaseModel):
    id: uuid.UUID
    name: str
    created_at: datetime
    candidates: int
    latest: CandidatePublic | None


class SystemList(BaseModel):
    items: list[SystemPublic]


class FaultPublic(BaseModel):
    id: str | None
    progress: Progress
    final: bool = Field(description="false while shards of this fault are still running")
    signature: dict[str, Any] | None = Field(
        default=None, description="containment signature over the trials done so far"
    )


class AssayPublic(BaseModel):
    id: uuid.UUID
    candidate_id: uuid.UUID
    status: AssayStatus
    catalogue: str
    plan: dict[str, Any]
    progress: Progress
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    decision: Literal["allow", "hold", "block"] | None = None
    reasons: list[ReasonView] = Field(default_factory=list)
    faults: list[FaultPublic]
    report: dict[str, Any] | None = Field(default=None, description="the merged assay report")
    stop_reason: str | None = Field(
        default=None, description="why the assay stopped early (a stop condition or an abort)"
    )


class AbortCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[Text, Field(min_length=1, max_length=200)] | None = None


class AbortPublic(BaseModel):
    id: uuid.UUID
    status: AssayStatus
    stop_reason: str | None


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, str]


# ------------------------------------------------------------------------------------ dossiers

Decision = GateWord


class KeyValue(BaseModel):
    public: str = Field(description="raw Ed25519 public key, hex")


class KeyPublic(BaseModel):
    keyid: str = Field(description="SHA-256 of the key's canonical JSON (securesystemslib)")
    keytype: Literal["ed25519"] = "ed25519"
    scheme: Literal["ed25519"] = "ed25519"
    keyval: KeyValue
    not_before: str | None = Field(description="when the key became active")
    not_after: str | None = Field(description="when it was retired; null while active")


class KeyList(BaseModel):
    keys: list[KeyPublic]


class DossierRef(BaseModel):
    id: uuid.UUID
    candidate_id: uuid.UUID
    version: int
    digest: str = Field(description="SHA-256 of the signed payload bytes")
    previous: str | None = Field(description="digest of the version before (the hash chain)")
    decision: Decision
    reasons: list[ReasonView]
    change: str = Field(description="why this version exists")
    keyid: str
    created_at: datetime


class DossierPublic(DossierRef):
    envelope: dict[str, Any] = Field(description="the DSSE envelope exactly as it was signed")


class DossierList(BaseModel):
    items: list[DossierRef]


class RerunCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    plan: PlanCreate | None = Field(
        default=None, description="changes to the candidate's plan (a new seed, more trials)"
    )


class GatePublic(BaseModel):
    system: str
    version: str
    candidate_id: uuid.UUID
    decision: Decision
    reasons: list[ReasonView]
    dossier: DossierRef | None = Field(description="the dossier the answer rests on")
    triggers: dict[str, Any] = Field(
        description=(
            "trigger hashes, compared with the last allowed dossier of another candidate: "
            "`changed` names the trigger components that differ, `components_changed` every "
            "component (docs/dossier.md)"
        )
    )
    hold_id: uuid.UUID | None = None
    basis: GateBasis = Field(description="what the answer rests on")
    until: datetime | None = Field(
        default=None, description="when the waiver or rejection it rests on lapses"
    )
    waived: list[ReasonView] = Field(
        default_factory=list,
        description="under a waiver in force (`basis: waived`): the held reasons it lifted, "
        "which `reasons` (the signed version's: the waiver) no longer lists; else empty",
    )
    artifacts: list[SubjectPublic] = Field(
        default_factory=list,
        description="what the candidate ships, by digest, with its assurance (its dossier's "
        "subjects beside the manifest; `declared` before its assay ran the code)",
    )
    artifact_assurance: ArtifactAssurancePublic | None = Field(
        default=None,
        description="asked by `artifact`: its assurance and what the policy accepts; an "
        "`allow` needs `executed` unless the policy explicitly accepts weaker, and then "
        "`accepted_by_policy` is true (null: asked by version)",
    )


class TriggersUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    components: list[Component] = Field(
        min_length=1,
        max_length=len(TRIGGER_COMPONENTS) * 2,
        description="manifest components, and `code` (the candidate's code artifact)",
    )


class TriggersPublic(BaseModel):
    system: str
    components: list[str]
    default: bool = Field(description="true when the system uses the default triggers")


class ConfigChangeCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    component: Component = Field(
        description="the manifest component that changed in production, or `code`: the code "
        "artifact deployed"
    )
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] = Field(
        description="its new hash (SHA-256 over its RFC 8785 canonical JSON; for `code`, the "
        "artifact's SHA-256, the hex of its sha256: digest)"
    )
    note: Annotated[Text, Field(max_length=2000)] | None = None


class ConfigChangePublic(BaseModel):
    id: uuid.UUID
    system: str
    component: str
    sha256: str
    trigger: bool = Field(description="whether the component is one of the system's triggers")
    reopened: list[DossierRef] = Field(description="the dossier versions that reopened the gate")


class ReviewCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[Text, Field(min_length=1, max_length=2000)]
    expires_at: datetime | None = Field(
        default=None,
        description="when the rejection lapses and the hold reopens (in the future: an expiry "
        "already past is `409 expiry_passed`)",
    )


class WaiverCreate(ReviewCreate):
    expires_at: datetime = Field(
        description="required: when the waiver lapses and the hold reopens (in the future: an "
        "expiry already past is `409 expiry_passed`)"
    )


class HoldPublic(BaseModel):
    id: uuid.UUID
    candidate_id: uuid.UUID
    system: str = Field(description="the candidate's system")
    version: str = Field(description="the candidate's version")
    dossier_id: uuid.UUID = Field(description="the dossier version that opened the hold")
    status: Literal["open", "waived", "rejected", "superseded"]
    reasons: list[ReasonView]
    reviewer: str | None = Field(description="the id of the key that reviewed it")
    reviewed_by: str | None = Field(description="the person whose key reviewed it")
    review_reason: str | None
    reviewed_at: datetime | None
    expires_at: datetime | None
    created_at: datetime


class HoldList(BaseModel):
    items: list[HoldPublic]


class ReviewPublic(BaseModel):
    hold: HoldPublic
    dossier: DossierRef


class EventPublic(BaseModel):
    id: int
    at: datetime
    kind: str
    candidate_id: uuid.UUID | None
    assay_id: uuid.UUID | None
    shard_index: int | None
    data: dict[str, Any]


class EventPage(BaseModel):
    items: list[EventPublic]
    next_before: int | None = Field(description="pass as `before` for the next (older) page")
