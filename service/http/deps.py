"""Every dependency a route may declare, each declared once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.app.gate import AnswerCache
from service.core.signing.dossier import Signer
from service.core.system.secret import SecretsKey
from service.db.apikey import Principal
from service.db.hotreads import HotReads, on_this_loop
from service.http.access import require_principal
from service.http.dispatch import Dispatcher
from service.http.limits import SubmissionLimit
from service.http.metrics import Metrics
from service.keys import ActiveKey, KeyRing, load_secrets_key
from service.settings import Settings

# Dependencies that only read the app's state are coroutines: FastAPI runs a plain `def`
# dependency on a worker thread, and each such hop costs a gate read more than its query does.


async def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def get_session(engine: Annotated[Engine, Depends(get_engine)]) -> Iterator[Session]:
    # Routes commit what they mean to keep; anything left uncommitted is rolled back on close.
    with Session(engine, expire_on_commit=False) as session:
        yield session


async def get_dispatcher(request: Request) -> Dispatcher:
    dispatcher: Dispatcher = request.app.state.dispatcher
    return dispatcher


def kick_webhooks(request: Request) -> Iterator[None]:
    """On a route that may commit webhook deliveries: once it returned (committed), send them
    now rather than at the reconciler's next round."""
    yield
    dispatcher: Dispatcher = request.app.state.dispatcher
    dispatcher.kick_webhooks(request.app.state.engine)


async def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


@dataclass(frozen=True)
class GateRead:
    """The app's state the gate route reads, as one dependency: FastAPI's work for each
    dependency it solves costs a cached gate read more than the read's own query does."""

    engine: Engine
    metrics: Metrics
    answers: AnswerCache
    #: The app's hot reads when they serve the loop this request runs on, else None.
    reads: HotReads | None


async def get_gate_read(request: Request) -> GateRead:
    state = request.app.state
    return GateRead(state.engine, state.metrics, state.gate_answers, on_this_loop(state.hot_reads))


async def get_submission_limit(request: Request) -> SubmissionLimit | None:
    limit: SubmissionLimit = request.app.state.submission_limit
    return limit


def get_signer(request: Request) -> Signer:
    """The active signing key, re-read after `assaygate keys rotate`; the lifespan creates the
    first one."""
    active: ActiveKey | None = getattr(request.app.state, "active_key", None)
    if active is None:
        settings: Settings = request.app.state.settings
        assert settings.keys_dir is not None
        active = ActiveKey(KeyRing(settings.keys_dir))
        request.app.state.active_key = active
    return active.current()


def get_injector_signer(request: Request) -> Signer:
    """The key that mints injector credentials: held by the API alone, never by a worker."""
    signer: Signer | None = getattr(request.app.state, "injector_signer", None)
    if signer is None:
        settings: Settings = request.app.state.settings
        signer = settings.injector_ring().load_or_create()
        request.app.state.injector_signer = signer
    return signer


def get_secrets_key(request: Request) -> SecretsKey:
    """The operator's key for tenants' secrets; the lifespan creates it on first start."""
    key: SecretsKey | None = getattr(request.app.state, "secrets_key", None)
    if key is None:
        settings: Settings = request.app.state.settings
        assert settings.secrets_key_file is not None
        key = load_secrets_key(settings.secrets_key_file, create=True)
        request.app.state.secrets_key = key
    return key


async def get_key_ring(request: Request) -> KeyRing:
    settings: Settings = request.app.state.settings
    assert settings.keys_dir is not None
    return KeyRing(settings.keys_dir)


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
EngineDep = Annotated[Engine, Depends(get_engine)]
SessionDep = Annotated[Session, Depends(get_session)]
DispatcherDep = Annotated[Dispatcher, Depends(get_dispatcher)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
GateReadDep = Annotated[GateRead, Depends(get_gate_read)]
SignerDep = Annotated[Signer, Depends(get_signer)]
InjectorSignerDep = Annotated[Signer, Depends(get_injector_signer)]
SecretsKeyDep = Annotated[SecretsKey, Depends(get_secrets_key)]
KeyRingDep = Annotated[KeyRing, Depends(get_key_ring)]
SubmissionLimitDep = Annotated[SubmissionLimit | None, Depends(get_submission_limit)]
PrincipalDep = Annotated[Principal, Depends(require_principal)]
#: `dependencies=[KickWebhooks]` on a route whose use case may emit webhook events.
KickWebhooks = Depends(kick_webhooks)
