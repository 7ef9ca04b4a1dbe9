"""Reviews of dossiers that did not allow: waive or reject, each a new signed dossier version.

A review needs a reason, a key with the reviewer role and (for a waiver) an expiry. Separation of
duties is per person (`service.db.apikey.review_conflict`): the reviewer may not be the person
the submitting key belongs to, nor the person who minted that key, nor a key the submitter
minted. A waiver lifts only `hold` reasons: a
hard-invariant violation (unsafe escape, duplicate effect, unverifiable release) or any other
block is never waived into `allow`. When a waiver expires the hold reopens.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from service.api.errors import ERROR_RESPONSES
from service.api.present import dossier_ref, hold_public
from service.api.schemas import HoldList, HoldPublic, ReviewCreate, ReviewPublic, WaiverCreate
from service.app import reviews
from service.app.records import Hold, Principal
from service.http.deps import KickWebhooks, PrincipalDep, SessionDep, SignerDep

router = APIRouter(prefix="/v1/holds", tags=["holds"])


@router.get("", response_model=HoldList, responses={503: ERROR_RESPONSES[503]})
def list_holds(
    session: SessionDep,
    signer: SignerDep,
    principal: PrincipalDep,
    system: Annotated[str | None, Query(max_length=200)] = None,
    status: Literal["open", "waived", "rejected", "superseded"] | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
) -> HoldList:
    """Newest first."""
    rows = reviews.holds(
        session, signer, principal.tenant_id, system=system, status=status, limit=limit
    )
    about = reviews.held_candidates(session, rows)
    return HoldList(items=[hold_public(h, about[h.candidate_id]) for h in rows])


def _public(session: SessionDep, hold: Hold) -> HoldPublic:
    return hold_public(hold, reviews.held_candidates(session, [hold])[hold.candidate_id])


@router.get(
    "/{hold_id}", response_model=HoldPublic, responses={k: ERROR_RESPONSES[k] for k in (404, 503)}
)
def get_hold(
    hold_id: uuid.UUID, session: SessionDep, signer: SignerDep, principal: PrincipalDep
) -> HoldPublic:
    return _public(session, reviews.hold(session, signer, principal.tenant_id, hold_id))


def _review(
    action: reviews.Action,
    hold_id: uuid.UUID,
    body: ReviewCreate,
    session: SessionDep,
    signer: SignerDep,
    principal: Principal,
) -> ReviewPublic:
    command = reviews.Review(hold_id, action, body.reason, body.expires_at)
    done = reviews.review(session, signer, principal, command)
    return ReviewPublic(hold=_public(session, done.hold), dossier=dossier_ref(done.dossier))


@router.post(
    "/{hold_id}/waive",
    response_model=ReviewPublic,
    dependencies=[KickWebhooks],
    responses={k: ERROR_RESPONSES[k] for k in (401, 403, 404, 409, 422, 503)},
)
def waive(
    hold_id: uuid.UUID,
    body: WaiverCreate,
    session: SessionDep,
    signer: SignerDep,
    reviewer: PrincipalDep,
) -> ReviewPublic:
    """Accept the held reasons until the expiry; signs the next dossier version (`allow`)."""
    return _review(reviews.Action.WAIVE, hold_id, body, session, signer, reviewer)


@router.post(
    "/{hold_id}/reject",
    response_model=ReviewPublic,
    dependencies=[KickWebhooks],
    responses={k: ERROR_RESPONSES[k] for k in (401, 403, 404, 409, 422, 503)},
)
def reject(
    hold_id: uuid.UUID,
    body: ReviewCreate,
    session: SessionDep,
    signer: SignerDep,
    reviewer: PrincipalDep,
) -> ReviewPublic:
    """Refuse the candidate; signs the next dossier version (`block`)."""
    return _review(reviews.Action.REJECT, hold_id, body, session, signer, reviewer)
