"""Every dependency a route may declare, each declared once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.api.dispatch import Dispatcher
from service.api.metrics import Metrics
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


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
EngineDep = Annotated[Engine, Depends(get_engine)]
SessionDep = Annotated[Session, Depends(get_session)]
DispatcherDep = Annotated[Dispatcher, Depends(get_dispatcher)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
