"""Every refusal a use case can raise has one HTTP status, the same for the API's JSON and the
dashboard's page; a core error is bad input (422)."""

from __future__ import annotations

import pytest

from service.app import errors
from service.core.errors import PlanInvalid
from service.http.errors import STATUS, Unauthenticated, status_of


def test_every_kind_of_application_error_has_an_http_status() -> None:
    assert set(STATUS) == set(errors.Kind)


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (errors.FieldInvalid("a waiver needs an expiry", field="expires_at"), 422),
        (errors.NotFound("no hold", field="hold_id"), 404),
        (errors.HoldNotOpen("hold is waived", field="hold_id"), 409),
        (errors.ExpiryPassed("the expiry must be in the future", field="expires_at"), 409),
        (errors.ReviewerIsSubmitter("you submitted it", field="Authorization"), 403),
        (errors.SubmissionRateLimited("slow down", retry_after=7), 429),
        (errors.BrokerUnavailable("the broker is unreachable"), 503),
        (PlanInvalid("trials must be positive", field="trials"), 422),
        (Unauthenticated("send an API key"), 401),
    ],
)
def test_an_error_reads_as_the_status_its_kind_names(error: Exception, status: int) -> None:
    assert status_of(error) == status


def test_a_rate_limit_tells_the_caller_when_to_come_back() -> None:
    assert errors.SubmissionRateLimited("slow down", retry_after=7).headers == {"Retry-After": "7"}
