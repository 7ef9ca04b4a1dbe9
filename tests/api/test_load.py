"""Twenty candidates at once, on two workers: every one decided with the right figures."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from service.core.faults.plan import parse_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import parse_manifest
from tests.support.keys import KeyBook
from tests.support.reports import figures
from tests.support.service import candidate_body, quiet, row_counts, wait_decided

pytestmark = pytest.mark.integration

EXAMPLES = ("typed", "baseline", "typed-repair", "refuse-all")
TRIALS = 8


def submission(n: int) -> tuple[str, dict[str, Any]]:
    name = EXAMPLES[n % len(EXAMPLES)]
    return name, candidate_body(name, source_revision=f"rev{n}", trials=TRIALS, seed=1000 + n)


def test_twenty_concurrent_candidates_all_complete_with_correct_results(
    api_url: str, engine: sa.Engine, keys: KeyBook
) -> None:
    auth = keys.headers("ci")
    submissions = [submission(n) for n in range(20)]
    idempotency = [f"load-{uuid.uuid4()}" for _ in submissions]

    def post(i: int) -> httpx.Response:
        with httpx.Client(base_url=api_url, timeout=60.0, headers=auth) as client:
            return client.post(
                "/v1/candidates",
                json=submissions[i][1],
                headers={"Idempotency-Key": idempotency[i]},
            )

    with ThreadPoolExecutor(max_workers=20) as pool:
        responses = list(pool.map(post, range(20)))
    assert [r.status_code for r in responses] == [202] * 20
    ids = [r.json()["id"] for r in responses]
    assert len(set(ids)) == 20

    with httpx.Client(base_url=api_url, timeout=30.0, headers=auth) as client:
        decided = [wait_decided(client, candidate_id) for candidate_id in ids]
        for (name, body), done in zip(submissions, decided, strict=True):
            expected = run_assay(parse_manifest(body["manifest"]), parse_plan(body["plan"]))
            report = client.get(f"/v1/assays/{done['assay_id']}").json()["report"]
            assert figures(report)["faults"] == figures(expected.to_dict())["faults"], name
            assert done["decision"] == expected.decision, name

    quiet(engine)
    before = row_counts(engine)
    with ThreadPoolExecutor(max_workers=20) as pool:
        replays = list(pool.map(post, range(20)))
    assert [r.json()["id"] for r in replays] == ids
    assert all(r.headers["idempotent-replayed"] == "true" for r in replays)
    assert row_counts(engine) == before
