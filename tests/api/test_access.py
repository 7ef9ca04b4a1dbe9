"""Keys, roles and tenants against the real API: every route in the access table tried with every
role (and with no key, and a revoked one), every resource type read and written across tenants
(404, never 403), limits, and the audit trail."""

from __future__ import annotations

import hashlib
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from service.asgi import create_app
from service.db.models import KeyRole
from service.http.access import PUBLIC, ROUTE_ROLES
from service.settings import Settings
from tests.support.keys import KeyBook
from tests.support.service import ApiServer, candidate_body, wait_decided

pytestmark = pytest.mark.integration

# Route parameters that resolve to nothing: an allowed role gets past the role check and then
# meets a 404 (or a 422 on the body), never 401/403.
PARAMS = {
    "candidate_id": str(uuid.UUID(int=1)),
    "assay_id": str(uuid.UUID(int=2)),
    "dossier_id": str(uuid.UUID(int=3)),
    "hold_id": str(uuid.UUID(int=4)),
    "key_id": str(uuid.UUID(int=5)),
    "system": "no-such-system",
    "name": "NO_SUCH_SECRET",
    "digest": "sha256:" + "0" * 64,
    "webhook_id": str(uuid.UUID(int=6)),
}
# Bodies that an allowed role sends: invalid on purpose where a valid one would change state.
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/candidates"): {"source_revision": "x", "manifest": {"model": 1}},
    ("POST", "/v1/holds/{hold_id}/waive"): {"reason": "r", "expires_at": "2999-01-01T00:00:00Z"},
    ("POST", "/v1/holds/{hold_id}/reject"): {"reason": "r"},
    ("POST", "/v1/webhooks"): {"url": "http://169.254.169.254/"},
    ("PUT", "/v1/systems/{system}/triggers"): {"components": ["no-such-component"]},
    ("POST", "/v1/systems/{system}/config-changes"): {"component": "tools", "sha256": "ab" * 32},
    ("POST", "/v1/api-keys"): {"roles": []},
    ("PUT", "/v1/secrets/{name}"): {"value": ""},
}


def call(client: httpx.Client, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    url = path.format(**PARAMS)
    body = BODIES.get((method, path))
    return client.request(method, url, json=body, headers=headers)


def test_every_api_route_is_in_the_access_table_and_nothing_else_is(settings: Settings) -> None:
    paths = create_app(settings).openapi()["paths"]
    routes = {(method.upper(), path) for path, item in paths.items() for method in item}
    assert routes == set(ROUTE_ROLES) | PUBLIC


@pytest.mark.parametrize("route", sorted(ROUTE_ROLES), ids=" ".join)
def test_each_role_is_allowed_exactly_where_the_table_says(
    route: tuple[str, str], client: httpx.Client, anonymous: httpx.Client, keys: KeyBook
) -> None:
    method, path = route
    assert call(anonymous, method, path, {}).status_code == 401
    bogus = {"Authorization": "Bearer ag_" + "x" * 43}
    assert call(anonymous, method, path, bogus).status_code == 401
    for role in KeyRole:
        key = keys.key(f"only-{role.value}", tenant="roles", roles=[role])
        answer = call(anonymous, method, path, key.headers)
        if role in ROUTE_ROLES[route]:
            assert answer.status_code not in (401, 403, 500), (role, answer.text)
        else:
            assert answer.status_code == 403, (role, answer.text)
            assert answer.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize("route", sorted(PUBLIC), ids=" ".join)
def test_public_routes_need_no_key(route: tuple[str, str], anonymous: httpx.Client) -> None:
    assert anonymous.request(*route).status_code == 200


# ------------------------------------------------------------------------------ tenants


@pytest.fixture(scope="module")
def decided_in_acme(client_module: httpx.Client) -> dict[str, Any]:
    """A held candidate of tenant acme (refuse-all: held on the service floor), with its dossier,
    assay and hold."""
    body = {
        **candidate_body("refuse-all", trials=5, seed=4, modes=["drop_effect_receipt"]),
        "system": "shared-name",
        "version": "1",
    }
    submitted = client_module.post("/v1/candidates", json=body)
    assert submitted.status_code == 202, submitted.text
    done = wait_decided(client_module, submitted.json()["id"])
    dossier = client_module.get(f"/v1/candidates/{done['id']}/dossier").json()
    gate = client_module.get("/v1/gate/shared-name").json()
    return {"candidate": done, "dossier": dossier, "hold_id": gate["hold_id"]}


@pytest.fixture(scope="module")
def client_module(api_url: str, keys: KeyBook) -> Any:
    with httpx.Client(base_url=api_url, timeout=30.0, headers=keys.headers("ci")) as client:
        yield client


def test_another_tenant_sees_none_of_the_resources_and_changes_none(
    decided_in_acme: dict[str, Any], anonymous: httpx.Client, keys: KeyBook, engine: sa.Engine
) -> None:
    other = keys.headers("intruder", tenant="globex")
    candidate = decided_in_acme["candidate"]
    dossier_id = decided_in_acme["dossier"]["id"]
    hold_id = decided_in_acme["hold_id"]
    assert hold_id
    reads = [
        f"/v1/candidates/{candidate['id']}",
        f"/v1/candidates/{candidate['id']}/dossier",
        f"/v1/candidates/{candidate['id']}/dossiers",
        f"/v1/assays/{candidate['assay_id']}",
        f"/v1/dossiers/{dossier_id}",
        f"/v1/dossiers/{dossier_id}/envelope",
        f"/v1/dossiers/{dossier_id}/payload",
        f"/v1/holds/{hold_id}",
        "/v1/gate/shared-name",
        "/v1/systems/shared-name/triggers",
    ]
    for url in reads:
        answer = anonymous.get(url, headers=other)
        assert answer.status_code == 404, (url, answer.text)
        assert answer.json()["error"]["code"] == "not_found"
    writes: list[tuple[str, str, Any]] = [
        ("POST", f"/v1/holds/{hold_id}/waive", {"reason": "x", "expires_at": "2999-01-01T00:00Z"}),
        ("POST", f"/v1/holds/{hold_id}/reject", {"reason": "x"}),
        ("POST", f"/v1/candidates/{candidate['id']}/rerun", None),
        ("POST", f"/v1/assays/{candidate['assay_id']}/abort", {"reason": "x"}),
        (
            "POST",
            "/v1/systems/shared-name/config-changes",
            {"component": "tools", "sha256": "0" * 64},
        ),
    ]
    for method, url, body in writes:
        answer = anonymous.request(method, url, json=body, headers=other)
        assert answer.status_code == 404, (url, answer.text)
    # Listings leave the other tenant's rows out altogether.
    assert anonymous.get("/v1/candidates", headers=other).json()["items"] == []
    systems = anonymous.get("/v1/systems", headers=other).json()["items"]
    assert "shared-name" not in {s["name"] for s in systems}
    assert anonymous.get("/v1/holds", headers=other).json()["items"] == []
    events = anonymous.get("/v1/events", headers=other).json()["items"]
    assert all(e["candidate_id"] != candidate["id"] for e in events)
    mine = anonymous.get("/v1/events", headers=keys.headers("ci")).json()["items"]
    assert any(e["candidate_id"] == candidate["id"] for e in mine)
    # A system name is the tenant's own: globex's triggers for `shared-name` are another system.
    put = anonymous.put(
        "/v1/systems/shared-name/triggers", json={"components": ["prompt"]}, headers=other
    )
    assert put.status_code == 200
    acme = anonymous.get("/v1/systems/shared-name/triggers", headers=keys.headers("ci")).json()
    assert acme["default"] is True
    # Nothing about acme's hold changed.
    hold = anonymous.get(f"/v1/holds/{hold_id}", headers=keys.headers("ci")).json()
    assert hold["status"] == "open"


def test_an_idempotency_key_never_replays_another_tenants_response(
    client: httpx.Client, anonymous: httpx.Client, keys: KeyBook
) -> None:
    shared = f"ci-{uuid.uuid4()}"
    body = {**candidate_body("typed", trials=2, seed=1), "system": f"idem-{uuid.uuid4().hex[:6]}"}
    first = client.post("/v1/candidates", json=body, headers={"Idempotency-Key": shared})
    assert first.status_code == 202
    other = anonymous.post(
        "/v1/candidates",
        json=body,
        headers={"Idempotency-Key": shared, **keys.headers("intruder", tenant="globex")},
    )
    assert other.status_code == 202 and other.json()["id"] != first.json()["id"]
    assert "idempotent-replayed" not in other.headers
    wait_decided(client, first.json()["id"])
    wait_decided(anonymous, other.json()["id"], headers=keys.headers("intruder", tenant="globex"))


# ------------------------------------------------------------------------------ keys


def test_a_created_key_works_a_revoked_key_is_refused_at_once_and_only_its_hash_is_stored(
    client: httpx.Client, anonymous: httpx.Client, engine: sa.Engine
) -> None:
    created = client.post("/v1/api-keys", json={"roles": ["submitter"], "name": "ci-main"})
    assert created.status_code == 201, created.text
    key = created.json()
    secret = key["key"]
    assert secret.startswith("ag_") and "prefix" not in key and key["tenant"] == "acme"
    auth = {"Authorization": f"Bearer {secret}"}
    assert anonymous.get("/v1/systems", headers=auth).status_code == 200
    listed = client.get("/v1/api-keys").json()["items"]
    assert key["id"] in {k["id"] for k in listed}
    assert all("key" not in k for k in listed)

    with engine.connect() as connection:
        row = (
            connection.execute(
                sa.text("SELECT * FROM api_key WHERE id = :id"), {"id": uuid.UUID(key["id"])}
            )
            .mappings()
            .one()
        )
        everything = " ".join(
            str(v)
            for table in ("api_key", "event", "tenant")
            for r in connection.execute(sa.text(f'SELECT * FROM "{table}"')).all()
            for v in r
        )
    assert row["key_sha256"] == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in everything and secret[11:] not in everything

    revoked = client.delete(f"/v1/api-keys/{key['id']}")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    refused = anonymous.get("/v1/systems", headers=auth)
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert client.delete(f"/v1/api-keys/{key['id']}").status_code == 200


def test_an_admin_manages_only_its_own_tenants_keys(anonymous: httpx.Client, keys: KeyBook) -> None:
    acme_key = keys.key("ci")
    other_admin = keys.headers("admin", tenant="globex", roles=[KeyRole.ADMIN])
    assert anonymous.delete(f"/v1/api-keys/{acme_key.id}", headers=other_admin).status_code == 404
    listed = anonymous.get("/v1/api-keys", headers=other_admin).json()["items"]
    assert {k["tenant"] for k in listed} == {"globex"}
    made = anonymous.post("/v1/api-keys", json={"roles": ["reviewer"]}, headers=other_admin)
    assert made.json()["tenant"] == "globex"


def test_a_key_that_submitted_may_not_review_the_candidate(
    decided_in_acme: dict[str, Any], client: httpx.Client
) -> None:
    hold = decided_in_acme["hold_id"]
    answer = client.post(f"/v1/holds/{hold}/reject", json={"reason": "mine"})
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "reviewer_is_submitter"


# ------------------------------------------------------------------------------ audit


def test_every_authenticated_write_is_audited_with_key_tenant_roles_action_and_target(
    client: httpx.Client, keys: KeyBook
) -> None:
    system = f"audited-{uuid.uuid4().hex[:6]}"
    body = {**candidate_body("typed", trials=2, seed=3), "system": system}
    submitted = client.post("/v1/candidates", json=body).json()
    wait_decided(client, submitted["id"])
    assert client.put(f"/v1/systems/{system}/triggers", json={"components": ["tools"]}).is_success
    made = client.post("/v1/api-keys", json={"roles": ["reviewer"]}).json()
    assert client.delete(f"/v1/api-keys/{made['id']}").is_success

    events = client.get("/v1/events", params={"kind": "audit", "limit": 200}).json()["items"]
    actions = {(e["data"]["action"], e["data"]["target"]): e["data"] for e in events}
    key = keys.key("ci")
    for action, target in [
        ("candidate.submit", f"candidate:{submitted['id']}"),
        ("system.set_triggers", f"system:{system}"),
        ("api_key.create", f"api_key:{made['id']}"),
        ("api_key.revoke", f"api_key:{made['id']}"),
    ]:
        data = actions[(action, target)]
        assert data["key_id"] == str(key.id) and data["tenant"] == "acme"
        assert data["roles"] == ["admin", "reviewer", "submitter"]


# ------------------------------------------------------------------------------ limits


def test_trials_over_the_limits_are_refused_naming_the_field(client: httpx.Client) -> None:
    per_fault = client.post("/v1/candidates", json=candidate_body("typed", trials=100_001))
    assert per_fault.status_code == 422
    assert per_fault.json()["error"]["field"] == "plan.trials"
    assert "limit" in per_fault.json()["error"]["message"]


def _well_inside_one_minute_window() -> None:
    """The limit counts in fixed one-minute windows: a test that fills one starts well inside
    it, so a window's end cannot split its submissions."""
    while time.time() % 60 > 40:
        time.sleep(0.5)


def test_submissions_over_the_per_minute_limit_get_429_with_retry_after(
    settings: Settings, keys: KeyBook, workers: Any
) -> None:
    limited = settings.model_copy(update={"submissions_per_minute": 2})
    key = keys.key(f"limited-{uuid.uuid4().hex[:6]}", roles=[KeyRole.SUBMITTER])
    _well_inside_one_minute_window()
    with TestClient(create_app(limited)) as app:
        answers = [
            app.post(
                "/v1/candidates",
                json=candidate_body("typed", trials=1, seed=n, modes=["subject_swap"]),
                headers=key.headers,
            )
            for n in range(3)
        ]
        assert [a.status_code for a in answers] == [202, 202, 429]
        assert 1 <= int(answers[2].headers["retry-after"]) <= 60
        assert answers[2].json()["error"]["code"] == "rate_limited"
        for accepted in answers[:2]:
            wait_decided(app, accepted.json()["id"], headers=key.headers)


def test_twenty_concurrent_repeats_of_one_idempotency_key_use_one_submission_slot(
    settings: Settings, keys: KeyBook, workers: Any
) -> None:
    limited = settings.model_copy(update={"submissions_per_minute": 3})
    key = keys.key(f"repeats-{uuid.uuid4().hex[:6]}", roles=[KeyRole.SUBMITTER])
    _well_inside_one_minute_window()
    body = {
        **candidate_body("typed", trials=1, seed=1, modes=["subject_swap"]),
        "system": f"repeats-{uuid.uuid4().hex[:6]}",
    }
    with ApiServer(create_app(limited)) as server:

        def repeat(_: int) -> httpx.Response:
            with httpx.Client(base_url=server.url, timeout=60.0, headers=key.headers) as http:
                return http.post(
                    "/v1/candidates", json=body, headers={"Idempotency-Key": "deploy-7"}
                )

        with ThreadPoolExecutor(max_workers=20) as pool:
            answers = list(pool.map(repeat, range(20)))
        assert [a.status_code for a in answers] == [202] * 20, [a.text for a in answers]
        assert len({a.json()["id"] for a in answers}) == 1
        assert sum("idempotent-replayed" not in a.headers for a in answers) == 1

        with httpx.Client(base_url=server.url, timeout=60.0, headers=key.headers) as http:
            fresh = [
                http.post(
                    "/v1/candidates",
                    json=candidate_body("typed", trials=1, seed=n, modes=["subject_swap"]),
                )
                for n in (2, 3, 4)
            ]
            # The repeats used one slot of three: two more fit, the third is over the limit.
            assert [a.status_code for a in fresh] == [202, 202, 429], [a.text for a in fresh]
            for accepted in [answers[0], *fresh[:2]]:
                wait_decided(http, accepted.json()["id"])
