"""The composition root: the one FastAPI app that mounts the API and the dashboard side by side,
built by `create_app(settings)`; importing this module does nothing. Neither the API nor the
dashboard imports the other; both are assembled here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy.engine import Engine

from service.api import app as api
from service.api.routes.artifacts import ARTIFACTS_PATH
from service.app.gate import AnswerCache
from service.db.hotreads import HotReads
from service.db.session import make_engine
from service.http.browser import load_secret
from service.http.dispatch import Dispatcher
from service.http.limits import SubmissionLimit
from service.http.metrics import Metrics
from service.http.middleware import BodyLimit, RequestLog
from service.keys import KeyRing, load_secrets_key
from service.settings import Settings
from service.web import routes as web


def create_app(
    settings: Settings, *, engine: Engine | None = None, dispatcher: Dispatcher | None = None
) -> FastAPI:
    engine = engine or make_engine(settings)
    dispatcher = dispatcher or Dispatcher(settings)
    hot_reads = HotReads.for_engine(
        engine, size=settings.db_pool_size, timeout=settings.readiness_timeout * 2
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        assert settings.keys_dir is not None
        # Both keys are created on first start (or loaded); the injector key never leaves the API.
        app.state.signer = KeyRing(settings.keys_dir).load_or_create()
        app.state.injector_signer = settings.injector_ring().load_or_create()
        # The dashboard's session secret: the API's own file, never in the folder workers mount.
        app.state.web_secret = load_secret(settings)
        # The key of tenants' secrets: the API's and the tenant workers', never in `keys_dir`.
        assert settings.secrets_key_file is not None
        app.state.secrets_key = load_secrets_key(settings.secrets_key_file, create=True)
        dispatcher.prepare()
        if hot_reads is not None:
            await hot_reads.open()
        yield
        if hot_reads is not None:
            await hot_reads.close()
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
    app.state.metrics = Metrics(engine, settings)
    app.state.gate_answers = AnswerCache()
    app.state.hot_reads = hot_reads
    app.state.submission_limit = SubmissionLimit(settings)
    api.install(app, settings)
    app.include_router(web.router)
    # Outermost last: the log line sees the 413 the limit sends.
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        streamed={("POST", ARTIFACTS_PATH): settings.artifact_max_bytes},
    )
    app.add_middleware(RequestLog)
    return app
