"""Every dependency a route may declare, each declared once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.api.dispatch import Dispatcher
from service.api.metrics import Metrics
from service.core.dossier import Signer
from service.keys import KeyRing
from service.settings import Settings


def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def get_session(engine: Annotated[Engine, Depends(get_engine)]) -> Iterator[Session]:
    # Routes commit what they mean to keep; anything left uncommitted is rolled back on close.
    with Session(engine, expire_on_commit=False) as session:
        yield session


def get_dispatcher(request: Request) -> Dispatcher:
    dispatcher: Dispatcher = request.app.state.dispatcher
    return dispatcher


def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


def get_signer(request: Request) -> Signer:
    """The active signing key; the lifespan loads it, first use loads it when there is none."""
    signer: Signer | None = getattr(request.app.state, "signer", None)
    if signer is None:
        settings: Settings = request.app.state.settings
        assert settings.keys_dir is not None
        signer = KeyRing(settings.keys_dir).load_or_create()
        request.app.state.signer = signer
    return signer


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
EngineDep = Annotated[Engine, Depends(get_engine)]
SessionDep = Annotated[Session, Depends(get_session)]
DispatcherDep = Annotated[Dispatcher, Depends(get_dispatcher)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
SignerDep = Annotated[Signer, Depends(get_signer)]
