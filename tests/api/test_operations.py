"""Health, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

import httpx
import pytest

from tests.support.service import candidate_body, wait_decided

pytestmark = pytest.mark.integration


def test_health_and_readiness_answer_when_everything_is_up(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "broker": "ok"}


def test_metrics_count_work_done_and_time_submissions(client: httpx.Client) -> None:
    submitted = client.post("/v1/candidates", json=candidate_body("baseline", trials=4)).json()
    wait_decided(client, submitted["id"])
    text = client.get("/metrics").text
    for name in (
        "assaygate_assays_running",
        "assaygate_assays_queued",
        "assaygate_shards_done_total",
        "assaygate_trials_executed_total",
        "assaygate_submission_seconds_bucket",
        "assaygate_gate_check_seconds_bucket",
    ):
        assert name in text
    trials = next(
        line for line in text.splitlines() if line.startswith("assaygate_trials_executed_total")
    )
    assert float(trials.split()[-1]) >= 18 * 4


def test_the_openapi_document_describes_the_routes_and_their_errors(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    submit = spec["paths"]["/v1/candidates"]["post"]
    assert {"202", "409", "413", "422", "503"} <= set(submit["responses"])
    assert "Idempotency-Key" in {p["name"] for p in submit["parameters"]}
    body = spec["components"]["schemas"]["CandidateCreate"]
    assert {"manifest", "source_revision"} <= set(body["required"])
    for path in ("/v1/candidates/{candidate_id}", "/v1/systems", "/v1/assays/{assay_id}"):
        assert path in spec["paths"]
