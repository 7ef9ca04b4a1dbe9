"""Pages rendered from the templates, with the dashboard's security headers and the session
cookie renewed when the session is fresh. Below the page modules: they all render through it."""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup

from service.core.decision.gate import block_first
from service.http.browser import COOKIE, WebSession, csrf_token, encode_session, secret_of
from service.web import charts, present

HERE = Path(__file__).resolve().parent
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        pct=present.pct,
        signed=present.signed,
        when=present.when,
        short=lambda s, n=12: str(s)[:n],
        words=lambda s: str(s).replace("_", " "),
        # The `reason_list` macro orders every list it shows: one order on every page.
        block_first=block_first,
    )
    env.globals.update(
        signature_bars=lambda sig: Markup(charts.signature_bars(sig)),
        envelope_chart=lambda faults: Markup(charts.envelope_chart(faults)),
        coverage_matrix=lambda v, n: Markup(charts.coverage_matrix(v, n)),
    )
    return env


def render(
    request: Request,
    ws: WebSession,
    template: str,
    context: dict[str, Any],
    *,
    status_code: int = 200,
) -> HTMLResponse:
    secret = secret_of(request)
    html = (
        environment()
        .get_template(template)
        .render(
            request=request,
            identity=ws.identity,
            csrf=csrf_token(secret, ws),
            **context,
        )
    )
    response = HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)
    if ws.fresh:
        set_session_cookie(request, response, secret, ws)
    return response


def set_session_cookie(request: Request, response: Response, secret: bytes, ws: WebSession) -> None:
    response.set_cookie(
        COOKIE,
        encode_session(secret, ws),
        max_age=max(0, ws.expires - int(datetime.now().timestamp())),
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
        path="/",
    )


def not_found(request: Request, ws: WebSession, what: str) -> HTMLResponse:
    return render(
        request, ws, "error.html", {"title": "Not found", "message": what}, status_code=404
    )
