"""The FastAPI application, built by `create_app(settings)`; importing this module does nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from sqlalchemy.engine import Engine

from service.api import errors
from service.api.access import authorize
from service.api.dispatch import Dispatcher
from service.api.input import check_request_text
from service.api.limits import SubmissionLimit
from service.api.metrics import Metrics
from service.api.middleware import BodyLimit, RequestLog
from service.api.openapi import refine
from service.api.routes import (
    api_keys,
    assays,
    candidates,
    dossiers,
    events,
    gate,
    health,
    holds,
    systems,
)
from service.db.session import make_engine
from service.keys import KeyRing
from service.settings import Settings
from service.web import routes as web
from service.web.auth import load_secret


def create_app(
    settings: Settings, *, engine: Engine | None = None, dispatcher: Dispatcher | None = None
) -> FastAPI:
    engine = engine or make_engine(settings)
    dispatcher = dispatcher or Dispatcher(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        assert settings.keys_dir is not None
        # Both keys are created on first start (or loaded); the injector key never leaves the API.
        app.state.signer = KeyRing(settings.keys_dir).load_or_create()
        app.state.injector_signer = settings.injector_ring().load_or_create()
        # The dashboard's session secret: the API's own file, never in the folder workers mount.
        app.state.web_secret = load_secret(settings)
        dispatcher.prepare()
        yield
        app.state.submission_limit.close()
        dispatcher.close()
        engine.dispose()

    app = FastAPI(
        title="Assaygate",
        summary="Release gate for tool-using AI agents: typed fault assays as release evidence.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.dispatcher = dispatcher
    app.state.metrics = Metrics(engine)
    app.state.submission_limit = SubmissionLimit(settings)
    errors.install(app)
    # Every API route runs `authorize` (key, then the route's roles from the access table) and
    # documents what it may answer because of it, or because its input was refused.
    refusals: dict[int | str, dict[str, Any]] = {
        k: errors.ERROR_RESPONSES[k] for k in (400, 401, 403, 404, 413, 422, 429, 503)
    }
    for router in (
        candidates.router,
        assays.router,
        dossiers.router,
        gate.router,
        holds.router,
        systems.router,
        events.router,
        api_keys.router,
        health.router,
    ):
        app.include_router(
            router,
            dependencies=[Depends(check_request_text), Depends(authorize)],
            responses=refusals,
        )
    app.include_router(web.router)
    # The document says what the service accepts, including what the models cannot say.
    derived = app.openapi

    def openapi() -> dict[str, Any]:
        if not getattr(app.state, "openapi_refined", False):
            refine(derived(), settings)
            app.state.openapi_refined = True
        return derived()

    app.openapi = openapi  # type: ignore[method-assign]
    # Outermost last: the log line sees the 413 the limit sends.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestLog)
    return app
