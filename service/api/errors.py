"""The one place errors become HTTP: `{"error": {"code", "message", "field"}}` with a status.

Core errors carry the field inside the manifest or plan; here they get the prefix that names it
inside the request body, so a client can point at the exact key it sent.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from service.app.errors import (
    AppError,
    BrokerUnavailable,
    Conflict,
    ExpiryPassed,
    FieldInvalid,
    HoldNotOpen,
    IdempotencyConflict,
    NotFound,
    NotWaivable,
    ReviewerIsSubmitter,
    ServiceUnavailable,
    SubmissionRateLimited,
)
from service.app.records import DATABASE_ERRORS
from service.core.errors import AssaygateError, ManifestInvalid, PlanInvalid
from service.core.system.text import PATTERN_RULES
from service.http.errors import (
    STATUS,
    ApiError,
    CursorInvalid,
    ErrorDetail,
    ErrorResponse,
    Forbidden,
    Unauthenticated,
)

log = logging.getLogger("assaygate.api")

__all__ = [
    "ApiError",
    "BrokerUnavailable",
    "Conflict",
    "CursorInvalid",
    "ExpiryPassed",
    "FieldInvalid",
    "Forbidden",
    "HoldNotOpen",
    "IdempotencyConflict",
    "NotFound",
    "NotWaivable",
    "ReviewerIsSubmitter",
    "ServiceUnavailable",
    "SubmissionRateLimited",
    "Unauthenticated",
]

#: Documented on every route that can fail this way, so the OpenAPI schema tells the truth.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in {
        400: "Malformed request",
        401: "No API key, or an unknown or revoked one",
        403: "The key's roles do not allow this",
        404: "Not found",
        409: "Conflict with the resource's state (or an idempotency key reused)",
        413: "Request body too large",
        415: "The body is not of a type the route takes",
        422: "Invalid field",
        429: "Too many submissions for this key; see Retry-After",
        503: "Database or broker unavailable",
    }.items()
}


def error_response(
    status_code: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = ErrorResponse(error=ErrorDetail(code=code, message=message, field=field))
    return JSONResponse(body.model_dump(), status_code=status_code, headers=headers)


def _prefixed(prefix: str, field: str | None) -> str:
    if not field or field == prefix:
        return prefix
    return field if field.startswith(prefix + ".") else f"{prefix}.{field}"


def core_error_field(exc: AssaygateError) -> str | None:
    if isinstance(exc, ManifestInvalid):
        return _prefixed("manifest", exc.field)
    if isinstance(exc, PlanInvalid):
        return _prefixed("plan", exc.field)
    return exc.field


def _validation_field(loc: tuple[int | str, ...]) -> str:
    where, *path = loc or ("body",)
    if where == "header" and path:
        return "-".join(p.capitalize() for p in str(path[0]).split("-"))
    return ".".join(str(p) for p in path) or str(where)


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods some route of `app` serves at `path`."""
    methods: set[str] = set()
    for route in iter_route_contexts(app.routes):
        if route.path and route.methods and _path_regex(route.path).match(path):
            methods |= route.methods
    return sorted(methods)


@lru_cache(maxsize=512)
def _path_regex(template: str) -> re.Pattern[str]:
    regex, _format, _convertors = compile_path(template)
    return regex


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status_code, exc.code, exc.message, exc.field, exc.headers)

    @app.exception_handler(AppError)
    async def _app_error(_request: Request, exc: AppError) -> JSONResponse:
        return error_response(STATUS[exc.kind], exc.code, exc.message, exc.field, exc.headers)

    @app.exception_handler(AssaygateError)
    async def _core_error(_request: Request, exc: AssaygateError) -> JSONResponse:
        return error_response(422, exc.code, exc.message, core_error_field(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first: dict[str, Any] = dict(exc.errors()[0]) if exc.errors() else {}
        loc = tuple(first.get("loc", ("body",)))
        if first.get("type") == "json_invalid":
            return error_response(400, "body_malformed", "body is not valid JSON", "body")
        kind = first.get("type", "")
        message = str(first.get("msg", "invalid value"))
        if kind == "extra_forbidden":
            message = "unknown key"
        elif kind == "string_pattern_mismatch":
            message = PATTERN_RULES.get(str(first.get("ctx", {}).get("pattern")), message)
        return error_response(422, "field_invalid", message, _validation_field(loc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        headers = dict(exc.headers) if exc.headers else {}
        if exc.status_code == 405:
            # Every method the path answers to, not only the first route's (RFC 9110 15.5.6).
            headers["Allow"] = ", ".join(allowed_methods(request.app, request.url.path))
        return error_response(exc.status_code, code, str(exc.detail), headers=headers or None)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error", exc_info=exc)
        return error_response(500, "internal_error", "the service failed; see its log")

    for error in DATABASE_ERRORS:

        @app.exception_handler(error)
        async def _database_down(_request: Request, exc: Exception) -> JSONResponse:
            log.warning("database unavailable: %s", exc.__class__.__name__)
            return error_response(503, "database_unavailable", "the database is unreachable")
