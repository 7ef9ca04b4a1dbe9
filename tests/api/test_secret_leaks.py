"""A submitter who may not read the tenant's secrets writes code that hands one back through the
report: in a claim, a tool argument and its error, plain and encoded. Through the real API, the
tenant's own worker and its sandbox, none of it reaches `GET /v1/assays/{id}`, the candidate or
the signed dossier."""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa

from service.settings import Settings
from tests.api.test_secrets import admin, allow_code, everyone, python_manifest
from tests.support.keys import KeyBook
from tests.support.service import WorkerProcess, candidate_body, tenant_code, wait_decided

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TENANT = "leaky"
VALUE = "sk-leak-7Hq2/Zp9Xw4Lm\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"


def leaks(text: str) -> list[str]:
    raw = VALUE.encode()
    forms = {
        "plain": VALUE,
        "first line": VALUE.splitlines()[0],
        "last line": VALUE.splitlines()[-1],
        "base64": base64.b64encode(raw).decode(),
        "base64url": base64.urlsafe_b64encode(raw).decode(),
        "hex": binascii.hexlify(raw).decode(),
        "url-encoded": quote(VALUE, safe=""),
        "url-encoded, its / kept": quote(VALUE),
        # MIME wraps base64 at 76 columns: any one whole line of it is a leak.
        **{
            f"mime base64 line {i}": line
            for i, line in enumerate(base64.encodebytes(raw).decode().splitlines())
            if len(line) >= 16
        },
        "reversed": VALUE[::-1],
        "json-escaped": json.dumps(VALUE)[1:-1],
    }
    return [name for name, form in forms.items() if form in text]


def test_a_secret_printed_claimed_or_sent_encoded_never_reaches_the_report_or_the_dossier(
    client: httpx.Client, keys: KeyBook, engine: sa.Engine, settings: Settings, tmp_path: Path
) -> None:
    stored = client.put("/v1/secrets/LEAK_KEY", json={"value": VALUE}, headers=admin(keys, TENANT))
    assert stored.status_code == 200, stored.text
    submitter = everyone(keys, TENANT)
    allow_code(engine, TENANT)
    body = candidate_body("typed", trials=3, seed=3, modes=["timeout_before_send"])
    body["manifest"] = python_manifest(
        entrypoint="tests.adversarial.agents.leaker:agent", secrets=["LEAK_KEY"]
    )
    worker = WorkerProcess(settings, "tw-leaky", tmp_path, tenant=TENANT, code_dir=tenant_code())
    try:
        submitted = client.post("/v1/candidates", json=body, headers=submitter)
        assert submitted.status_code == 202, submitted.text
        done = wait_decided(client, submitted.json()["id"], headers=submitter)
    finally:
        worker.stop()
    assay = client.get(f"/v1/assays/{done['assay_id']}", headers=submitter)
    assert assay.status_code == 200, assay.text
    dossier = client.get(f"/v1/candidates/{done['id']}/dossier", headers=submitter)
    assert dossier.status_code == 200, dossier.text
    payload = base64.b64decode(dossier.json()["envelope"]["payload"]).decode()
    candidate = client.get(f"/v1/candidates/{done['id']}", headers=submitter).text
    events = client.get("/v1/events", headers=submitter).text
    found = {
        "assay": leaks(assay.text),
        "dossier": leaks(payload),
        "candidate": leaks(candidate),
        "events": leaks(events),
    }
    assert found == {"assay": [], "dossier": [], "candidate": [], "events": []}
    # The code ran and said it all: its error and claim are in the report, blanked.
    assert "[redacted]" in assay.text and "[redacted]" in payload
