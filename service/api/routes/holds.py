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
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from service.api.deps import Caller, PrincipalDep, ReviewerDep, SessionDep, SignerDep, resolve
from service.api.errors import (
    ERROR_RESPONSES,
    ExpiryPassed,
    FieldInvalid,
    HoldNotOpen,
    NotFound,
    NotWaivable,
    ReviewerIsSubmitter,
)
from service.api.present import dossier_ref, hold_public
from service.api.schemas import HoldList, HoldPublic, ReviewCreate, ReviewPublic, WaiverCreate
from service.app import reviews
from service.db import dossier as dossiers
from service.db.apikey import actor_view, audit, review_conflict
from service.db.models import Candidate, HoldStatus

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
    if reviews.expire_lapsed(session, signer):
        session.commit()
    rows = dossiers.holds(
        session, system=system, status=status, limit=limit, tenant_id=principal.tenant_id
    )
    return HoldList(items=[hold_public(h) for h in rows])


@router.get(
    "/{hold_id}", response_model=HoldPublic, responses={k: ERROR_RESPONSES[k] for k in (404, 503)}
)
def get_hold(
    hold_id: uuid.UUID, session: SessionDep, signer: SignerDep, principal: PrincipalDep
) -> HoldPublic:
    if reviews.expire_lapsed(session, signer):
        session.commit()
    hold = dossiers.hold_of_tenant(session, hold_id, principal.tenant_id)
    if hold is None:
        raise NotFound(f"no hold {hold_id}", field="hold_id")
    return hold_public(hold)


def _review(
    action: Literal["waive", "reject"],
    hold_id: uuid.UUID,
    body: ReviewCreate,
    session: SessionDep,
    signer: SignerDep,
    reviewer: Caller,
) -> ReviewPublic:
    principal = resolve(session, reviewer, ("POST", f"/v1/holds/{{hold_id}}/{action}"))
    now = datetime.now(UTC)
    if reviews.expire_lapsed(session, signer, now=now):
        session.commit()
    hold = dossiers.hold_of_tenant(session, hold_id, principal.tenant_id)
    if hold is None:
        raise NotFound(f"no hold {hold_id}", field="hold_id")
    candidate = session.get(Candidate, hold.candidate_id)
    assert candidate is not None
    if action == "waive" and body.expires_at is None:
        raise FieldInvalid("a waiver needs an expiry", field="expires_at")
    expires_at = body.expires_at
    if expires_at is not None:
        if expires_at.tzinfo is None:
            expires_at = expires_at.replace(tzinfo=UTC)
        if expires_at <= now:
            # Well-formed, but the clock already passed it: a conflict with now, not bad input.
            raise ExpiryPassed("the expiry must be in the future", field="expires_at")
    conflict = review_conflict(session, principal, candidate.submitter)
    if conflict is not None:
        raise ReviewerIsSubmitter(conflict, field="Authorization")
    if hold.status != HoldStatus.OPEN.value:
        raise HoldNotOpen(f"hold {hold_id} is {hold.status}", field="hold_id")
    blocking = reviews.hard_reasons(hold)
    if action == "waive" and blocking:
        codes = ", ".join(sorted({str(r.get("code")) for r in blocking}))
        raise NotWaivable(
            f"a waiver cannot lift a block ({codes}); re-run after fixing, or reject",
            field="hold_id",
        )
    done = reviews.record(
        session,
        signer,
        reviews.ReviewHold(
            hold_id=hold_id,
            action=reviews.Action(action),
            reviewer=principal.actor,
            reviewed_by=actor_view(session, principal.key_id),
            reason=body.reason,
            expires_at=expires_at,
        ),
        now=now,
    )
    if done is None:
        session.rollback()
        raise HoldNotOpen(f"hold {hold_id} was reviewed or superseded meanwhile", field="hold_id")
    audit(
        session,
        principal,
        f"hold.{action}",
        f"hold:{hold_id}",
        candidate_id=candidate.id,
        reason=body.reason,
        dossier_id=str(done.dossier.id),
    )
    session.commit()
    return ReviewPublic(hold=hold_public(done.hold), dossier=dossier_ref(done.dossier))


@router.post(
    "/{hold_id}/waive",
    response_model=ReviewPublic,
    responses={k: ERROR_RESPONSES[k] for k in (401, 403, 404, 409, 422, 503)},
)
def waive(
    hold_id: uuid.UUID,
    body: WaiverCreate,
    session: SessionDep,
    signer: SignerDep,
    reviewer: ReviewerDep,
) -> ReviewPublic:
    """Accept the held reasons until the expiry; signs the next dossier version (`allow`)."""
    return _review("waive", hold_id, body, session, signer, reviewer)


@router.post(
    "/{hold_id}/reject",
    response_model=ReviewPublic,
    responses={k: ERROR_RESPONSES[k] for k in (401, 403, 404, 409, 422, 503)},
)
def reject(
    hold_id: uuid.UUID,
    body: ReviewCreate,
    session: SessionDep,
    signer: SignerDep,
    reviewer: ReviewerDep,
) -> ReviewPublic:
    """Refuse the candidate; signs the next dossier version (`block`)."""
    return _review("reject", hold_id, body, session, signer, reviewer)
