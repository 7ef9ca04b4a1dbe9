"""People behind keys, and separation of duties between people (not keys), as attacks on the real
API: an admin who mints the keys it needs, a person with two keys, a submitter who mints its
reviewer's key. Also: who minted each key is recorded and listed, and the signed dossier names the
submitting and reviewing people."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from service.db.models import KeyRole
from service.settings import Settings
from tests.support.keys import KeyBook
from tests.support.service import ROOT, candidate_body, wait_decided

pytestmark = pytest.mark.integration

# Refuse-all is held on the service floor: contained, but dead — a hold a reviewer may waive.
HELD_PLAN = {"trials": 5, "seed": 4, "modes": ["drop_effect_receipt"]}
LATER = (datetime.now(UTC) + timedelta(days=7)).isoformat()
WAIVER = {"reason": "refusals are acceptable for the pilot", "expires_at": LATER}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def mint(
    anonymous: httpx.Client,
    admin: dict[str, str],
    roles: list[str],
    person: str | None = None,
    kind: str = "person",
    **fields: Any,
) -> dict[str, Any]:
    body = {"roles": roles, **fields}
    if person is not None:
        body["person"] = {"name": person, "kind": kind}
    made = anonymous.post("/v1/api-keys", json=body, headers=admin)
    assert made.status_code == 201, made.text
    result: dict[str, Any] = made.json()
    return result


def held(anonymous: httpx.Client, submitter: dict[str, str]) -> tuple[str, str, str]:
    """A held candidate submitted with `submitter`: (system, candidate id, hold id)."""
    system = f"people-{uuid.uuid4().hex[:8]}"
    body = {**candidate_body("refuse-all", **HELD_PLAN), "system": system, "version": "1"}
    submitted = anonymous.post("/v1/candidates", json=body, headers=submitter)
    assert submitted.status_code == 202, submitted.text
    wait_decided(anonymous, submitted.json()["id"], headers=submitter)
    gate = anonymous.get(f"/v1/gate/{system}", headers=submitter).json()
    assert gate["decision"] == "hold" and gate["hold_id"], gate
    return system, submitted.json()["id"], gate["hold_id"]


def refused_as_submitter(answer: httpx.Response) -> str:
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["code"] == "reviewer_is_submitter" and error["field"] == "Authorization"
    message: str = error["message"]
    return message


@pytest.fixture
def ada(keys: KeyBook) -> dict[str, str]:
    """An admin of a tenant of her own (admin role only), minted by an operator."""
    tenant = f"people-{uuid.uuid4().hex[:6]}"
    return keys.headers("ada", tenant=tenant, roles=[KeyRole.ADMIN])


def test_admin_cannot_waive_a_hold_on_a_candidate_submitted_by_a_key_it_minted(
    anonymous: httpx.Client, ada: dict[str, str]
) -> None:
    ci = mint(anonymous, ada, ["submitter"], name="ci", person="ci", kind="service")
    # Minted without naming anyone, the reviewer key is Ada's own.
    own_reviewer = mint(anonymous, ada, ["reviewer"], name="ada-reviews")
    assert own_reviewer["person"] == "ada" and own_reviewer["minted_by"] == "ada"
    system, _, hold = held(anonymous, bearer(ci["key"]))

    answer = anonymous.post(
        f"/v1/holds/{hold}/waive", json=WAIVER, headers=bearer(own_reviewer["key"])
    )
    assert "ada minted the key that submitted" in refused_as_submitter(answer)
    gate = anonymous.get(f"/v1/gate/{system}", headers=bearer(ci["key"])).json()
    assert gate["decision"] == "hold"


def test_a_person_cannot_review_with_another_of_their_own_keys(
    anonymous: httpx.Client, keys: KeyBook
) -> None:
    tenant = f"people-{uuid.uuid4().hex[:6]}"
    submits = keys.key("bob-ci", tenant=tenant, roles=[KeyRole.SUBMITTER], person="bob")
    reviews = keys.key("bob-review", tenant=tenant, roles=[KeyRole.REVIEWER], person="bob")
    _, _, hold = held(anonymous, submits.headers)
    for action, body in (("waive", WAIVER), ("reject", {"reason": "no"})):
        answer = anonymous.post(f"/v1/holds/{hold}/{action}", json=body, headers=reviews.headers)
        assert "bob submitted this candidate" in refused_as_submitter(answer)


def test_a_submitter_cannot_review_through_a_key_it_minted_for_someone_else(
    anonymous: httpx.Client, keys: KeyBook
) -> None:
    tenant = f"people-{uuid.uuid4().hex[:6]}"
    mallory = keys.headers("mallory", tenant=tenant, roles=[KeyRole.ADMIN, KeyRole.SUBMITTER])
    puppet = mint(anonymous, mallory, ["reviewer"], person="rita")
    assert (puppet["person"], puppet["minted_by"]) == ("rita", "mallory")
    _, _, hold = held(anonymous, mallory)
    answer = anonymous.post(f"/v1/holds/{hold}/waive", json=WAIVER, headers=bearer(puppet["key"]))
    assert "minted this reviewer's key" in refused_as_submitter(answer)


def test_another_person_reviews_and_the_signed_dossier_names_both_people_never_a_secret(
    anonymous: httpx.Client, ada: dict[str, str]
) -> None:
    ci = mint(anonymous, ada, ["submitter"], name="ci-main", person="ci", kind="service")
    rita = mint(anonymous, ada, ["reviewer"], name="rita-laptop", person="Rita Levi")
    system, candidate, hold = held(anonymous, bearer(ci["key"]))
    read = bearer(rita["key"])
    assert anonymous.get(f"/v1/candidates/{candidate}", headers=read).json()["submitted_by"] == "ci"

    waived = anonymous.post(f"/v1/holds/{hold}/waive", json=WAIVER, headers=read)
    assert waived.status_code == 200, waived.text
    assert waived.json()["hold"]["reviewed_by"] == "Rita Levi"
    assert anonymous.get(f"/v1/gate/{system}", headers=read).json()["decision"] == "allow"

    doc = anonymous.get(f"/v1/candidates/{candidate}/dossier", headers=read).json()
    predicate = json.loads(base64.b64decode(doc["envelope"]["payload"]))["predicate"]
    submitted_by = predicate["candidate"]["submitted_by"]
    assert (submitted_by["person"], submitted_by["kind"]) == ("ci", "service")
    assert (submitted_by["key_id"], submitted_by["minted_by"]) == (ci["id"], "ada")
    reviewed_by = predicate["waivers"][-1]["reviewed_by"]
    assert (reviewed_by["person"], reviewed_by["key_name"]) == ("Rita Levi", "rita-laptop")
    assert predicate["reasons"][0]["message"].startswith("held reasons waived by Rita Levi until ")
    assert doc["change"].startswith("waived by Rita Levi")

    # The first characters of either secret appear nowhere: not in the signed bytes, the API's
    # answers, the event log, nor the pages the reviewer sees.
    seen = [
        base64.b64decode(doc["envelope"]["payload"]).decode(),
        json.dumps(doc),
        anonymous.get(f"/v1/candidates/{candidate}/dossiers", headers=read).text,
        anonymous.get(f"/v1/gate/{system}", headers=read).text,
        anonymous.get(f"/v1/candidates/{candidate}", headers=read).text,
        anonymous.get("/v1/holds", params={"status": "waived"}, headers=read).text,
        anonymous.get("/v1/events", headers=read).text,
        anonymous.get("/v1/api-keys", headers=ada).text,
    ]
    browser = signed_in(anonymous, rita["key"])
    seen += [
        browser.get(path).text
        for path in (
            "/",
            "/holds?status=waived",
            f"/candidates/{candidate}",
            f"/candidates/{candidate}/dossier",
            "/events",
        )
    ]
    assert "Rita Levi" in seen[-2]  # the dossier page names the reviewer
    for secret in (ci["key"], rita["key"]):
        start = secret[: len("ag_") + 4]
        assert not [text for text in seen if start in text], start


def signed_in(anonymous: httpx.Client, secret: str) -> httpx.Client:
    """A browser on the same service, signed in to the dashboard with `secret`."""
    browser = httpx.Client(base_url=str(anonymous.base_url), timeout=30, follow_redirects=True)
    form = browser.get("/signin").text
    token = re.search(r'name="csrf" value="([^"]+)"', form)
    assert token is not None
    answer = browser.post(
        "/signin", data={"credential": secret, "csrf": token.group(1), "next": "/"}
    )
    assert answer.status_code == 200, answer.text
    return browser


def test_keys_are_listed_with_their_person_and_who_minted_them(
    anonymous: httpx.Client, ada: dict[str, str]
) -> None:
    mint(anonymous, ada, ["reviewer"], person="Grace Hopper")
    listed = anonymous.get("/v1/api-keys", headers=ada).json()["items"]
    people = {(k["person"], k["kind"], k["minted_by"]) for k in listed}
    assert ("ada", "person", None) in people  # the operator minted Ada's key
    assert ("Grace Hopper", "person", "ada") in people


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"person": {"name": "ci", "kind": "person"}}, 409, "person.kind"),  # a service account
        ({"kind": "service"}, 422, "kind"),
        ({"person": {"name": "   "}}, 422, "person.name"),
        ({"person": {"name": "a\u0000b"}}, 422, "person.name"),
    ],
)
def test_a_key_for_a_person_that_cannot_be_is_refused_naming_the_field(
    anonymous: httpx.Client, ada: dict[str, str], body: dict[str, Any], status: int, field: str
) -> None:
    mint(anonymous, ada, ["submitter"], person="ci", kind="service")
    before = len(anonymous.get("/v1/api-keys", headers=ada).json()["items"])
    answer = anonymous.post("/v1/api-keys", json={"roles": ["reviewer"], **body}, headers=ada)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["field"] == field
    assert len(anonymous.get("/v1/api-keys", headers=ada).json()["items"]) == before


# ------------------------------------------------------------------------------ the CLI


def keys_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    env["ASSAYGATE_DATABASE_URL"] = settings.database_url
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "keys", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_mints_a_key_only_for_a_named_person_or_service_account(
    settings: Settings,
) -> None:
    tenant = f"cli-{uuid.uuid4().hex[:6]}"
    made = keys_cli(settings, "create", "--tenant", tenant, "--role", "submitter",
                    "--service-account", "ci")  # fmt: skip
    assert made.returncode == 0, made.stderr
    view = json.loads(made.stdout)
    assert (view["person"], view["kind"], view["minted_by"]) == ("ci", "service", None)

    anonymous = keys_cli(settings, "create", "--tenant", tenant, "--role", "reviewer")
    assert anonymous.returncode == 2
    assert anonymous.stderr.count("\n") == 1 and "--person" in anonymous.stderr

    clash = keys_cli(settings, "create", "--tenant", tenant, "--role", "reviewer",
                     "--person", "ci")  # fmt: skip
    assert clash.returncode == 2, clash.stderr
    assert clash.stderr.count("\n") == 1 and "ci is a service" in clash.stderr
    assert "Traceback" not in clash.stderr

    listed = json.loads(keys_cli(settings, "list-api", "--tenant", tenant).stdout)["items"]
    assert [(k["person"], k["kind"]) for k in listed] == [("ci", "service")]


def test_the_cli_refuses_a_blank_tenant_an_unknown_tenant_and_an_unknown_key_in_one_line(
    settings: Settings,
) -> None:
    blank = ("create", "--tenant", " ", "--role", "admin", "--person", "ada")
    refusals = {
        "--tenant": keys_cli(settings, *blank),
        "no tenant": keys_cli(settings, "list-api", "--tenant", f"none-{uuid.uuid4().hex[:6]}"),
        "no API key": keys_cli(settings, "revoke", str(uuid.uuid4())),
    }
    for named, refused in refusals.items():
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1 and named in refused.stderr
        assert "Traceback" not in refused.stderr

    made = json.loads(keys_cli(settings, "create", "--tenant", f"cli-{uuid.uuid4().hex[:6]}",
                               "--role", "admin", "--person", "ada").stdout)  # fmt: skip
    revoked = keys_cli(settings, "revoke", made["id"])
    assert revoked.returncode == 0 and json.loads(revoked.stdout)["revoked_at"] is not None
