"""The application layer's one error tree: what a use case refuses, and why.

Each error names the wire `code`, the `field` it is about and its `kind`; the edges translate
the kind once (`service.api.errors` into an HTTP status with a JSON body, the dashboard into a
page with the same status), so no use case knows about HTTP.
"""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    INVALID = "invalid"  # the input breaks a rule
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"  # well-formed, but the state (or the clock) says no
    REFUSED = "refused"  # this caller may not do this
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"  # a store the use case needs does not answer


class AppError(Exception):
    kind = Kind.INVALID
    code = "bad_request"

    def __init__(
        self, message: str, field: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.headers = headers


class FieldInvalid(AppError):
    kind = Kind.INVALID
    code = "field_invalid"


class NotFound(AppError):
    kind = Kind.NOT_FOUND
    code = "not_found"


class Conflict(AppError):
    kind = Kind.CONFLICT
    code = "conflict"


class IdempotencyConflict(Conflict):
    code = "idempotency_conflict"


class VersionTaken(Conflict):
    """A system's version already names another manifest: one version, one manifest."""

    code = "version_taken"


class ExpiryPassed(Conflict):
    """A review's expiry that the clock has already passed: it would lapse at once."""

    code = "expiry_passed"


class HoldNotOpen(Conflict):
    code = "hold_not_open"


class NotWaivable(Conflict):
    code = "not_waivable"


class ReviewerIsSubmitter(AppError):
    kind = Kind.REFUSED
    code = "reviewer_is_submitter"


class SubmissionRateLimited(AppError):
    kind = Kind.RATE_LIMITED
    code = "rate_limited"

    def __init__(self, message: str, retry_after: int, field: str | None = None) -> None:
        super().__init__(message, field, {"Retry-After": str(retry_after)})


class ServiceUnavailable(AppError):
    kind = Kind.UNAVAILABLE
    code = "service_unavailable"


class BrokerUnavailable(ServiceUnavailable):
    code = "broker_unavailable"


class SecretMissing(NotFound):
    """A manifest (or a worker) names a secret the tenant has not stored."""

    code = "secret_missing"


class CodeNotAllowed(AppError):
    """The manifest names the tenant's code, and no operator allowed that tenant to run code."""

    kind = Kind.REFUSED
    code = "code_not_allowed"


class DigestMismatch(Conflict):
    """The bytes received hash to another digest than the one the client claimed."""

    code = "digest_mismatch"


class PolicyRefused(AppError):
    """A submission or re-run sets a field looser than the organisation's policy allows; the
    message names the policy (its scope, versions and digest) and the policy's field."""

    kind = Kind.INVALID
    code = "policy_violation"


class PolicyLowered(AppError):
    """A tenant's admin may raise the tenant's bar, never lower it: lowering is an operator's."""

    kind = Kind.REFUSED
    code = "policy_lowered"
