"""Webhooks through the real service and the real workers: a hold posts a signed body to a
receiver on loopback, a failing receiver is tried again with back-off, the delivery log shows
every attempt, and a target on the gate's own control plane is refused."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from service.app.records import KeyRole
from service.cli import main
from service.core.signing.webhook import WebhookSignatureInvalid, verify
from service.db.webhook import WebhookDelivery
from tests.support.api import decided, system_name
from tests.support.keys import KeyBook
from tests.support.receiver import Receiver
from tests.support.service import example, wait_for

pytestmark = pytest.mark.integration

REFUSED = {"trials": 5, "seed": 4, "modes": ["drop_effect_receipt"]}


def _tenant(keys: KeyBook) -> tuple[str, dict[str, str]]:
    tenant = f"hooks-{uuid.uuid4().hex[:8]}"
    return tenant, keys.headers("admin", tenant=tenant)


def _as(client: httpx.Client, headers: dict[str, str]) -> httpx.Client:
    return httpx.Client(base_url=str(client.base_url), headers=headers, timeout=30.0)


def _deliveries(client: httpx.Client, hook: str, headers: dict[str, str]) -> list[Any]:
    response = client.get(f"/v1/webhooks/{hook}/deliveries", headers=headers)
    assert response.status_code == 200, response.text
    items: list[Any] = response.json()["items"]
    return items


def test_a_hold_posts_a_signed_webhook_retried_after_two_failures_with_every_attempt_logged(
    client: httpx.Client, keys: KeyBook
) -> None:
    tenant, admin = _tenant(keys)
    _stranger, stranger = _tenant(keys)
    with (
        Receiver(statuses=[500, 503, 200]) as receiver,
        Receiver() as slack,
        Receiver() as elsewhere,
        _as(client, admin) as client,
    ):
        # Another tenant's webhook, for every event: it must hear nothing of this tenant's.
        theirs = client.post("/v1/webhooks", json={"url": elsewhere.url}, headers=stranger)
        assert theirs.status_code == 201
        created = client.post(
            "/v1/webhooks", json={"url": receiver.url, "events": ["hold.opened"]}, headers=admin
        )
        assert created.status_code == 201, created.text
        hook = created.json()
        assert hook["secret"].startswith("whsec_") and hook["events"] == ["hold.opened"]
        listed = client.get("/v1/webhooks", headers=admin).json()["items"]
        assert [h["id"] for h in listed] == [hook["id"]] and "secret" not in listed[0]
        as_slack = client.post(
            "/v1/webhooks", json={"url": slack.url, "format": "slack"}, headers=admin
        ).json()

        system = system_name("hooks")
        held = decided(client, example("refuse-all"), system=system, version="1", plan=REFUSED)
        wait_for(lambda: len(receiver.received) >= 3, 60.0, "three attempts at the receiver")
        wait_for(
            lambda: _deliveries(client, hook["id"], admin)[0]["status"] == "delivered",
            15.0,
            "the delivery recorded as delivered",
        )

        first, *_, last = receiver.received
        ids = {r.headers["Assaygate-Delivery"] for r in receiver.received}
        assert len(ids) == 1, "every attempt carries the same delivery id"
        assert {r.headers["Assaygate-Event"] for r in receiver.received} == {"hold.opened"}
        now = int(time.time())
        for request in receiver.received:
            verify(hook["secret"], request.body, request.headers["Assaygate-Signature"], now)
        with pytest.raises(WebhookSignatureInvalid):
            verify(as_slack["secret"], last.body, last.headers["Assaygate-Signature"], now)
        with pytest.raises(WebhookSignatureInvalid):
            verify(hook["secret"], last.body + b" ", last.headers["Assaygate-Signature"], now)
        body = json.loads(last.body)
        assert body["event"] == "hold.opened" and body["decision"] == "hold"
        assert body["candidate"]["id"] == held["id"]
        assert body["system"] == system and body["tenant"] == tenant
        assert body["delivery_id"] == first.headers["Assaygate-Delivery"]
        assert body["reasons"] and body["reasons"][0]["code"]
        assert body["hold"]["status"] == "open"
        assert body["links"]["candidate"].endswith(f"/candidates/{held['id']}")
        assert body["links"]["hold_api"].endswith(f"/v1/holds/{body['hold']['id']}")

        (delivery,) = _deliveries(client, hook["id"], admin)
        assert delivery["id"] == body["delivery_id"]
        assert [(a["number"], a["outcome"], a["status_code"]) for a in delivery["attempts"]] == [
            (1, "failed", 500),
            (2, "failed", 503),
            (3, "delivered", 200),
        ]
        assert delivery["attempts"][0]["error"] == "HTTP 500"
        # Back-off between the attempts: 0.5 s, then twice that (this session's setting).
        at = [datetime.fromisoformat(a["at"]) for a in delivery["attempts"]]
        assert (at[1] - at[0]).total_seconds() >= 0.5
        assert (at[2] - at[1]).total_seconds() >= 1.0

        # The Slack-shaped webhook got every event of the tenant: the decision and the hold.
        wait_for(lambda: len(slack.received) >= 2, 30.0, "the decision and the hold in Slack")
        events = sorted(r.headers["Assaygate-Event"] for r in slack.received)
        assert events == ["decision", "hold.opened"]
        message = json.loads(slack.received[0].body)
        assert system in message["text"] and message["blocks"][0]["type"] == "section"
        assert elsewhere.received == []


def test_a_webhook_on_the_control_plane_or_a_metadata_address_is_refused(
    client: httpx.Client, keys: KeyBook
) -> None:
    _tenant_name, admin = _tenant(keys)
    for url in ("http://127.0.0.1:5432/hook", "http://169.254.169.254/latest/meta-data"):
        refused = client.post("/v1/webhooks", json={"url": url}, headers=admin)
        assert refused.status_code == 422, refused.text
        assert "egress refused" in refused.text and '"url"' in refused.text
    bad = client.post(
        "/v1/webhooks", json={"url": "http://127.0.0.1:9/x", "events": ["nope"]}, headers=admin
    )
    assert bad.status_code == 422 and "events" in bad.text
    assert client.get("/v1/webhooks", headers=admin).json()["items"] == []


def test_only_a_tenant_admin_manages_webhooks_and_sees_only_its_own(
    client: httpx.Client, keys: KeyBook
) -> None:
    tenant, admin = _tenant(keys)
    reviewer = keys.headers("rev", tenant=tenant, roles=[KeyRole.REVIEWER, KeyRole.SUBMITTER])
    assert client.get("/v1/webhooks", headers=reviewer).status_code == 403
    made = client.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/x"}, headers=admin)
    assert made.status_code == 201
    _other, stranger = _tenant(keys)
    hook = made.json()["id"]
    assert client.get(f"/v1/webhooks/{hook}/deliveries", headers=stranger).status_code == 404
    assert client.delete(f"/v1/webhooks/{hook}", headers=stranger).status_code == 404
    assert client.delete(f"/v1/webhooks/{hook}", headers=admin).status_code == 204
    assert client.get("/v1/webhooks", headers=admin).json()["items"] == []
    assert client.get(f"/v1/webhooks/{hook}/deliveries", headers=admin).json()["items"] == []


def test_the_cli_adds_lists_shows_deliveries_and_removes_a_webhook_and_refuses_bad_ids(
    api_url: str, keys: KeyBook, capsys: pytest.CaptureFixture[str]
) -> None:
    tenant = f"hooks-cli-{uuid.uuid4().hex[:8]}"
    key = keys.key("cli-admin", tenant=tenant, roles=[KeyRole.ADMIN]).secret
    common = ["--url", api_url, "--api-key", key]
    target = "http://127.0.0.1:9/hook"
    assert (
        main(["webhooks", "add", target, "--format", "slack", "--event", "hold.opened", *common])
        == 0
    )
    added = json.loads(capsys.readouterr().out)
    assert added["secret"].startswith("whsec_") and added["format"] == "slack"
    assert main(["webhooks", "list", *common]) == 0
    listed = json.loads(capsys.readouterr().out)["items"]
    assert [h["url"] for h in listed] == [target] and "secret" not in listed[0]
    assert main(["webhooks", "deliveries", added["id"], *common]) == 0
    assert json.loads(capsys.readouterr().out) == {"items": []}
    assert main(["webhooks", "remove", added["id"], *common]) == 0
    assert main(["webhooks", "remove", added["id"], *common]) == 3
    assert main(["webhooks", "remove", "not-an-id", *common]) == 2
    assert main(["webhooks", "add", "http://169.254.169.254/", *common]) == 3
    err = capsys.readouterr().err
    assert "not-an-id" in err and len(err.strip().splitlines()) == 1


def test_a_waiver_posts_hold_waived_naming_the_reviewer_and_the_expiry(
    client: httpx.Client, keys: KeyBook
) -> None:
    tenant, admin = _tenant(keys)
    reviewer = keys.headers("reviewer", tenant=tenant, roles=[KeyRole.REVIEWER], person="rita")
    with Receiver() as receiver, _as(client, admin) as client:
        made = client.post(
            "/v1/webhooks",
            json={"url": receiver.url, "events": ["hold.waived", "hold.rejected"]},
            headers=admin,
        )
        assert made.status_code == 201
        system = system_name("hooks")
        decided(client, example("refuse-all"), system=system, version="1", plan=REFUSED)
        hold = client.get(f"/v1/gate/{system}").json()["hold_id"]
        until = (datetime.now(UTC) + timedelta(days=1)).isoformat()
        waived = client.post(
            f"/v1/holds/{hold}/waive",
            json={"reason": "known flake", "expires_at": until},
            headers=reviewer,
        )
        assert waived.status_code == 200, waived.text
        wait_for(lambda: len(receiver.received) >= 1, 30.0, "the waiver's webhook")
        (got,) = receiver.received
        body = json.loads(got.body)
        assert got.headers["Assaygate-Event"] == "hold.waived" and body["decision"] == "allow"
        assert body["hold"]["id"] == hold and body["hold"]["status"] == "waived"
        assert body["hold"]["reviewed_by"] == "rita" and body["hold"]["expires_at"]
        verify(
            made.json()["secret"], got.body, got.headers["Assaygate-Signature"], int(time.time())
        )


def test_a_delivery_whose_task_was_never_sent_is_sent_by_the_reconcilers_sweep(
    client: httpx.Client, keys: KeyBook, engine: sa.Engine
) -> None:
    _tenant_name, admin = _tenant(keys)
    with Receiver() as receiver:
        hook = client.post("/v1/webhooks", json={"url": receiver.url}, headers=admin).json()
        delivery = uuid.uuid4()
        # What a writer leaves when it dies between its commit and sending the task.
        with Session(engine) as session:
            session.add(
                WebhookDelivery(
                    id=delivery,
                    webhook_id=uuid.UUID(hook["id"]),
                    event="decision",
                    body=json.dumps({"event": "decision", "links": {}}),
                )
            )
            session.commit()
        wait_for(lambda: len(receiver.received) >= 1, 30.0, "the sweep to send it")
        assert receiver.received[0].headers["Assaygate-Delivery"] == str(delivery)
        wait_for(
            lambda: _deliveries(client, hook["id"], admin)[0]["status"] == "delivered",
            15.0,
            "the delivery recorded",
        )
        assert len(receiver.received) == 1
