"""Request and response shapes: `CandidateCreate` in, `CandidatePublic` out."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.core.plan import StopConditions
from service.db.models import AssayStatus

Name = Annotated[str, Field(min_length=1, max_length=200)]


class PlanCreate(BaseModel):
    """Which faults to assay and how hard; anything left out takes the engine's default."""

    model_config = ConfigDict(extra="forbid")

    catalogue: Literal["paper", "full"] | None = None
    families: list[str] | None = Field(default=None, description="fault domains; empty: all")
    modes: list[str] | None = Field(default=None, description="fault ids; empty: all")
    trials: Annotated[int, Field(strict=True, ge=1)] | None = Field(
        default=None, description="per fault (full catalogue) or in total (paper catalogue)"
    )
    seed: Annotated[int, Field(strict=True, ge=0, le=2**63 - 1)] | None = None
    stop: StopConditions | None = Field(
        default=None, description="stop conditions; omitted ones take the service defaults"
    )


class CandidateCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    system: Name | None = Field(default=None, description="defaults to manifest.system")
    version: Name | None = Field(default=None, description="defaults to manifest.version")
    source_revision: Name = Field(description="the commit the candidate was built from")
    manifest: dict[str, Any] = Field(description="the configuration manifest")
    plan: PlanCreate | None = None


class Progress(BaseModel):
    shard_count: int
    shards_done: int
    trials_planned: int
    trials_done: int


class CandidatePublic(BaseModel):
    id: uuid.UUID
    system: str
    version: str
    source_revision: str
    manifest_digest: str
    component_hashes: dict[str, str]
    created_at: datetime
    assay_id: uuid.UUID
    status: AssayStatus
    progress: Progress
    decision: Literal["allow", "hold", "block"] | None = None
    reasons: list[dict[str, Any]] = Field(default_factory=list)


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
    reasons: list[dict[str, Any]] = Field(default_factory=list)
    faults: list[FaultPublic]
    report: dict[str, Any] | None = Field(default=None, description="the merged assay report")
    stop_reason: str | None = Field(
        default=None, description="why the assay stopped early (a stop condition or an abort)"
    )


class AbortCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[str, Field(min_length=1, max_length=200)] | None = None


class AbortPublic(BaseModel):
    id: uuid.UUID
    status: AssayStatus
    stop_reason: str | None


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, str]
