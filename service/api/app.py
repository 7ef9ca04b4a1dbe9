"""The API's part of the application: its error translation, its routers (each behind the
request-text check and the access table) and its OpenAPI document. The app that mounts it next
to the dashboard is built by the composition root, `service.asgi.create_app`."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI

from service.api import errors
from service.api.cached_gate import CachedGateRead
from service.api.openapi import refine
from service.api.routes import (
    api_keys,
    artifacts,
    assays,
    candidates,
    dossiers,
    events,
    gate,
    health,
    holds,
    policy,
    secrets,
    systems,
    tenants,
    webhooks,
)
from service.http.access import authorize
from service.http.input import check_request_text
from service.settings import Settings


def install(app: FastAPI, settings: Settings) -> None:
    errors.install(app)
    # Every API route runs `authorize` (key, then the route's roles from the access table) and
    # documents what it may answer because of it, or because its input was refused.
    refusals: dict[int | str, dict[str, Any]] = {
        k: errors.ERROR_RESPONSES[k] for k in (400, 401, 403, 404, 413, 422, 429, 503)
    }
    for router in (
        candidates.router,
        artifacts.router,
        assays.router,
        dossiers.router,
        gate.router,
        holds.router,
        systems.router,
        events.router,
        api_keys.router,
        secrets.router,
        tenants.router,
        policy.router,
        webhooks.router,
        health.router,
    ):
        app.include_router(
            router,
            dependencies=[Depends(check_request_text), Depends(authorize)],
            responses=refusals,
        )
    # A repeated gate read whose answer is cached skips routing (service/api/cached_gate.py).
    app.add_middleware(CachedGateRead)
    # The document says what the service accepts, including what the models cannot say.
    derived = app.openapi

    def openapi() -> dict[str, Any]:
        if not getattr(app.state, "openapi_refined", False):
            refine(derived(), settings)
            app.state.openapi_refined = True
        return derived()

    app.openapi = openapi  # type: ignore[method-assign]
