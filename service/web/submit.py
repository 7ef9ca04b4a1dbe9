"""Submitting a candidate from the browser: the submission use case `POST /v1/candidates` calls,
counted against the same per-key submissions-per-minute limit, with the form shown again (and
what was wrong) when it is refused."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from service.app import submissions
from service.app.errors import AppError
from service.app.shapes import CandidateCreate
from service.core.errors import AssaygateError
from service.http.browser import CsrfInvalid, WebSession, check_csrf, secret_of
from service.http.deps import (
    DispatcherDep,
    InjectorSignerDep,
    MetricsDep,
    SessionDep,
    SettingsDep,
    SubmissionLimitDep,
)
from service.http.errors import status_of
from service.web.access import PAGE_DEPENDENCIES, PageRoute, ViewerDep
from service.web.rendering import render

router = APIRouter(include_in_schema=False, route_class=PageRoute, dependencies=PAGE_DEPENDENCIES)

FIELDS = ("manifest", "source_revision", "trials", "seed", "catalogue")


def _page(
    request: Request,
    ws: WebSession,
    form: dict[str, str],
    *,
    error: str | None = None,
    can_submit: bool = True,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    context = {"title": "Submit a candidate", "error": error, "form": form}
    page = render(
        request, ws, "submit.html", {**context, "can_submit": can_submit}, status_code=status
    )
    page.headers.update(headers or {})
    return page


@router.get("/submit", response_class=HTMLResponse)
def submit_form(request: Request, who: ViewerDep) -> HTMLResponse:
    form = dict.fromkeys(FIELDS, "")
    return _page(request, who.ws, form, can_submit=who.may("POST", "/submit"))


def _body(form: dict[str, str]) -> CandidateCreate | str:
    """The submission the form asks for, or what is wrong with the form."""
    try:
        document = json.loads(form["manifest"])
    except ValueError as exc:
        return f"the manifest is not JSON: {exc}"
    plan: dict[str, Any] = {}
    try:
        if form["trials"]:
            plan["trials"] = int(form["trials"])
        if form["seed"]:
            plan["seed"] = int(form["seed"])
    except ValueError:
        return "trials and seed are whole numbers"
    if form["catalogue"]:
        plan["catalogue"] = form["catalogue"]
    try:
        return CandidateCreate.model_validate(
            {
                "source_revision": form["source_revision"] or "dashboard",
                "manifest": document,
                **({"plan": plan} if plan else {}),
            }
        )
    except ValidationError as exc:
        return _first_error(exc)


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{where}: {first.get('msg', 'invalid')}"


@router.post("/submit", response_class=HTMLResponse)
def submit(
    request: Request,
    who: ViewerDep,
    session: SessionDep,
    settings: SettingsDep,
    dispatcher: DispatcherDep,
    metrics: MetricsDep,
    signer: InjectorSignerDep,
    limit: SubmissionLimitDep,
    manifest: Annotated[str, Form(max_length=512 * 1024)],
    source_revision: Annotated[str, Form(max_length=200)],
    csrf: Annotated[str | None, Form()] = None,
    trials: Annotated[str | None, Form(max_length=12)] = None,
    seed: Annotated[str | None, Form(max_length=20)] = None,
    catalogue: Annotated[str | None, Form(max_length=8)] = None,
) -> Response:
    """Submit a candidate from the browser; the same use case as `POST /v1/candidates`."""
    started = time.perf_counter()
    ws = who.ws
    values = (manifest, source_revision, trials or "", seed or "", catalogue or "")
    form = dict(zip(FIELDS, values, strict=True))
    try:
        check_csrf(secret_of(request), ws, csrf)
    except CsrfInvalid as exc:
        context = {"title": "Refused", "message": str(exc)}
        return render(request, ws, "error.html", context, status_code=403)
    body = _body(form)
    if isinstance(body, str):
        return _page(request, ws, form, error=body, status=400)
    services = submissions.Services(settings, dispatcher, signer, limit)
    try:
        done = submissions.submit(session, services, who.principal, body)
    except ValidationError as exc:
        return _page(request, ws, form, error=_first_error(exc), status=400)
    except (AssaygateError, AppError) as exc:
        field_name = getattr(exc, "field", None)
        message = f"{field_name + ': ' if field_name else ''}{exc}"
        status = status_of(exc, core=400)
        headers = getattr(exc, "headers", None)
        return _page(request, ws, form, error=message, status=status, headers=headers)
    metrics.submission_seconds.observe(time.perf_counter() - started)
    return RedirectResponse(f"/candidates/{done.candidate_id}", status_code=303)
