"""An agent makes the gate store what it says (B5: three trials stored ~43 MB in PostgreSQL
though the API takes 1 MiB a request). Through the real service — the API, PostgreSQL, Redis and
the shared worker that assays a remote agent — an HTTP agent that releases claims of almost a MiB
each, five a trial, leaves the report, the per-fault rows, each shard's result, the events and
the signed dossier of its assay within the quotas the deployment sets; the dossier says what was
cut, and no count is."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from tests.adversarial.agents.liar_http import HOARD_CHARS, HOARD_CLAIMS
from tests.adversarial.conftest import LIAR_HTTP
from tests.adversarial.deployment import Deployment, deployment
from tests.support.agents import agent_processes
from tests.support.service import candidate_body, example, wait_decided

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TENANT = "hoarder"
TRIALS = 3
#: Small quotas, so the attack's megabytes are far over them.
QUOTAS = {
    "quota_report_bytes": 256 * 1024,
    "quota_samples_bytes": 64 * 1024,
    "quota_dossier_bytes": 256 * 1024,
    "quota_string_chars": 1024,
}
EVENT_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    folder = tmp_path_factory.mktemp("quota")
    with deployment(folder, "quota", {}, **QUOTAS) as service:
        yield service


@pytest.fixture(scope="module")
def hoarded(gate: Deployment) -> Iterator[dict[str, Any]]:
    """The decided candidate of the hoarding agent."""
    with agent_processes(LIAR_HTTP) as start:
        url = start("--mode", "hoard")
        body = candidate_body("typed", trials=TRIALS, seed=3, modes=["timeout_before_send"])
        body["manifest"] = {**example("typed"), "target": {"kind": "http", "url": url}}
        with gate.submitter(TENANT) as client:
            submitted = client.post("/v1/candidates", json=body)
            assert submitted.status_code == 202, submitted.text
            done = wait_decided(client, submitted.json()["id"], timeout=300)
    assert done["decision"] in ("allow", "hold", "block"), done
    yield done


def stored_bytes(gate: Deployment, assay_id: str) -> dict[str, int]:
    """What PostgreSQL holds of the assay, by place (the JSON text's length)."""
    queries = {
        "report": "select coalesce(max(length(report::text)), 0) from assay where id = :a",
        "fault rows": "select coalesce(sum(length(evidence::text)), 0) from fault_result"
        " where assay_id = :a",
        "largest shard result": "select coalesce(max(length(result::text)), 0) from assay_shard"
        " where assay_id = :a",
        "dossier": "select coalesce(max(octet_length(payload)), 0) from dossier"
        " where assay_id = :a",
        "largest event": "select coalesce(max(length(data::text)), 0) from event"
        " where assay_id = :a",
    }
    with gate.engine.connect() as db:
        return {
            place: int(db.execute(sa.text(sql), {"a": uuid.UUID(assay_id)}).scalar_one())
            for place, sql in queries.items()
        }


def test_what_a_hoarding_agent_says_is_stored_within_the_assays_quotas(
    gate: Deployment, hoarded: dict[str, Any]
) -> None:
    said = TRIALS * (HOARD_CLAIMS + 1) * HOARD_CHARS
    sizes = stored_bytes(gate, hoarded["assay_id"])
    assert sizes["report"] <= QUOTAS["quota_report_bytes"], sizes
    # The signed statement: the predicate, and the subjects beside it.
    assert sizes["dossier"] <= QUOTAS["quota_dossier_bytes"] + 4096, sizes
    assert sizes["fault rows"] <= QUOTAS["quota_samples_bytes"] + 4096, sizes
    assert sizes["largest shard result"] <= 2 * max(QUOTAS["quota_samples_bytes"], 64 * 1024)
    assert sizes["largest event"] <= EVENT_BYTES + 1024, sizes
    assert sum(sizes.values()) < said // 10, (sizes, said)


def test_the_signed_dossier_says_what_was_cut_and_keeps_every_count(
    gate: Deployment, hoarded: dict[str, Any]
) -> None:
    with gate.submitter(TENANT) as client:
        dossier = client.get(f"/v1/candidates/{hoarded['id']}/dossier")
        assay = client.get(f"/v1/assays/{hoarded['assay_id']}")
    assert dossier.status_code == 200 and assay.status_code == 200, (dossier.text, assay.text)
    predicate = json.loads(base64.b64decode(dossier.json()["envelope"]["payload"]))["predicate"]
    cut = predicate["cut"]
    assert cut["strings"] > 0 and cut["characters"] > HOARD_CHARS, cut
    [run] = predicate["runs"]
    assert run["planned"] == TRIALS and run["exercised"] + run["not_exercised"] == TRIALS
    assert predicate["decision"] == hoarded["decision"]
    claims = [c for s in run["samples"] for c in s.get("claims", [])]
    assert claims, "what fits of the trials is still shown"
    assert all(c["ledger_ref"].endswith(" more characters]") for c in claims)
