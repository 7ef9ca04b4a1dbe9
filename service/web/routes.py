"""The dashboard: server-rendered pages for reviewers, one router included by the app.

Every route runs `service.web.access.authorize_page` (sign-in and the route's roles, from one
table); pages read only the signed-in key's tenant through `service.app` (its read models and
`service.app.browse`), one page of rows at a time, and answer 404 for anyone else's resource.
Templates autoescape everything; the SVG charts escape their own text and are the only markup
passed through unescaped. Static files are served from `service/web/static` (no CDN).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import mimetypes
import uuid
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from service.app import browse, candidates, gate, keys, policies, tenants
from service.app.records import CandidateRow
from service.http.deps import SessionDep, SettingsDep
from service.web import present, review, submit
from service.web.access import PAGE_DEPENDENCIES, PageRoute, Viewer, ViewerDep
from service.web.rendering import not_found, render

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
PAGE = 50
KNOWN_EVENTS = (
    "candidate.submitted",
    "candidate.rerun",
    "credential.minted",
    "credential.refused",
    "shard.started",
    "shard.stored",
    "injection.refused",
    "sandbox.refused",
    "assay.decided",
    "assay.stopped",
    "assay.aborted",
    "assay.failed",
    "dossier.issued",
    "system.config_changed",
    "system.triggers_set",
    "audit",
)

router = APIRouter(include_in_schema=False, route_class=PageRoute, dependencies=PAGE_DEPENDENCIES)
router.include_router(review.router)
router.include_router(submit.router)


# ------------------------------------------------------------------------------- cursors


def encode_cursor(row: CandidateRow) -> str:
    raw = f"{row.candidate.created_at.isoformat()}|{row.candidate.id}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> tuple[datetime, uuid.UUID] | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created_at, last_id = raw.split("|", 1)
        return datetime.fromisoformat(created_at), uuid.UUID(last_id)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None


# --------------------------------------------------------------------------------- pages


@router.get("/", response_class=HTMLResponse)
def systems_page(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    who: ViewerDep,
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
    q: Annotated[str | None, Query(max_length=200)] = None,
) -> HTMLResponse:
    """Every system's gate state (what `GET /v1/gate/{system}` answers for its newest
    candidate) with its reasons, and what changed since it was last allowed; whether the
    tenant may run code (`GET /v1/tenant`) and the organisation's policy (`GET /v1/policy`)."""
    found = browse.systems_page(
        session, tenant_id=who.tenant_id, limit=PAGE, offset=(page - 1) * PAGE, name=q
    )
    latest_rows = [r.latest for r in found.rows if r.latest is not None]
    standings = gate.standings(session, latest_rows)
    # The same comparison `GET /v1/gate` answers with (`triggers.components_changed`).
    since = gate.since_allowed_of(session, latest_rows)
    tenant = tenants.of(session, settings, who.tenant_id)
    rows: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for r in found.rows:
        changed = since.get(r.latest.candidate.id) if r.latest is not None else None
        standing = standings.get(r.latest.candidate.id) if r.latest is not None else None
        state = present.gate_view(standing, r.latest)
        counts[state.state] = counts.get(state.state, 0) + 1
        rows.append(
            {
                "system": r.system,
                "candidates": r.candidates,
                "latest": r.latest,
                "gate": state,
                "running": r.latest is not None and present.is_running(r.latest),
                "progress": present.progress_fraction(r.latest) if r.latest else 0.0,
                "since": changed,
            }
        )
    return render(
        request,
        who.ws,
        "systems.html",
        {
            "title": "Systems",
            "rows": rows,
            "page": page,
            "found": found,
            "q": q or "",
            "counts": counts,
            "tenant": tenant,
            "policy": present.policy_view(policies.show(session, who.tenant_id, tenant.name)),
        },
    )


@router.get("/systems/{name}", response_class=HTMLResponse)
def system_page(
    name: str,
    request: Request,
    session: SessionDep,
    who: ViewerDep,
    cursor: Annotated[str | None, Query(max_length=400)] = None,
) -> HTMLResponse:
    system = browse.system_named(session, name, tenant_id=who.tenant_id)
    if system is None:
        return not_found(request, who.ws, f"no system named {name}")
    return _candidate_list(request, session, who, cursor, system.name, f"System {system.name}")


@router.get("/candidates", response_class=HTMLResponse)
def candidates_page(
    request: Request,
    session: SessionDep,
    who: ViewerDep,
    cursor: Annotated[str | None, Query(max_length=400)] = None,
) -> HTMLResponse:
    return _candidate_list(request, session, who, cursor, None, "Candidates")


def _candidate_list(
    request: Request,
    session: Any,
    who: Viewer,
    cursor: str | None,
    system: str | None,
    title: str,
) -> HTMLResponse:
    rows = candidates.page(
        session, who.tenant_id, system=system, limit=PAGE + 1, before=decode_cursor(cursor)
    )
    page = rows[:PAGE]
    standings = gate.standings(session, page)
    items = [
        {
            "row": r,
            "gate": present.gate_view(standings[r.candidate.id], r),
            "running": present.is_running(r),
            "progress": present.progress_fraction(r),
        }
        for r in page
    ]
    return render(
        request,
        who.ws,
        "candidates.html",
        {
            "title": title,
            "system": system,
            "items": items,
            "cursor": cursor,
            "next_cursor": encode_cursor(page[-1]) if len(rows) > PAGE and page else None,
        },
    )


@router.get("/candidates/{candidate_id}", response_class=HTMLResponse)
def candidate_page(
    candidate_id: str, request: Request, session: SessionDep, who: ViewerDep
) -> HTMLResponse:
    """What the gate says now, live progress while the assay runs, and the whole containment
    evidence once it is decided."""
    try:
        cid = uuid.UUID(candidate_id)
    except ValueError:
        return not_found(request, who.ws, "not a candidate id")
    detail = browse.candidate_detail(session, cid, tenant_id=who.tenant_id)
    if detail is None:
        return not_found(request, who.ws, f"no candidate {cid}")
    row = detail.row
    state = present.gate_view(gate.standing(session, row), row)
    # The assay's own reasons are the evidence; the gate's reasons say why it stands as it does.
    evidence_reasons = present.worst_first(row.assay.reasons or [])
    view = present.report_view(detail.report, evidence_reasons) if detail.report else None
    running = present.is_running(row)
    return render(
        request,
        who.ws,
        "candidate.html",
        {
            "title": f"{row.system.name} {row.candidate.version}",
            "row": row,
            "gate": state,
            "running": running,
            "progress": present.progress_fraction(row),
            "faults_progress": detail.progress,
            "live": detail.live,
            "view": view,
            "reasons": state.reasons,
            "severities": present.severities(state.reasons),
            "evidence_reasons": evidence_reasons,
            "hashes": detail.component_hashes,
            "ships": detail.ships,
            "envelope_points": [
                {"id": f.id, "signature": f.signature} for f in (view.faults if view else [])
            ],
        },
    )


@router.get("/events", response_class=HTMLResponse)
def events_page(
    request: Request,
    session: SessionDep,
    who: ViewerDep,
    before: Annotated[int | None, Query(ge=1)] = None,
    kind: Annotated[str | None, Query(max_length=64)] = None,
    candidate: Annotated[str | None, Query(max_length=64)] = None,
) -> HTMLResponse:
    """The append-only event log, grouped by assay: submissions, credential mintings, stops,
    aborts, decisions, dossiers, reviews. Shard events are folded into one line per assay
    (`?kind=shard.stored` lists them)."""
    try:
        candidate_id = uuid.UUID(candidate) if candidate else None
    except ValueError:
        candidate_id = None
    found = browse.events_page(
        session,
        tenant_id=who.tenant_id,
        limit=PAGE,
        before=before,
        kind=kind or None,
        candidate_id=candidate_id,
    )
    rows = browse.candidate_rows(
        session, [e.candidate_id for e in found.events if e.candidate_id is not None]
    )
    return render(
        request,
        who.ws,
        "events.html",
        {
            "title": "Event log",
            "groups": present.group_events(found.events, found.shards, rows),
            "next_before": found.next_before,
            "kind": kind or "",
            "kinds": KNOWN_EVENTS,
            "candidate": str(candidate_id) if candidate_id else "",
        },
    )


# ------------------------------------------------------------------------------- static


@lru_cache(maxsize=1)
def _static_files() -> dict[str, tuple[bytes, str, str]]:
    found: dict[str, tuple[bytes, str, str]] = {}
    for path in STATIC.iterdir():
        if path.is_file():
            data = path.read_bytes()
            kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            found[path.name] = (data, kind, hashlib.sha256(data).hexdigest()[:16])
    return found


@router.get("/static/{name}")
def static(name: str, request: Request) -> Response:
    """Only the files shipped in `service/web/static`, by exact name: no path traversal."""
    found = _static_files().get(name)
    if found is None:
        return Response("not found", status_code=404, media_type="text/plain")
    data, kind, etag = found
    headers = {"ETag": f'"{etag}"', "Cache-Control": "public, max-age=300"}
    if request.headers.get("if-none-match") == f'"{etag}"':
        return Response(status_code=304, headers=headers)
    return Response(data, media_type=kind, headers=headers)


@router.get("/keys", response_class=HTMLResponse)
def keys_page(request: Request, session: SessionDep, who: ViewerDep) -> HTMLResponse:
    """The tenant's people and their keys (`GET /v1/api-keys`, for an admin): who holds each key,
    its roles, who minted it, and whether it is revoked — never any part of a secret."""
    rows = keys.of_tenant(session, who.principal)
    people: dict[str, list[Any]] = {}
    for row in rows:
        people.setdefault(row.person.name, []).append(row)
    return render(
        request,
        who.ws,
        "keys.html",
        {"title": "People and keys", "people": sorted(people.items()), "count": len(rows)},
    )
