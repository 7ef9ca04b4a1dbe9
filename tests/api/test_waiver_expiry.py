"""A waiver lasts no longer than the organisation allows: the policy's `max_waiver_days` (or the
default, 90 days) bounds the expiry a reviewer may ask for, through the service. Asked longer,
the waiver is refused with a 422 naming `expires_at` and the maximum, and the hold stays open; a
tenant's admin may shorten the maximum, never lengthen it past the default."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.support.api import decided, system_name
from tests.support.keys import KeyBook
from tests.support.service import example

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REFUSED = {"trials": 5, "seed": 4, "modes": ["drop_effect_receipt"]}
# The documented default (service.core.decision.policy.DEFAULT_MAX_WAIVER_DAYS).
DEFAULT_MAX_WAIVER_DAYS = 90


@pytest.fixture
def tenant(api_url: str, keys: KeyBook) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """A tenant of its own (its policy changes nobody's): alice submits, bob reviews."""
    name = f"waive-{uuid.uuid4().hex[:8]}"
    alice = keys.headers(f"alice-{name}", tenant=name)
    bob = keys.headers(f"bob-{name}", tenant=name)
    with (
        httpx.Client(base_url=api_url, timeout=30.0, headers=alice) as submitter,
        httpx.Client(base_url=api_url, timeout=30.0, headers=bob) as reviewer,
    ):
        yield submitter, reviewer


def held(submitter: httpx.Client) -> str:
    system = system_name()
    decided(submitter, example("refuse-all"), system=system, version="1", plan=REFUSED)
    gate = submitter.get(f"/v1/gate/{system}").json()
    assert gate["decision"] == "hold" and gate["hold_id"], gate
    hold: str = gate["hold_id"]
    return hold


def waive(reviewer: httpx.Client, hold: str, days: float) -> httpx.Response:
    until = (datetime.now(UTC) + timedelta(days=days)).isoformat()
    return reviewer.post(f"/v1/holds/{hold}/waive", json={"reason": "pilot", "expires_at": until})


def error(response: httpx.Response) -> dict[str, Any]:
    found: dict[str, Any] = response.json()["error"]
    return found


def test_a_waiver_asked_past_the_default_maximum_is_refused_naming_the_field_and_the_maximum(
    tenant: tuple[httpx.Client, httpx.Client],
) -> None:
    submitter, reviewer = tenant
    hold = held(submitter)
    refused = waive(reviewer, hold, DEFAULT_MAX_WAIVER_DAYS + 1)
    assert refused.status_code == 422, refused.text
    assert error(refused)["field"] == "expires_at"
    assert f"at most {DEFAULT_MAX_WAIVER_DAYS} days" in error(refused)["message"]
    assert submitter.get(f"/v1/holds/{hold}").json()["status"] == "open"
    assert waive(reviewer, hold, DEFAULT_MAX_WAIVER_DAYS - 1).status_code == 200


def test_a_policys_shorter_maximum_bounds_the_waiver_and_an_admin_cannot_lengthen_it(
    tenant: tuple[httpx.Client, httpx.Client],
) -> None:
    submitter, reviewer = tenant
    longer = submitter.put("/v1/policy", json={"max_waiver_days": DEFAULT_MAX_WAIVER_DAYS + 30})
    assert longer.status_code == 403, longer.text  # lowering the bar is an operator's
    assert error(longer)["field"] == "max_waiver_days"
    shorter = submitter.put("/v1/policy", json={"max_waiver_days": 7})
    assert shorter.status_code == 200, shorter.text
    hold = held(submitter)
    refused = waive(reviewer, hold, 8)
    assert refused.status_code == 422, refused.text
    assert error(refused)["field"] == "expires_at"
    assert "at most 7 days" in error(refused)["message"]
    assert "max_waiver_days" in error(refused)["message"]
    assert waive(reviewer, hold, 6).status_code == 200


def test_a_hold_names_its_system_and_version_and_the_allow_over_its_waiver_names_its_reasons(
    tenant: tuple[httpx.Client, httpx.Client],
) -> None:
    submitter, reviewer = tenant
    hold = held(submitter)
    (listed,) = submitter.get("/v1/holds", params={"status": "open"}).json()["items"]
    candidate = submitter.get(f"/v1/candidates/{listed['candidate_id']}").json()
    named = {"system": candidate["system"], "version": "1"}
    assert {k: listed[k] for k in named} == named and listed["id"] == hold
    fetched = submitter.get(f"/v1/holds/{hold}").json()
    assert {k: fetched[k] for k in named} == named
    reviewed = waive(reviewer, hold, 1).json()["hold"]
    assert {k: reviewed[k] for k in named} == named
    # The allow over the waiver still names what it lifted: the gate's answer and the
    # candidate's gate field carry the hold's reasons as `waived` (the reports read them).
    gate = submitter.get(f"/v1/gate/{named['system']}").json()
    assert (gate["decision"], gate["basis"]) == ("allow", "waived")
    assert [r["code"] for r in gate["reasons"]] == ["waived"]
    assert gate["waived"] == listed["reasons"] and gate["waived"]
    again = submitter.get(f"/v1/candidates/{listed['candidate_id']}").json()["gate"]
    assert again["waived"] == listed["reasons"]
