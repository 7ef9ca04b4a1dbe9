"""The shapes a submission arrives in, validated at either edge before a use case runs: the
API's request body and the dashboard's form both become a `CandidateCreate`."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from service.core.faults.catalogue import DOMAINS, catalogue_named
from service.core.faults.plan import MAX_FAMILIES, MAX_MODES, MAX_SEED, StopConditions
from service.core.system.artifact import DIGEST_PATTERN
from service.core.system.manifest import TRIGGER_COMPONENTS
from service.core.system.text import (
    LINE_PATTERN,
    SYSTEM_NAME_MAX,
    SYSTEM_NAME_PATTERN,
    TEXT_PATTERN,
)
from service.core.system.values import INTEGRAL

#: One line of printable text (a version, a revision, a key's name).
Name = Annotated[str, Field(min_length=1, max_length=200, pattern=LINE_PATTERN)]
#: A new system's name (see `service.core.system.text`).
SystemName = Annotated[
    str, Field(min_length=1, max_length=SYSTEM_NAME_MAX, pattern=SYSTEM_NAME_PATTERN)
]
#: Free text: tabs and line breaks, no other control character.
Text = Annotated[str, Field(pattern=TEXT_PATTERN)]


# Documented here, checked by the core (which names the field): the values a plan may select,
# listed when the OpenAPI document is built rather than at import (the catalogue is built data).
def _families_enum(schema: dict[str, Any]) -> None:
    schema["enum"] = [d.value for d in DOMAINS]


def _modes_enum(schema: dict[str, Any]) -> None:
    full = catalogue_named("full")
    schema["enum"] = sorted({f.id for f in full.faults} | {f.mode for f in full.faults})


Component = Literal[
    "model",
    "prompt",
    "policy",
    "tools",
    "retry",
    "state_schema",
    "evidence_routes",
    "orchestration",
    "controls",
    "target",
    "envelope",
    "invariants",
    "code",
]
assert set(get_args(Component)) == set(TRIGGER_COMPONENTS)


class PlanCreate(BaseModel):
    """Which faults to assay and how hard; anything left out takes the engine's default."""

    model_config = ConfigDict(extra="forbid")

    catalogue: Literal["paper", "full"] | None = None
    families: (
        Annotated[
            list[Annotated[str, Field(json_schema_extra=_families_enum)]],
            Field(max_length=MAX_FAMILIES),
        ]
        | None
    ) = Field(default=None, description="fault domains; empty: all")
    modes: (
        Annotated[
            list[Annotated[str, Field(json_schema_extra=_modes_enum)]],
            Field(max_length=MAX_MODES),
        ]
        | None
    ) = Field(default=None, description="fault ids (full catalogue only); empty: all")
    trials: Annotated[int, Field(strict=True, ge=1), INTEGRAL] | None = Field(
        default=None, description="per fault (full catalogue) or in total (paper catalogue)"
    )
    seed: Annotated[int, Field(strict=True, ge=0, le=MAX_SEED), INTEGRAL] | None = None
    stop: StopConditions | None = Field(
        default=None, description="stop conditions; omitted ones take the service defaults"
    )
    baseline: Literal["per_fault", "shared"] | None = Field(
        default=None,
        description="shared: the faults on one tool run trial k on the same task and share "
        "its no-fault baseline, run once; per_fault (the default): each fault's own",
    )


class CandidateCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    system: SystemName | None = Field(default=None, description="defaults to manifest.system")
    version: Name | None = Field(default=None, description="defaults to manifest.version")
    source_revision: Name = Field(description="the commit the candidate was built from")
    manifest: dict[str, Any] = Field(description="the configuration manifest")
    plan: PlanCreate | None = None
    code: str | None = Field(
        default=None,
        pattern=DIGEST_PATTERN,
        description="the candidate's code: the digest (`sha256:…`) `POST /v1/artifacts` "
        "answered for it, an artifact of the submitting tenant's. A manifest that runs code "
        "runs exactly these bytes; the dossier names it as a subject",
    )
