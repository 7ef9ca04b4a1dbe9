"""A secret limited to named systems: a manifest of another system may not name it (422 naming
the field, nothing written), one of its systems may; through the API and the CLI."""

from __future__ import annotations

import io
import json

import httpx
import pytest
import sqlalchemy as sa

from service.cli import main
from service.db.models import KeyRole
from tests.api.test_secrets import VALUE, admin, allow_code, everyone, python_manifest
from tests.support.keys import KeyBook
from tests.support.service import quiet, row_counts

pytestmark = pytest.mark.integration

TENANT = "scoped"


def submit(client: httpx.Client, keys: KeyBook, system: str) -> httpx.Response:
    body = {
        "system": system,
        "version": "v1",
        "source_revision": "x",
        "manifest": python_manifest(secrets=["SCOPED_KEY"]),
        "plan": {"trials": 1, "seed": 1, "modes": ["subject_swap"]},
    }
    return client.post("/v1/candidates", json=body, headers=everyone(keys, TENANT))


def test_a_manifest_of_a_system_the_secret_is_not_limited_to_is_422_naming_the_field(
    client: httpx.Client, keys: KeyBook, engine: sa.Engine
) -> None:
    put = client.put(
        "/v1/secrets/SCOPED_KEY",
        json={"value": VALUE, "systems": ["refunds", "billing"]},
        headers=admin(keys, TENANT),
    )
    assert put.status_code == 200, put.text
    assert put.json()["systems"] == ["billing", "refunds"]
    listed = client.get("/v1/secrets", headers=admin(keys, TENANT)).json()["items"]
    assert [s["systems"] for s in listed if s["name"] == "SCOPED_KEY"] == [["billing", "refunds"]]
    allow_code(engine, TENANT)
    everyone(keys, TENANT)  # the submitter's key exists before the counts
    quiet(engine)
    before = row_counts(engine)
    answer = submit(client, keys, "marketing")
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "manifest.target.secrets.0"
    assert error["message"] == (
        "secret SCOPED_KEY is limited to the systems billing, refunds; not marketing"
    )
    assert row_counts(engine) == before
    accepted = submit(client, keys, "refunds")
    assert accepted.status_code == 202, accepted.text
    # No worker of this tenant's runs here: abort, so no assay of this test's is left queued for
    # another's `quiet` to wait on.
    aborted = client.post(
        f"/v1/assays/{accepted.json()['assay_id']}/abort",
        json={"reason": "the test ends"},
        headers=everyone(keys, TENANT),
    )
    assert aborted.status_code in (200, 202), aborted.text
    quiet(engine, within_s=60)


@pytest.mark.parametrize("systems", [[], ["not a system name!"]])
def test_a_scope_that_names_no_system_or_a_bad_name_is_refused(
    client: httpx.Client, keys: KeyBook, systems: list[str]
) -> None:
    answer = client.put(
        "/v1/secrets/BAD_SCOPE",
        json={"value": VALUE, "systems": systems},
        headers=admin(keys, TENANT),
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"].startswith("systems")


def test_the_cli_sets_a_secret_limited_to_systems(
    api_url: str,
    keys: KeyBook,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = keys.key("scoped-cli", tenant="scoped-cli", roles=[KeyRole.ADMIN]).secret
    common = ["--url", api_url, "--api-key", key]
    monkeypatch.setattr("sys.stdin", io.StringIO(VALUE + "\n"))
    assert main(["secrets", "set", "CLI_KEY", "--systems", "a,b", *common]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "CLI_KEY" and shown["systems"] == ["a", "b"]
    assert VALUE not in json.dumps(shown)
