"""A tenant's secrets through the real API: a value goes in once and never comes out — not in an
answer, an error, a log line, an audit event or a signed dossier — and only the tenant's admins
reach them."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from service.api.admin_schemas import SecretPut
from service.app.secrets import secrets_for
from service.cli import main
from service.db.apikey import tenant_by_name
from service.db.models import KeyRole
from service.keys import load_secrets_key
from service.settings import Settings
from tests.support.keys import KeyBook
from tests.support.service import (
    WorkerProcess,
    candidate_body,
    example,
    quiet,
    row_counts,
    tenant_code,
    wait_decided,
)

pytestmark = pytest.mark.integration

VALUE = "sk-live-api-0123456789abcdef-do-not-leak"
AGENT = "tests.worker.agents.rogue:agent"


def admin(keys: KeyBook, tenant: str = "vault") -> dict[str, str]:
    return keys.headers(f"{tenant}-admin", tenant=tenant, roles=[KeyRole.ADMIN])


def everyone(keys: KeyBook, tenant: str = "vault") -> dict[str, str]:
    return keys.headers(f"{tenant}-everyone", tenant=tenant)


def allow_code(engine: sa.Engine, tenant: str) -> None:
    """Python targets run only for tenants an operator allowed (docs/operations.md, "Running
    tenant code")."""
    with Session(engine) as session:
        row = tenant_by_name(session, tenant)
        assert row is not None
        row.code_allowed = True
        session.add(row)
        session.commit()


def python_manifest(**target: Any) -> dict[str, Any]:
    return {**example("typed"), "target": {"kind": "python", "entrypoint": AGENT, **target}}


def test_a_secret_is_put_listed_and_deleted_and_no_answer_holds_its_value(
    client: httpx.Client, keys: KeyBook
) -> None:
    headers = admin(keys)
    name = f"KEY_{uuid.uuid4().hex[:8].upper()}"
    answers = []
    put = client.put(f"/v1/secrets/{name}", json={"value": VALUE}, headers=headers)
    assert put.status_code == 200, put.text
    assert set(put.json()) == {"name", "updated_at", "systems"} and put.json()["name"] == name
    assert put.json()["systems"] is None
    answers.append(put)
    again = client.put(f"/v1/secrets/{name}", json={"value": VALUE + "2"}, headers=headers)
    assert again.status_code == 200 and again.json()["updated_at"] >= put.json()["updated_at"]
    answers.append(again)
    listed = client.get("/v1/secrets", headers=headers)
    assert name in [s["name"] for s in listed.json()["items"]]
    answers.append(listed)
    gone = client.delete(f"/v1/secrets/{name}", headers=headers)
    assert gone.status_code == 204 and gone.content == b""
    missing = client.delete(f"/v1/secrets/{name}", headers=headers)
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "name"
    assert name in missing.json()["error"]["message"]
    answers += [gone, missing]
    events = client.get("/v1/events", headers=headers)
    answers.append(events)
    writes = [
        e["data"] for e in events.json()["items"] if e["data"].get("target") == f"secret:{name}"
    ]
    assert {w["action"] for w in writes} == {"secret.put", "secret.delete"}
    for answer in answers:
        assert VALUE not in answer.text


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/secrets/lower_case", {"value": VALUE}, "name"),
        ("/v1/secrets/" + "A" * 65, {"value": VALUE}, "name"),
        ("/v1/secrets/GOOD_NAME", {"value": ""}, "value"),
        ("/v1/secrets/GOOD_NAME", {"value": VALUE + "\x00"}, "value"),
        ("/v1/secrets/GOOD_NAME", {"value": VALUE + "x" * 16384}, "value"),
        ("/v1/secrets/GOOD_NAME", {"value": VALUE, "extra": 1}, "extra"),
        ("/v1/secrets/GOOD_NAME", {}, "value"),
    ],
)
def test_a_bad_name_or_value_is_422_naming_the_field_without_echoing_the_value(
    client: httpx.Client, keys: KeyBook, path: str, body: dict[str, Any], field: str
) -> None:
    answer = client.put(path, json=body, headers=admin(keys))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field
    assert VALUE not in answer.text
    assert "GOOD_NAME" not in [
        s["name"] for s in client.get("/v1/secrets", headers=admin(keys)).json()["items"]
    ]


def test_the_log_of_a_put_holds_no_value(
    client: httpx.Client, keys: KeyBook, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        answer = client.put("/v1/secrets/LOGGED", json={"value": VALUE}, headers=admin(keys))
        refused = client.put("/v1/secrets/bad", json={"value": VALUE}, headers=admin(keys))
    assert answer.status_code == 200 and refused.status_code == 422
    assert any(r.__dict__.get("path") == "/v1/secrets/LOGGED" for r in caplog.records)
    assert VALUE not in caplog.text
    assert all(VALUE not in repr(r.__dict__) for r in caplog.records)
    assert VALUE not in repr(SecretPut(value=VALUE))


@pytest.mark.parametrize("role", [KeyRole.SUBMITTER, KeyRole.REVIEWER])
def test_a_key_without_the_admin_role_cannot_put_list_or_delete_secrets(
    client: httpx.Client, keys: KeyBook, role: KeyRole
) -> None:
    headers = keys.headers(f"vault-{role.value}", tenant="vault", roles=[role])
    assert client.put("/v1/secrets/NOPE", json={"value": VALUE}, headers=headers).status_code == 403
    assert client.get("/v1/secrets", headers=headers).status_code == 403
    assert client.delete("/v1/secrets/NOPE", headers=headers).status_code == 403


def test_another_tenant_neither_sees_nor_uses_nor_deletes_a_tenants_secret(
    client: httpx.Client, keys: KeyBook, engine: sa.Engine
) -> None:
    assert (
        client.put("/v1/secrets/SHARED", json={"value": VALUE}, headers=admin(keys)).status_code
        == 200
    )
    other = everyone(keys, "vault-other")
    allow_code(engine, "vault-other")
    assert "SHARED" not in [
        s["name"] for s in client.get("/v1/secrets", headers=other).json()["items"]
    ]
    assert client.delete("/v1/secrets/SHARED", headers=other).status_code == 404
    body = {"source_revision": "x", "manifest": python_manifest(secrets=["SHARED"])}
    refused = client.post("/v1/candidates", json=body, headers=other)
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "manifest.target.secrets.0"


def test_a_manifest_naming_a_missing_secret_is_422_naming_it_and_writes_nothing(
    client: httpx.Client, keys: KeyBook, engine: sa.Engine
) -> None:
    headers = everyone(keys)
    allow_code(engine, "vault")
    client.put("/v1/secrets/PRESENT", json={"value": VALUE}, headers=admin(keys))
    manifest = python_manifest(secrets=["PRESENT", "NOT_STORED"])
    quiet(engine)
    before = row_counts(engine)
    answer = client.post(
        "/v1/candidates", json={"source_revision": "x", "manifest": manifest}, headers=headers
    )
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "manifest.target.secrets.1"
    assert error["message"] == (
        "no secret named NOT_STORED; a tenant admin stores it with PUT /v1/secrets/NOT_STORED"
    )
    assert row_counts(engine) == before


@pytest.mark.parametrize(
    "target",
    [
        {"kind": "reference", "secrets": ["PRESENT"]},
        {"kind": "http", "url": "http://127.0.0.1:9/agent", "secrets": ["PRESENT"]},
    ],
)
def test_a_manifest_asking_for_secrets_on_a_remote_only_target_is_422(
    client: httpx.Client, keys: KeyBook, target: dict[str, Any]
) -> None:
    client.put("/v1/secrets/PRESENT", json={"value": VALUE}, headers=admin(keys))
    manifest = {**example("typed"), "target": target}
    answer = client.post(
        "/v1/candidates",
        json={"source_revision": "x", "manifest": manifest},
        headers=everyone(keys),
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "manifest.target.secrets"


def test_the_signed_dossier_of_an_assay_naming_a_secret_never_holds_its_value_and_a_rerun_needs_it(
    client: httpx.Client, keys: KeyBook, engine: sa.Engine, settings: Settings, tmp_path: Path
) -> None:
    headers = everyone(keys)
    allow_code(engine, "vault")
    stored = client.put("/v1/secrets/OPENAI_API_KEY", json={"value": VALUE}, headers=admin(keys))
    assert stored.status_code == 200
    body = candidate_body("typed", trials=4, seed=3, modes=["timeout_before_send"])
    digest = hashlib.sha256(VALUE.encode()).hexdigest()[:16]
    body["manifest"] = python_manifest(
        entrypoint="tests.worker.agents.needs_secret:agent",
        secrets=["OPENAI_API_KEY"],
        env={"MODE": "test", "EXPECTED_SHA": digest},
    )
    # The tenant's own worker runs its code, in the sandbox, with the secret it asked for.
    worker = WorkerProcess(settings, "tw-vault", tmp_path, tenant="vault", code_dir=tenant_code())
    try:
        submitted = client.post("/v1/candidates", json=body, headers=headers)
        assert submitted.status_code == 202, submitted.text
        done = wait_decided(client, submitted.json()["id"], headers=headers)
    finally:
        worker.stop()
    assert done["status"] == "done", done
    # The code saw its secret and variable and nothing of the worker's: no target error at all.
    assert "target_errors" not in {r["code"] for r in done["reasons"]}, done["reasons"]
    dossier = client.get(f"/v1/candidates/{done['id']}/dossier", headers=headers)
    assert dossier.status_code == 200, dossier.text
    payload = base64.b64decode(dossier.json()["envelope"]["payload"])
    assert VALUE.encode() not in payload and VALUE not in dossier.text
    assert VALUE not in client.get(f"/v1/candidates/{done['id']}", headers=headers).text
    # Deleted since: a re-run is refused naming the secret, before any shard is queued.
    assert client.delete("/v1/secrets/OPENAI_API_KEY", headers=admin(keys)).status_code == 204
    rerun = client.post(f"/v1/candidates/{done['id']}/rerun", json={}, headers=headers)
    assert rerun.status_code == 422, rerun.text
    assert rerun.json()["error"]["field"] == "manifest.target.secrets.0"


def test_the_cli_puts_from_stdin_or_the_environment_lists_and_deletes_and_never_prints_a_value(
    api_url: str,
    keys: KeyBook,
    engine: sa.Engine,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = keys.key("vault-cli", tenant="vault-cli", roles=[KeyRole.ADMIN]).secret
    common = ["--url", api_url, "--api-key", key]
    monkeypatch.setattr("sys.stdin", io.StringIO(VALUE + "\n"))
    assert main(["secrets", "put", "FROM_STDIN", *common]) == 0
    monkeypatch.setenv("MY_MODEL_KEY", VALUE + "-env")
    assert main(["secrets", "put", "FROM_ENV", "--from-env", "MY_MODEL_KEY", *common]) == 0
    assert main(["secrets", "list", *common]) == 0
    printed = capsys.readouterr()
    listed = json.loads(printed.out[printed.out.rindex('{\n  "items"') :])
    assert [s["name"] for s in listed["items"]] == ["FROM_ENV", "FROM_STDIN"]
    assert main(["secrets", "delete", "FROM_ENV", *common]) == 0
    assert main(["secrets", "delete", "FROM_ENV", *common]) == 3
    assert main(["secrets", "put", "lower", *common]) == 2
    assert main(["secrets", "put", "NO_VAR", "--from-env", "NOT_SET_ANYWHERE", *common]) == 2
    printed_after = capsys.readouterr()
    for text in (printed.out, printed.err, printed_after.out, printed_after.err):
        assert VALUE not in text
    # What stdin held arrived without its line break; a worker reads it with the API's key file.
    assert settings.secrets_key_file is not None
    with Session(engine) as session:
        tenant = tenant_by_name(session, "vault-cli")
        assert tenant is not None
        got = secrets_for(
            session, tenant.id, ["FROM_STDIN"], load_secrets_key(settings.secrets_key_file)
        )
    assert got == {"FROM_STDIN": VALUE}
