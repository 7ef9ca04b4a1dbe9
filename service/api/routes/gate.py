"""The deploy gate, and what reopens it: change triggers and reported configuration changes.

`GET /v1/gate/{system}` answers `allow`, `hold`, `block` or `reopened` for a version (default:
the newest candidate) with every reason and the dossier the answer rests on. Reading writes
nothing: a waiver that has expired reads as `hold` at once, and the reconciler signs the version
that records its lapse. An answer is computed once per epoch of its system (`gate.AnswerCache`):
a repeated read is the one indexed lookup of the system and its epoch, sent from the event loop
(`service.db.hotreads`) so that a cached answer never waits for a worker thread. A cached answer
to a plain bearer-key read is served before routing (`service.api.cached_gate`); everything
else, refusals included, is answered here.
"""

from __future__ import annotations

import contextlib
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from service.api.errors import ERROR_RESPONSES
from service.api.present import dossier_ref, subject_public
from service.api.schemas import (
    ArtifactAssurancePublic,
    ConfigChangeCreate,
    ConfigChangePublic,
    GatePublic,
    TriggersPublic,
    TriggersUpdate,
)
from service.app import artifacts, changes, gate
from service.app.errors import FieldInvalid
from service.app.records import Principal, System, Unavailable, as_utc_or_none, utcnow
from service.core.system.artifact import DIGEST_PATTERN
from service.http.access import system_looked_up
from service.http.deps import (
    GateRead,
    GateReadDep,
    KickWebhooks,
    PrincipalDep,
    SessionDep,
    SignerDep,
)

router = APIRouter(tags=["gate"])

GATE_PATH = "/v1/gate/{system}"
#: The same read with the system as a query parameter (`?system=NAME`).
GATE_QUERY_PATH = "/v1/gate"
#: The longest system name or version a route here takes (the early answer holds to it too).
MAX_TEXT = 200
SystemName = Annotated[str, Path(min_length=1, max_length=MAX_TEXT)]


ArtifactQuery = Annotated[
    str | None,
    Query(
        pattern=DIGEST_PATTERN,
        description="ask about the newest candidate that ships this artifact (`sha256:…`, "
        "the digest `POST /v1/artifacts` answered): a subject of its dossier, or its code "
        "while its assay runs. With `version`, that version's candidate must ship it. `allow` "
        "only for code the gate ran (`executed`), unless the organisation's policy accepts a "
        "weaker assurance (`artifact_assurance` says which); else `hold`, reason `assurance`",
    ),
]
VersionQuery = Annotated[str | None, Query(min_length=1, max_length=MAX_TEXT)]


@router.get(
    GATE_PATH,
    response_model=GatePublic,
    responses={k: ERROR_RESPONSES[k] for k in (404, 503)},
)
async def get_gate(
    request: Request,
    system: SystemName,
    state: GateReadDep,
    principal: PrincipalDep,
    version: VersionQuery = None,
    artifact: ArtifactQuery = None,
) -> Response:
    """May this version (or this artifact) ship? `allow` only on a signed dossier that allows
    it, never while a reported production change this candidate does not carry is open, and, for
    an artifact, only for code the gate ran unless the organisation's policy accepts weaker."""
    return await _answer(request, system, state, principal, version, artifact)


@router.get(
    GATE_QUERY_PATH,
    response_model=GatePublic,
    responses={k: ERROR_RESPONSES[k] for k in (404, 422, 503)},
)
async def get_gate_by_query(
    request: Request,
    state: GateReadDep,
    principal: PrincipalDep,
    system: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_TEXT,
            description="the system; omitted, `artifact` is required and names it: the "
            "system of the newest candidate that ships the artifact",
        ),
    ] = None,
    version: VersionQuery = None,
    artifact: ArtifactQuery = None,
) -> Response:
    """The same answer as `GET /v1/gate/{system}`, with the system as a query parameter: the
    shape an admission controller or a rollout analysis fills in (`?system=…&artifact=…`). Asked
    by `artifact` alone, it answers for the system whose newest candidate ships it."""
    if system is None:
        if artifact is None:
            raise FieldInvalid("name the system, or ask by `artifact`", field="system")
        system = await run_in_threadpool(
            artifacts.system_shipping, state.engine, principal, artifact
        )
    return await _answer(request, system, state, principal, version, artifact)


async def _answer(
    request: Request,
    system: str,
    state: GateRead,
    principal: Principal,
    version: str | None,
    artifact: str | None,
) -> Response:
    engine, metrics, answers, reads = state.engine, state.metrics, state.answers, state.reads
    if reads is not None and artifact is None:
        with metrics.gate_check_seconds.time(), contextlib.suppress(Unavailable):
            lookup = system_looked_up(request)
            found = (
                lookup.found
                if lookup is not None
                else await reads.system(principal.tenant_id, system)
            )
            if found is None:
                raise changes.no_system(system)
            cached = answers.get(found, version, utcnow())
            if cached is not None:
                return Response(cached, media_type="application/json")

    # Computing an answer reads afresh, epoch first, on one worker thread for the whole read.
    def read() -> Response:
        with metrics.gate_check_seconds.time():
            body = gate.read(engine, principal, system, version, answers, _rendered, artifact)
        return Response(body, media_type="application/json")

    return await run_in_threadpool(read)


def _rendered(found: gate.Answer) -> bytes:
    standing, candidate = found.standing, found.candidate
    public = GatePublic(
        system=found.system,
        version=candidate.version,
        candidate_id=candidate.id,
        decision=standing.decision.value,
        reasons=standing.reasons,
        dossier=dossier_ref(standing.dossier) if standing.dossier is not None else None,
        triggers=found.triggers,
        hold_id=standing.hold_id,
        basis=standing.basis.value,
        until=as_utc_or_none(standing.until),
        waived=standing.waived,
        artifacts=[subject_public(a) for a in found.artifacts],
        artifact_assurance=(
            ArtifactAssurancePublic.model_validate(found.assurance.view())
            if found.assurance is not None
            else None
        ),
    )
    return bytes(JSONResponse(public.model_dump(mode="json", by_alias=True)).body)


def _triggers(system: System) -> TriggersPublic:
    return TriggersPublic(
        system=system.name,
        components=list(changes.triggers_of(system)),
        default=system.triggers is None,
    )


@router.get(
    "/v1/systems/{system}/triggers",
    response_model=TriggersPublic,
    responses={k: ERROR_RESPONSES[k] for k in (404, 503)},
)
def get_triggers(
    system: SystemName, session: SessionDep, principal: PrincipalDep
) -> TriggersPublic:
    """The components whose change reopens this system's gate."""
    return _triggers(changes.system_of(session, principal, system))


@router.put(
    "/v1/systems/{system}/triggers",
    response_model=TriggersPublic,
    responses={k: ERROR_RESPONSES[k] for k in (422, 503)},
)
def put_triggers(
    system: SystemName, body: TriggersUpdate, session: SessionDep, principal: PrincipalDep
) -> TriggersPublic:
    """Name the trigger components (for example add `prompt`). Applies to dossiers issued and
    configuration changes reported from now on."""
    return _triggers(changes.set_triggers(session, principal, system, body.components))


@router.post(
    "/v1/systems/{system}/config-changes",
    status_code=201,
    dependencies=[KickWebhooks],
    response_model=ConfigChangePublic,
    responses={k: ERROR_RESPONSES[k] for k in (404, 422, 503)},
)
def report_config_change(
    system: SystemName,
    body: ConfigChangeCreate,
    session: SessionDep,
    signer: SignerDep,
    principal: PrincipalDep,
) -> ConfigChangePublic:
    """A production configuration change. If it moves a trigger component away from what a
    standing dossier was assayed with, that dossier's next version reopens the gate."""
    row, outcome = changes.report(
        session,
        signer,
        principal,
        changes.ReportChange(system, body.component, body.sha256, body.note),
    )
    return ConfigChangePublic(
        id=outcome.change.id,
        system=row.name,
        component=body.component,
        sha256=body.sha256,
        trigger=outcome.trigger,
        reopened=[dossier_ref(d) for d in outcome.reopened],
    )
