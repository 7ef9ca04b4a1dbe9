"""Bad input is refused with a JSON error naming the field, and writes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.support.service import candidate_body, row_counts

pytestmark = pytest.mark.integration


@pytest.fixture
def unchanged(engine: sa.Engine) -> Iterator[None]:
    before = row_counts(engine)
    yield
    assert row_counts(engine) == before


def refused(response: httpx.Response, status: int, field: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["field"] == field
    assert error["code"] and error["message"]
    return error


def test_a_body_that_is_not_json_is_refused(client: httpx.Client, unchanged: None) -> None:
    response = client.post(
        "/v1/candidates", content=b'{"manifest": {', headers={"content-type": "application/json"}
    )
    refused(response, 400, "body")


def test_a_body_over_the_limit_is_refused_before_it_is_read(
    client: httpx.Client, unchanged: None
) -> None:
    body = candidate_body("typed")
    body["manifest"]["prompt"] = {"padding": "x" * (1024 * 1024)}
    refused(client.post("/v1/candidates", json=body), 413, "body")


def test_a_chunked_body_over_the_limit_is_refused_too(
    client: httpx.Client, unchanged: None
) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"source_revision": "x", "manifest": {"prompt": "'
        for _ in range(1100):
            yield b"x" * 1024
        yield b'"}}'

    response = client.post(
        "/v1/candidates", content=chunks(), headers={"content-type": "application/json"}
    )
    refused(response, 413, "body")


def test_an_unknown_manifest_key_is_refused_naming_it(
    client: httpx.Client, unchanged: None
) -> None:
    body = candidate_body("typed")
    body["manifest"]["tools_v2"] = {}
    refused(client.post("/v1/candidates", json=body), 422, "manifest.tools_v2")


def test_an_unknown_control_is_refused_naming_it(client: httpx.Client, unchanged: None) -> None:
    body = candidate_body("typed")
    body["manifest"]["controls"]["pray"] = True
    refused(client.post("/v1/candidates", json=body), 422, "manifest.controls.pray")


def test_an_unknown_fault_mode_is_refused_naming_the_plan_field(
    client: httpx.Client, unchanged: None
) -> None:
    body = candidate_body("typed", modes=["cosmic_ray"])
    error = refused(client.post("/v1/candidates", json=body), 422, "plan.modes")
    assert "cosmic_ray" in error["message"]


def test_an_unknown_fault_family_is_refused_naming_the_plan_field(
    client: httpx.Client, unchanged: None
) -> None:
    body = candidate_body("typed", families=["weather"])
    refused(client.post("/v1/candidates", json=body), 422, "plan.families")


@pytest.mark.parametrize("trials", [0, -5])
def test_non_positive_trials_are_refused(
    client: httpx.Client, unchanged: None, trials: int
) -> None:
    body = candidate_body("typed", trials=trials)
    refused(client.post("/v1/candidates", json=body), 422, "plan.trials")


def test_trials_as_a_string_are_refused(client: httpx.Client, unchanged: None) -> None:
    body = candidate_body("typed", trials="100")
    refused(client.post("/v1/candidates", json=body), 422, "plan.trials")


def test_an_unknown_body_key_is_refused(client: httpx.Client, unchanged: None) -> None:
    body = {**candidate_body("typed"), "priority": "high"}
    refused(client.post("/v1/candidates", json=body), 422, "priority")


def test_a_missing_source_revision_is_refused(client: httpx.Client, unchanged: None) -> None:
    body = candidate_body("typed")
    del body["source_revision"]
    refused(client.post("/v1/candidates", json=body), 422, "source_revision")


def test_a_manifest_without_a_system_name_needs_one_in_the_body(
    client: httpx.Client, unchanged: None
) -> None:
    body = candidate_body("typed")
    del body["manifest"]["system"]
    refused(client.post("/v1/candidates", json=body), 422, "system")


def test_a_body_that_is_a_list_is_refused(client: httpx.Client, unchanged: None) -> None:
    refused(client.post("/v1/candidates", json=[1, 2]), 422, "body")
