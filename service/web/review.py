"""Review pages: sign-in, dossiers (verified on every request) and the holds queue.

Review actions go through the same service functions as the API (`/v1/holds/{id}/waive`,
`/reject`, `/v1/candidates/{id}/rerun`), with the signed-in key as the actor; every form carries
the session's CSRF token, and `service.web.access` refuses an action without a signed-in key of
the route's role before it starts. Pages show only the signed-in key's tenant.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlmodel import Session

from service.app import assays, browse, gate, identity, reviews
from service.app.errors import AppError
from service.app.records import Dossier, HoldStatus
from service.app.submissions import Services
from service.core.errors import AssaygateError
from service.core.signing.dossier import PublicKey, Signer, verify
from service.http import browser as auth
from service.http.browser import WebSessionDep
from service.http.deps import (
    DispatcherDep,
    InjectorSignerDep,
    KeyRingDep,
    SessionDep,
    SettingsDep,
    SignerDep,
    SubmissionLimitDep,
)
from service.http.errors import status_of
from service.web import present
from service.web.access import PAGE_DEPENDENCIES, PageRoute, Viewer, ViewerDep, safe_next
from service.web.rendering import render, set_session_cookie

router = APIRouter(include_in_schema=False, route_class=PageRoute, dependencies=PAGE_DEPENDENCIES)
# The queue shows the newest holds first; older ones are reached by their status filter.
HOLDS_PAGE = 50


def _render(
    request: Request,
    ws: auth.WebSession,
    template: str,
    context: dict[str, Any],
    status_code: int = 200,
) -> HTMLResponse:
    return render(request, ws, template, context, status_code=status_code)


def _refuse(request: Request, ws: auth.WebSession, message: str, status: int) -> HTMLResponse:
    return _render(request, ws, "error.html", {"title": "Refused", "message": message}, status)


def _guard(request: Request, ws: auth.WebSession, csrf: str | None) -> HTMLResponse | None:
    """The check every review action makes first: the form token of this session. (Sign-in and
    the reviewer role were checked before the route ran, by `service.web.access`.)"""
    try:
        auth.check_csrf(auth.secret_of(request), ws, csrf)
    except auth.CsrfInvalid as exc:
        return _refuse(request, ws, str(exc), 403)
    return None


# ------------------------------------------------------------------------------ sign-in


@router.get("/signin", response_class=HTMLResponse)
def signin_form(
    request: Request, ws: WebSessionDep, next: Annotated[str, Query(max_length=300)] = "/"
) -> HTMLResponse:
    return _render(
        request, ws, "signin.html", {"title": "Sign in", "error": None, "next": safe_next(next)}
    )


@router.post("/signin", response_class=HTMLResponse)
def signin(
    request: Request,
    ws: WebSessionDep,
    session: SessionDep,
    credential: Annotated[str, Form(max_length=400)],
    csrf: Annotated[str | None, Form()] = None,
    next: Annotated[str, Form(max_length=300)] = "/",
) -> Response:
    secret = auth.secret_of(request)
    try:
        auth.check_csrf(secret, ws, csrf)
    except auth.CsrfInvalid as exc:
        return _refuse(request, ws, str(exc), 403)
    principal = auth.authenticate(session, credential)
    if principal is None:
        return _render(
            request,
            ws,
            "signin.html",
            {"title": "Sign in", "error": "that credential is not valid", "next": safe_next(next)},
            401,
        )
    # A new session id on sign-in: a token from before cannot ride along (session fixation).
    # It is recorded on the server, where signing out or revoking the key ends it.
    fresh = auth.new_session(auth.Identity.of(principal))
    identity.sign_in(
        session, fresh.sid, principal.key_id, datetime.fromtimestamp(fresh.expires, UTC)
    )
    # Only a path on this site: never a redirect elsewhere.
    response = RedirectResponse(safe_next(next), status_code=303)
    set_session_cookie(request, response, secret, fresh)
    return response


@router.post("/signout")
def signout(
    request: Request,
    ws: WebSessionDep,
    session: SessionDep,
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    """End the session on the server (the cookie is worth nothing afterwards) and drop it."""
    try:
        auth.check_csrf(auth.secret_of(request), ws, csrf)
    except auth.CsrfInvalid as exc:
        return _refuse(request, ws, str(exc), 403)
    identity.sign_out(session, ws.sid)
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(auth.COOKIE, path="/")
    return response


# ------------------------------------------------------------------------------ dossiers


def _hash_diff(before: dict[str, str], after: dict[str, str]) -> list[dict[str, str | None]]:
    return [
        {"component": c, "before": before.get(c), "after": after.get(c)}
        for c in sorted(set(before) | set(after))
        if before.get(c) != after.get(c)
    ]


def _verified_versions(
    session: Session, candidate_id: uuid.UUID, keys: dict[str, PublicKey]
) -> tuple[list[dict[str, Any]], Dossier | None, dict[str, str]]:
    """Each version verified now, oldest first, with what changed since the one before; and the
    latest version with its component hashes."""
    versions: list[dict[str, Any]] = []
    previous: Dossier | None = None
    previous_hashes: dict[str, str] = {}
    for d in browse.dossier_versions(session, candidate_id):
        envelope = json.loads(d.envelope)
        checked = verify(
            envelope,
            keys,
            previous_digest=previous.digest if previous else d.previous,
            check_chain=True,
        )
        predicate = (checked.statement or {}).get("predicate") or {}
        hashes = dict((predicate.get("manifest") or {}).get("component_hashes") or {})
        versions.append(
            {
                "dossier": d,
                "ok": checked.ok,
                "checks": list(checked.checks),
                "diff": _hash_diff(previous_hashes, hashes) if previous else [],
                "decision_changed": previous is not None and previous.decision != d.decision,
                "waivers": predicate.get("waivers") or [],
            }
        )
        previous, previous_hashes = d, hashes
    return versions, previous, previous_hashes


@router.get("/candidates/{candidate_id}/dossier", response_class=HTMLResponse)
def dossier_page(
    candidate_id: str,
    request: Request,
    session: SessionDep,
    who: ViewerDep,
    ring: KeyRingDep,
) -> HTMLResponse:
    """Every version with its chain link, each verified now against the published keys, and
    what the gate says now."""
    ws = who.ws
    try:
        cid = uuid.UUID(candidate_id)
    except ValueError:
        cid = None
    row = browse.candidate(session, cid, tenant_id=who.tenant_id) if cid else None
    if row is None:
        return _render(
            request, ws, "error.html", {"title": "Not found", "message": "no such candidate"}, 404
        )
    keys = {k.keyid: k for k in ring.published()}
    versions, _, _ = _verified_versions(session, row.candidate.id, keys)
    # The comparison `GET /v1/gate` answers with: the last allowed *other* candidate.
    since = gate.since_allowed(session, row)
    holds = browse.holds_of(session, row.candidate.id)
    return _render(
        request,
        ws,
        "dossier.html",
        {
            "title": f"Dossier {row.system.name} {row.candidate.version}",
            "row": row,
            "gate": present.gate_view(gate.standing(session, row), row),
            "versions": list(reversed(versions)),
            "since": since,
            "holds": holds,
            "keys": len(keys),
        },
    )


# ------------------------------------------------------------------------------- holds


@router.get("/holds", response_class=HTMLResponse)
def holds_page(
    request: Request,
    session: SessionDep,
    who: ViewerDep,
    signer: SignerDep,
    status: Annotated[str, Query(max_length=16)] = "open",
) -> HTMLResponse:
    """The tenant's holds, newest first; the review forms only for a reviewer key."""
    # `all` (or anything that is not a status) lists every hold; the page says which it shows.
    wanted = status if status in {s.value for s in HoldStatus} else None
    status = wanted or "all"
    rows = reviews.holds(session, signer, who.tenant_id, status=wanted, limit=HOLDS_PAGE)
    found = browse.candidate_rows(session, [h.candidate_id for h in rows])
    # What the gate says of each candidate: an open hold on a blocked candidate reads BLOCK.
    standings = gate.standings(session, list(found.values()))
    items = []
    for h in rows:
        row = found.get(h.candidate_id)
        submitter = row.candidate.submitter if row else None
        standing = standings.get(h.candidate_id)
        items.append(
            {
                "hold": h,
                "row": row,
                "gate": present.gate_view(standing, row) if standing is not None else None,
                "blocking": bool(reviews.hard_reasons(h)),
                # Why this key may not review it (separation of duties), if it may not.
                "own": identity.review_refusal(session, who.principal, submitter),
            }
        )
    return _render(
        request,
        who.ws,
        "holds.html",
        {
            "title": "Holds",
            "items": items,
            "status": status,
            "statuses": [*(s.value for s in HoldStatus), "all"],
            "can_review": who.may("POST", "/holds/{hold_id}/waive"),
            "can_rerun": who.may("POST", "/candidates/{candidate_id}/rerun"),
            "default_expiry": default_expiry(),
            "error": request.query_params.get("error"),
        },
    )


def default_expiry() -> str:
    """A waiver's suggested end, a week from now (UTC, as the form's datetime-local reads it)."""
    return (datetime.now(UTC) + timedelta(days=7)).strftime("%Y-%m-%dT%H:%M")


def review_box(session: Session, who: Viewer, candidate_id: uuid.UUID) -> dict[str, Any] | None:
    """What a held candidate's page puts first: its open hold, with the holds page's review
    actions when this key may review it (and why not, when separation of duties says so)."""
    open_holds = [
        h for h in browse.holds_of(session, candidate_id) if h.status == HoldStatus.OPEN.value
    ]
    if not open_holds:
        return None
    hold = open_holds[-1]
    row = browse.candidate(session, candidate_id, tenant_id=who.tenant_id)
    submitter = row.candidate.submitter if row else None
    return {
        "hold": hold,
        "blocking": bool(reviews.hard_reasons(hold)),
        "own": identity.review_refusal(session, who.principal, submitter),
        "can_review": who.may("POST", "/holds/{hold_id}/waive"),
        "can_rerun": who.may("POST", "/candidates/{candidate_id}/rerun"),
        "default_expiry": default_expiry(),
    }


ReasonForm = Annotated[str, Form(max_length=2000)]
ExpiryForm = Annotated[str, Form(max_length=40)]
CsrfForm = Annotated[str | None, Form()]


@router.post("/holds/{hold_id}/waive", response_class=HTMLResponse)
def waive_hold(
    hold_id: uuid.UUID,
    request: Request,
    who: ViewerDep,
    session: SessionDep,
    signer: SignerDep,
    reason: ReasonForm = "",
    expires_at: ExpiryForm = "",
    csrf: CsrfForm = None,
) -> Response:
    """Accept the held reasons until the expiry (`POST /v1/holds/{id}/waive`)."""
    return _review("waive", hold_id, request, who, session, signer, reason, expires_at, csrf)


@router.post("/holds/{hold_id}/reject", response_class=HTMLResponse)
def reject_hold(
    hold_id: uuid.UUID,
    request: Request,
    who: ViewerDep,
    session: SessionDep,
    signer: SignerDep,
    reason: ReasonForm = "",
    expires_at: ExpiryForm = "",
    csrf: CsrfForm = None,
) -> Response:
    """Refuse the candidate (`POST /v1/holds/{id}/reject`)."""
    return _review("reject", hold_id, request, who, session, signer, reason, expires_at, csrf)


def _review(
    action: Literal["waive", "reject"],
    hold_id: uuid.UUID,
    request: Request,
    who: Viewer,
    session: Session,
    signer: Signer,
    reason: str,
    expires_at: str,
    csrf: str | None,
) -> Response:
    """Waive (with an expiry) or reject (with a reason): the review use case the API calls."""
    ws = who.ws
    refused = _guard(request, ws, csrf)
    if refused is not None:
        return refused
    if not reason.strip():
        return _refuse(request, ws, "a review needs a reason", 422)
    try:
        expiry = datetime.fromisoformat(expires_at).replace(tzinfo=UTC) if expires_at else None
    except ValueError as exc:
        return _refuse(request, ws, f"expires_at: {exc}", 422)
    if action == "waive" and expiry is None:
        return _refuse(request, ws, "expires_at: a waiver needs an expiry", 422)
    command = reviews.Review(hold_id, reviews.Action(action), reason.strip(), expiry)
    try:
        done = reviews.review(session, signer, who.principal, command)
    except (AppError, AssaygateError) as exc:
        return _refuse(request, ws, str(exc), status_of(exc, core=400))
    return RedirectResponse(f"/candidates/{done.hold.candidate_id}/dossier", status_code=303)


@router.post("/candidates/{candidate_id}/rerun", response_class=HTMLResponse)
def rerun(
    candidate_id: uuid.UUID,
    request: Request,
    who: ViewerDep,
    session: SessionDep,
    settings: SettingsDep,
    dispatcher: DispatcherDep,
    signer: InjectorSignerDep,
    limit: SubmissionLimitDep,
    csrf: CsrfForm = None,
) -> Response:
    """A new assay of the same candidate: a new dossier version, never a replacement. Counted
    against the key's submissions per minute, as the API's re-run is."""
    ws = who.ws
    refused = _guard(request, ws, csrf)
    if refused is not None:
        return refused
    try:
        assays.rerun(
            session,
            Services(settings, dispatcher, signer, limit),
            who.principal,
            assays.Rerun(candidate_id),
        )
    except (AppError, AssaygateError) as exc:
        page = _refuse(request, ws, str(exc), status_of(exc, core=400))
        page.headers.update(getattr(exc, "headers", None) or {})
        return page
    return RedirectResponse(f"/candidates/{candidate_id}", status_code=303)
