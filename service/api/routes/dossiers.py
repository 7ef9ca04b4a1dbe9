"""Signed dossiers, the keys that verify them, and re-runs that add a version.

A dossier is served exactly as it was signed: the stored envelope text is spliced into the
response, never parsed and written out again. `GET /v1/keys` publishes every key, active and
retired, so a dossier signed before a rotation still verifies offline.
"""

from __future__ import annotations

import logging
import uuid

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from service.api.errors import ERROR_RESPONSES
from service.api.present import candidate_public, dossier_ref, dossier_response
from service.api.schemas import (
    CandidatePublic,
    DossierList,
    DossierPublic,
    KeyList,
    KeyPublic,
    KeyValue,
    RerunCreate,
)
from service.app import assays, candidates, dossiers
from service.app.records import Dossier
from service.app.submissions import Services
from service.core.signing.dossier import PAYLOAD_TYPE
from service.http.deps import (
    DispatcherDep,
    InjectorSignerDep,
    KeyRingDep,
    PrincipalDep,
    SessionDep,
    SettingsDep,
    SubmissionLimitDep,
)

log = logging.getLogger("assaygate.api")

router = APIRouter(tags=["dossiers"])


@router.get("/v1/keys", response_model=KeyList)
def list_keys(ring: KeyRingDep) -> KeyList:
    """Every public key the service has signed with, active and retired, with its window."""
    return KeyList(
        keys=[
            KeyPublic(
                keyid=k.keyid,
                keyval=KeyValue(public=k.public),
                not_before=k.not_before,
                not_after=k.not_after,
            )
            for k in ring.published()
        ]
    )


@router.get(
    "/v1/candidates/{candidate_id}/dossier",
    response_model=DossierPublic,
    responses={k: ERROR_RESPONSES[k] for k in (404, 503)},
)
def latest_dossier(
    candidate_id: uuid.UUID, session: SessionDep, principal: PrincipalDep
) -> Response:
    """The candidate's latest dossier version (404 until its first assay has finished)."""
    return dossier_response(candidates.latest_dossier(session, principal.tenant_id, candidate_id))


@router.get(
    "/v1/candidates/{candidate_id}/dossiers",
    response_model=DossierList,
    responses={k: ERROR_RESPONSES[k] for k in (404, 503)},
)
def dossier_versions(
    candidate_id: uuid.UUID, session: SessionDep, principal: PrincipalDep
) -> DossierList:
    """Every version, oldest first; each names the digest of the one before."""
    versions = candidates.dossier_versions(session, principal.tenant_id, candidate_id)
    return DossierList(items=[dossier_ref(d) for d in versions])


def _dossier(session: SessionDep, dossier_id: uuid.UUID, principal: PrincipalDep) -> Dossier:
    return dossiers.of_tenant(session, principal.tenant_id, dossier_id)


@router.get(
    "/v1/dossiers/{dossier_id}",
    response_model=DossierPublic,
    responses={k: ERROR_RESPONSES[k] for k in (404, 503)},
)
def get_dossier(dossier_id: uuid.UUID, session: SessionDep, principal: PrincipalDep) -> Response:
    return dossier_response(_dossier(session, dossier_id, principal))


@router.get(
    "/v1/dossiers/{dossier_id}/envelope",
    responses={
        200: {"content": {"application/json": {}}, "description": "the DSSE envelope"},
        **{k: ERROR_RESPONSES[k] for k in (404, 503)},
    },
)
def get_envelope(dossier_id: uuid.UUID, session: SessionDep, principal: PrincipalDep) -> Response:
    """The DSSE envelope alone, byte for byte as stored (what `assaygate verify` reads)."""
    return Response(
        _dossier(session, dossier_id, principal).envelope, media_type="application/json"
    )


@router.get(
    "/v1/dossiers/{dossier_id}/payload",
    responses={
        200: {"content": {PAYLOAD_TYPE: {}}, "description": "the signed statement bytes"},
        **{k: ERROR_RESPONSES[k] for k in (404, 503)},
    },
)
def get_payload(dossier_id: uuid.UUID, session: SessionDep, principal: PrincipalDep) -> Response:
    """The exact signed bytes: the in-toto statement in RFC 8785 canonical JSON."""
    return Response(_dossier(session, dossier_id, principal).payload, media_type=PAYLOAD_TYPE)


@router.post(
    "/v1/candidates/{candidate_id}/rerun",
    status_code=202,
    response_model=CandidatePublic,
    responses={k: ERROR_RESPONSES[k] for k in (404, 422, 429, 503)},
)
def rerun(
    candidate_id: uuid.UUID,
    session: SessionDep,
    settings: SettingsDep,
    dispatcher: DispatcherDep,
    signer: InjectorSignerDep,
    principal: PrincipalDep,
    body: RerunCreate | None = None,
    limit: SubmissionLimitDep = None,
) -> JSONResponse:
    """Assay the candidate again. Its result is a new dossier version with its own trial counts:
    it replaces the standing evidence whatever it says (no best-of-N), and while an earlier
    attempt of the release blocked on evidence of a violation it is `block` whatever it says."""
    done = assays.rerun(
        session,
        Services(settings, dispatcher, signer, limit),
        principal,
        assays.Rerun(
            candidate_id, body.plan.model_dump(exclude_none=True) if body and body.plan else None
        ),
        lambda row: candidate_public(candidates.view(session, row)).model_dump(mode="json"),
    )
    return JSONResponse(
        done.response, status_code=202, headers={"Location": f"/v1/candidates/{candidate_id}"}
    )
