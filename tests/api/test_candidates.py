"""Submitting candidates over HTTP to real workers on PostgreSQL and Redis."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from service.app.admission import shard_size
from service.core.faults.plan import parse_plan
from service.core.shards.assay import plan_shards
from service.core.system.manifest import parse_manifest
from service.db.models import Event, FaultResultRow
from service.settings import Settings
from tests.support.reports import figures
from tests.support.service import (
    candidate_body,
    example,
    local_report,
    quiet,
    row_counts,
    wait_decided,
)

pytestmark = pytest.mark.integration


def stored_faults(engine: sa.Engine, assay_id: str) -> list[dict[str, Any]]:
    """The per-fault results as stored, put back together into the report's fault entries."""
    with Session(engine) as session:
        rows = session.exec(
            select(FaultResultRow).where(FaultResultRow.assay_id == uuid.UUID(assay_id))
        ).all()
    return [{**row.signature, "samples": row.evidence} for row in rows]


def test_typed_candidate_is_decided_with_the_local_assay_figures(
    client: httpx.Client, engine: sa.Engine
) -> None:
    response = client.post("/v1/candidates", json=candidate_body("typed", trials=30, seed=11))
    assert response.status_code == 202
    submitted = response.json()
    assert submitted["status"] == "queued"
    assert response.headers["location"] == f"/v1/candidates/{submitted['id']}"

    done = wait_decided(client, submitted["id"])
    expected = local_report("typed", trials=30, seed=11)

    assert done["status"] == "done"
    assert done["decision"] == expected["decision"]
    assert done["reasons"] == expected["reasons"]
    assert done["progress"]["trials_done"] == done["progress"]["trials_planned"] == 18 * 30
    stored = figures({"faults": stored_faults(engine, done["assay_id"])})
    by_id = {f["id"]: f for f in stored["faults"]}
    assert by_id == {f["id"]: f for f in figures(expected)["faults"]}
    assay = client.get(f"/v1/assays/{done['assay_id']}").json()
    assert figures(assay["report"]) == figures(expected)
    assert all(f["final"] and f["signature"] for f in assay["faults"])


def test_an_assay_shows_per_fault_progress(client: httpx.Client) -> None:
    body = candidate_body(
        "typed", trials=120, seed=3, modes=["subject_swap", "timeout_after_commit"]
    )
    submitted = client.post("/v1/candidates", json=body).json()
    assay = client.get(f"/v1/assays/{submitted['assay_id']}").json()
    assert [f["id"] for f in assay["faults"]] == ["subject_swap", "timeout_after_commit"]
    # trials_per_shard is 50 in these tests: 120 trials are shards of 50, 50 and 20.
    assert all(f["progress"]["shard_count"] == 3 for f in assay["faults"])
    assert all(f["progress"]["trials_planned"] == 120 for f in assay["faults"])
    wait_decided(client, submitted["id"])
    assay = client.get(f"/v1/assays/{submitted['assay_id']}").json()
    assert all(f["progress"]["trials_done"] == 120 for f in assay["faults"])


def test_a_repeated_idempotency_key_replays_the_first_response(
    client: httpx.Client, engine: sa.Engine
) -> None:
    key = f"ci-{uuid.uuid4()}"
    body = candidate_body("baseline", trials=5, seed=1)
    first = client.post("/v1/candidates", json=body, headers={"Idempotency-Key": key})
    wait_decided(client, first.json()["id"])
    quiet(engine)
    before = row_counts(engine)
    again = client.post("/v1/candidates", json=body, headers={"Idempotency-Key": key})
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    # The replay says where the candidate is, as the first answer did.
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["location"] == f"/v1/candidates/{first.json()['id']}"
    assert row_counts(engine) == before


def test_the_same_idempotency_key_with_another_body_is_a_conflict(
    client: httpx.Client, engine: sa.Engine
) -> None:
    key = f"ci-{uuid.uuid4()}"
    first = client.post(
        "/v1/candidates",
        json=candidate_body("baseline", trials=5),
        headers={"Idempotency-Key": key},
    )
    wait_decided(client, first.json()["id"])
    quiet(engine)
    before = row_counts(engine)
    other = client.post(
        "/v1/candidates",
        json=candidate_body("baseline", trials=6),
        headers={"Idempotency-Key": key},
    )
    assert other.status_code == 409
    assert other.json()["error"]["field"] == "Idempotency-Key"
    assert row_counts(engine) == before


def test_candidates_are_listed_newest_first_a_page_at_a_time(client: httpx.Client) -> None:
    system = f"paged-{uuid.uuid4().hex[:8]}"
    ids = []
    for n in range(5):
        body = {**candidate_body("baseline", trials=1), "system": system, "version": f"1.{n}"}
        ids.append(client.post("/v1/candidates", json=body).json()["id"])
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"system": system, "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/v1/candidates", params=params).json()
        seen += [c["id"] for c in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    systems = {s["name"]: s for s in client.get("/v1/systems").json()["items"]}
    assert systems[system]["candidates"] == 5
    assert systems[system]["latest"]["id"] == ids[-1]


def test_a_garbled_cursor_is_refused_naming_the_cursor(client: httpx.Client) -> None:
    response = client.get("/v1/candidates", params={"cursor": "not-a-cursor"})
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "cursor"


def test_any_cursor_of_the_documented_shape_is_accepted(client: httpx.Client) -> None:
    first = client.get("/v1/candidates").json()
    for cursor, expected in (
        # Before the first microsecond of the epoch: nothing is older.
        ("0." + "0" * 32, []),
        # Far in the future: everything is older, so the page is the first page.
        ("9" * 17 + "." + "f" * 32, [c["id"] for c in first["items"]]),
    ):
        answer = client.get("/v1/candidates", params={"cursor": cursor})
        assert answer.status_code == 200, (cursor, answer.text)
        assert [c["id"] for c in answer.json()["items"]] == expected, cursor
    answer = client.get("/v1/candidates", params={"cursor": f"1764547200000000.{uuid.uuid4().hex}"})
    assert answer.status_code == 200, answer.text
    assert set(answer.json()) >= {"items", "next_cursor"}


def test_an_unknown_candidate_is_a_json_404(client: httpx.Client) -> None:
    response = client.get(f"/v1/candidates/{uuid.uuid4()}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_every_stored_event_is_append_only(client: httpx.Client, engine: sa.Engine) -> None:
    submitted = client.post("/v1/candidates", json=candidate_body("baseline", trials=1)).json()
    wait_decided(client, submitted["id"])
    with Session(engine) as session:
        kinds = session.exec(
            select(Event.kind).where(Event.candidate_id == uuid.UUID(submitted["id"]))
        ).all()
        assert {"candidate.submitted", "shard.started", "shard.stored", "assay.decided"} <= set(
            kinds
        )
        with pytest.raises(sa.exc.DBAPIError, match="append-only"):
            session.execute(sa.text("UPDATE event SET kind = 'rewritten'"))


def test_a_huge_plan_gets_larger_shards_not_more_of_them(settings: Settings) -> None:
    plan = parse_plan({"trials": 10_000_000})
    size = shard_size(plan, settings)
    count = len(plan_shards(parse_manifest(example("typed")), plan, trials_per_shard=size))
    assert count <= settings.max_shards_per_assay
    assert shard_size(parse_plan({"trials": 30}), settings) == settings.trials_per_shard


def test_a_second_manifest_under_a_systems_version_is_a_conflict_naming_the_first(
    client: httpx.Client, engine: sa.Engine
) -> None:
    # One version, one manifest: `gate --version` must have one answer. The same manifest again
    # is a re-run of that version; a changed one is refused and nothing is stored.
    version = f"9.0.{uuid.uuid4().hex[:8]}"
    body = candidate_body("typed", trials=2, modes=["subject_swap"])
    body["version"] = version
    first = client.post("/v1/candidates", json=body)
    assert first.status_code == 202
    again = client.post("/v1/candidates", json=body)
    assert again.status_code == 202 and again.json()["id"] != first.json()["id"]
    wait_decided(client, first.json()["id"])
    wait_decided(client, again.json()["id"])
    quiet(engine)
    before = row_counts(engine)
    other = candidate_body("baseline", trials=2, modes=["subject_swap"])
    other["version"] = version
    refused = client.post("/v1/candidates", json=other)
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "version_taken" and error["field"] == "version"
    assert first.json()["id"] in error["message"]
    assert row_counts(engine) == before
