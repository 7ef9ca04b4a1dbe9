"""The webhooks page: a tenant admin sees each webhook with its deliveries and every attempt,
never its secret, and never another tenant's."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session

from service.db import tenant as tenants
from service.db.models import KeyRole
from service.db.webhook import Webhook, WebhookAttempt, WebhookDelivery
from tests.web.conftest import signed_in


def _hook(engine: sa.Engine, tenant: str, url: str) -> Webhook:
    with Session(engine, expire_on_commit=False) as session:
        row = tenants.by_name(session, tenant)
        assert row is not None
        hook = Webhook(
            tenant_id=row.id,
            url=url,
            format="json",
            events=["hold.opened"],
            secret="whsec_never-shown-" + uuid.uuid4().hex,
            created_by="test",
        )
        session.add(hook)
        session.flush()
        delivery = WebhookDelivery(
            webhook_id=hook.id, event="hold.opened", body="{}", status="delivered", attempts=3
        )
        session.add(delivery)
        session.flush()
        for number, outcome, code in (
            (1, "failed", 500),
            (2, "failed", 503),
            (3, "delivered", 200),
        ):
            session.add(
                WebhookAttempt(
                    delivery_id=delivery.id,
                    number=number,
                    at=datetime.now(UTC),
                    outcome=outcome,
                    status_code=code,
                    error=None if code == 200 else f"HTTP {code}",
                )
            )
        session.commit()
        return hook


def test_an_admin_sees_each_delivery_with_every_attempt_and_no_secret(
    anonymous_client: TestClient, web_engine: sa.Engine
) -> None:
    admin = signed_in(anonymous_client, "ada", "/", roles=(KeyRole.ADMIN,))
    theirs = signed_in(anonymous_client, "gus-admin", "/", tenant="globex", roles=(KeyRole.ADMIN,))
    mine = _hook(web_engine, "acme", "https://hooks.example/acme-" + uuid.uuid4().hex)
    other = _hook(web_engine, "globex", "https://hooks.example/globex-" + uuid.uuid4().hex)
    page = admin.get("/webhooks")
    assert page.status_code == 200, page.text
    assert mine.url in page.text and other.url not in page.text
    assert "#1 failed 500" in page.text and "#3 delivered 200" in page.text
    assert mine.secret not in page.text
    assert other.url in theirs.get("/webhooks").text
    reviewer = signed_in(anonymous_client, "rita", "/")
    assert reviewer.get("/webhooks").status_code == 403
