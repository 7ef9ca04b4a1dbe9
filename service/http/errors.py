"""Errors of the HTTP edges themselves (a malformed body, a missing key, a role that may not),
and the one translation of an application error's kind into an HTTP status, which the API
answers as JSON and the dashboard as a page."""

from __future__ import annotations

from pydantic import BaseModel

from service.app.errors import AppError, Kind
from service.core.errors import AssaygateError

#: The one translation of an application error's kind into HTTP.
STATUS: dict[Kind, int] = {
    Kind.INVALID: 422,
    Kind.NOT_FOUND: 404,
    Kind.CONFLICT: 409,
    Kind.REFUSED: 403,
    Kind.RATE_LIMITED: 429,
    Kind.UNAVAILABLE: 503,
}


def status_of(exc: Exception, *, core: int = 422) -> int:
    """The HTTP status of an error a use case (or the core) raised; `core` for a core error (the
    API answers 422, the dashboard shows its form again with 400)."""
    if isinstance(exc, AppError):
        return STATUS[exc.kind]
    if isinstance(exc, ApiError):
        return exc.status_code
    if isinstance(exc, AssaygateError):
        return core
    return 500


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class ApiError(Exception):
    """An error of the HTTP layer itself; routes and dependencies raise these."""

    status_code = 400
    code = "bad_request"
    headers: dict[str, str] | None = None

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class CursorInvalid(ApiError):
    status_code = 400
    code = "cursor_invalid"


class Unauthenticated(ApiError):
    status_code = 401
    code = "unauthenticated"

    def __init__(self, message: str, field: str | None = "Authorization") -> None:
        super().__init__(message, field)
        self.headers = {"WWW-Authenticate": "Bearer"}


class Forbidden(ApiError):
    status_code = 403
    code = "forbidden"

    def __init__(self, message: str, field: str | None = "Authorization") -> None:
        super().__init__(message, field)


class BodyTooLarge(ApiError):
    """A streamed body (an artifact) past its cap, refused as soon as the cap is passed."""

    status_code = 413
    code = "body_too_large"

    def __init__(self, message: str, field: str | None = "body") -> None:
        super().__init__(message, field)
