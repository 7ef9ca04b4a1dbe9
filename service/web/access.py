"""Who may see and do what on the dashboard: one table from (method, page path) to roles, read by
the one dependency every dashboard route runs (as `service.http.access` is for the API).

Each page names the API route it stands for and takes that route's roles, so the two cannot
drift: any role of the tenant reads, `submitter` submits, `reviewer` waives, rejects and re-runs.
A route in neither table is refused (fail closed), and a test walks the app's routes against it.

Every signed-in request looks its key up again (a revoked key stops working at once) and gets the
key's tenant, which every page scopes its reads to: another tenant's resource answers 404, as
the API does. An anonymous page request is sent to the sign-in page; an anonymous form post is
refused (401).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

from fastapi import Depends, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.routing import APIRoute
from sqlmodel import Session

from service.app import identity
from service.app.records import KeyRole, Principal
from service.core.system.text import TextInvalid
from service.http.access import ANY_ROLE, ROUTE_ROLES
from service.http.browser import Identity, WebSession, WebSessionDep
from service.http.deps import SessionDep
from service.http.input import check_request_text
from service.web.rendering import render

#: Dashboard routes anyone may call: signing in and out, and the static files.
PUBLIC_PAGES: frozenset[tuple[str, str]] = frozenset(
    {("GET", "/signin"), ("POST", "/signin"), ("POST", "/signout"), ("GET", "/static/{name}")}
)

#: Every other dashboard route, with the roles of the API route it stands for.
PAGE_ROLES: dict[tuple[str, str], frozenset[KeyRole]] = {
    ("GET", "/"): ROUTE_ROLES[("GET", "/v1/systems")],
    ("GET", "/systems/{name}"): ROUTE_ROLES[("GET", "/v1/candidates")],
    ("GET", "/candidates"): ROUTE_ROLES[("GET", "/v1/candidates")],
    ("GET", "/candidates/{candidate_id}"): ROUTE_ROLES[("GET", "/v1/candidates/{candidate_id}")],
    ("GET", "/candidates/{candidate_id}/dossier"): ROUTE_ROLES[
        ("GET", "/v1/candidates/{candidate_id}/dossiers")
    ],
    ("GET", "/holds"): ROUTE_ROLES[("GET", "/v1/holds")],
    ("GET", "/events"): ROUTE_ROLES[("GET", "/v1/events")],
    ("GET", "/keys"): ROUTE_ROLES[("GET", "/v1/api-keys")],
    ("GET", "/webhooks"): ROUTE_ROLES[("GET", "/v1/webhooks")],
    # The form is a read; posting it is a submission.
    ("GET", "/submit"): ANY_ROLE,
    ("POST", "/submit"): ROUTE_ROLES[("POST", "/v1/candidates")],
    ("POST", "/holds/{hold_id}/waive"): ROUTE_ROLES[("POST", "/v1/holds/{hold_id}/waive")],
    ("POST", "/holds/{hold_id}/reject"): ROUTE_ROLES[("POST", "/v1/holds/{hold_id}/reject")],
    ("POST", "/candidates/{candidate_id}/rerun"): ROUTE_ROLES[
        ("POST", "/v1/candidates/{candidate_id}/rerun")
    ],
}

SIGNIN = "/signin"


@dataclass(frozen=True)
class Viewer:
    """The signed-in browser: its session and the key it signed in with (read this request)."""

    ws: WebSession
    principal: Principal

    @property
    def tenant_id(self) -> uuid.UUID:
        return self.principal.tenant_id

    def may(self, method: str, path: str) -> bool:
        """Whether this key may use a dashboard route (to show or hide its forms)."""
        return self.principal.has_any(PAGE_ROLES.get((method, path), frozenset()))


class SignInFirst(Exception):
    """An anonymous page request: answered with a redirect to the sign-in page."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


class PageRefused(Exception):
    """A dashboard request refused (401 not signed in, 403 not this key's role)."""

    def __init__(self, ws: WebSession, message: str, status_code: int) -> None:
        super().__init__(message)
        self.ws = ws
        self.message = message
        self.status_code = status_code


def safe_next(value: str | None) -> str:
    """`value` if it is a path on this site, else "/": never a redirect to another site.

    Refused: absolute URLs, scheme-relative `//host`, backslashes (browsers read `/\\host` as
    `//host`) and control characters."""
    if not value or not value.startswith("/") or value.startswith("//"):
        return "/"
    if "\\" in value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value


def signin_url(next_url: str) -> str:
    return f"{SIGNIN}?next={quote(safe_next(next_url), safe='/')}"


def roles_for_page(method: str, path: str) -> frozenset[KeyRole] | None:
    """The roles allowed on a dashboard route; None for a public one; empty for an unknown one."""
    if (method, path) in PUBLIC_PAGES:
        return None
    return PAGE_ROLES.get((method, path), frozenset())


def signed_in_principal(session: Session, ws: WebSession) -> Principal | None:
    """The key this browser's session is signed in with, looked up on the server: None when
    anonymous, signed out, expired, or when the key was revoked."""
    return identity.signed_in(session, ws.sid) if ws.sid else None


def authorize_page(request: Request, ws: WebSessionDep, session: SessionDep) -> Viewer | None:
    """The one check every dashboard route runs: signed in, with a role the route allows."""
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    allowed = roles_for_page(request.method, path)
    if allowed is None:
        return None
    principal = signed_in_principal(session, ws)
    if principal is None:
        if request.method in ("GET", "HEAD"):
            here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            raise SignInFirst(here)
        raise PageRefused(ws, "sign in with an API key that is not revoked to do this", 401)
    ws = replace(ws, identity=Identity.of(principal))
    if not principal.has_any(allowed):
        need = ", ".join(sorted(r.value for r in allowed)) or "a page in the access table"
        raise PageRefused(ws, f"this key may not do this (needs: {need})", 403)
    return Viewer(ws, principal)


def require_viewer(viewer: Annotated[Viewer | None, Depends(authorize_page)]) -> Viewer:
    if viewer is None:  # a public page declared a viewer: a programming error
        raise RuntimeError("a public dashboard route asked for the signed-in viewer")
    return viewer


ViewerDep = Annotated[Viewer, Depends(require_viewer)]


class PageRoute(APIRoute):
    """A dashboard route: turns `authorize_page`'s refusals into a redirect or an HTML page."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInFirst as exc:
                return RedirectResponse(signin_url(exc.next_url), status_code=303)
            except PageRefused as exc:
                return render(
                    request,
                    exc.ws,
                    "error.html",
                    {"title": "Refused", "message": exc.message},
                    status_code=exc.status_code,
                )
            except TextInvalid as exc:
                # Refused before the session was read: answered without touching the cookie.
                return render(
                    request,
                    WebSession(sid="", identity=None, expires=0),
                    "error.html",
                    {"title": "Refused", "message": str(exc)},
                    status_code=422,
                )

        return page_handler


PAGE_DEPENDENCIES = [Depends(check_request_text), Depends(authorize_page)]
