"""Liveness, readiness and metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.api.errors import ServiceUnavailable
from service.api.schemas import Health, Readiness
from service.app import operations
from service.http.deps import DispatcherDep, EngineDep, MetricsDep

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """The process is up. Says nothing about the database or the broker (see /readyz)."""
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "database or broker unreachable"}},
)
def readyz(engine: EngineDep, dispatcher: DispatcherDep) -> JSONResponse:
    """Ready to accept submissions: the database and the broker both answer."""
    checks: dict[str, str] = {}
    checks["database"] = operations.database(engine)
    try:
        dispatcher.ping()
        checks["broker"] = "ok"
    except ServiceUnavailable as exc:
        checks["broker"] = exc.message
    ready = all(v == "ok" for v in checks.values())
    body = Readiness(status="ok" if ready else "unavailable", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get("/metrics", response_class=Response)
def metrics(request: Request, metrics: MetricsDep) -> Response:
    """Prometheus text exposition, for the scrape token (`ASSAYGATE_METRICS_TOKEN`). Without a
    token configured a tenant admin's key still reads it, deprecated: without the series that
    name tenants, and with a `Deprecation` header."""
    if getattr(request.state, "principal", None) is None:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
    return Response(
        generate_latest(metrics.legacy),
        media_type=CONTENT_TYPE_LATEST,
        headers={
            "Deprecation": "true",
            "Warning": '299 - "a tenant key reading /metrics is deprecated: set '
            'ASSAYGATE_METRICS_TOKEN and scrape with it (docs/operations.md, Metrics)"',
        },
    )
