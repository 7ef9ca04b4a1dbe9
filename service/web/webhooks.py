"""The webhooks page (for a tenant admin, as `GET /v1/webhooks`): each webhook with its latest
deliveries and every attempt (outcome, HTTP status, error, time), so a missed notification is
found on the page that would show it. Never a secret."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from service.app import webhooks
from service.http.deps import SessionDep
from service.web.access import PAGE_DEPENDENCIES, PageRoute, ViewerDep
from service.web.rendering import render

router = APIRouter(include_in_schema=False, route_class=PageRoute, dependencies=PAGE_DEPENDENCIES)

#: Deliveries shown per webhook (the API pages further: `GET /v1/webhooks/{id}/deliveries`).
LATEST = 20


@router.get("/webhooks", response_class=HTMLResponse)
def webhooks_page(request: Request, session: SessionDep, who: ViewerDep) -> HTMLResponse:
    hooks: list[dict[str, Any]] = []
    for hook in webhooks.of_tenant(session, who.principal):
        hooks.append(
            {
                "hook": hook,
                "system": webhooks.system_name(session, hook),
                "log": webhooks.deliveries(session, who.principal, hook.id, LATEST),
            }
        )
    return render(request, who.ws, "webhooks.html", {"title": "Webhooks", "hooks": hooks})
