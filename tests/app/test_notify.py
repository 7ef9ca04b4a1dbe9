"""The webhook outbox is written with the event: a review stages one delivery per webhook that
wants it (the tenant's, of that system or of all, for that event), in the review's own
transaction, so rolling the review back leaves no delivery."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlmodel import Session, col, func, select

from service.api.present import dossier_ref
from service.app import reviews
from service.app.notify import HookFormat, render
from service.core.signing.dossier import Signer
from service.db import queries
from service.db.models import Candidate, Dossier, Hold, System
from service.db.webhook import Webhook, WebhookDelivery
from tests.support.service import ROOT
from tests.web.seed import seed_candidate


def _held(session: Session, signer: Signer, tenant: str, system: str) -> Candidate:
    return seed_candidate(
        session, system=system, version="1.0", signer=signer, tenant=tenant
    ).candidate


def _hook(
    session: Session, candidate: Candidate, events: list[str], system: str | None = None
) -> Webhook:
    system_row = queries.system_named(session, system, None) if system else None
    owner = session.get(System, candidate.system_id)
    assert owner is not None
    hook = Webhook(
        tenant_id=owner.tenant_id,
        system_id=system_row.id if system_row else None,
        url="https://hooks.example/" + uuid.uuid4().hex,
        format="json",
        events=events,
        secret="whsec_x",
        created_by="test",
    )
    session.add(hook)
    session.flush()
    return hook


def _waive(session: Session, signer: Signer, candidate: Candidate) -> None:
    hold = session.exec(select(Hold).where(Hold.candidate_id == candidate.id)).one()
    done = reviews.record(
        session,
        signer,
        reviews.ReviewHold(
            hold.id,
            reviews.Action.WAIVE,
            "reviewer-key",
            "known flake",
            datetime.now(UTC) + timedelta(days=1),
        ),
    )
    assert done is not None


def _count(session: Session, hook: Webhook) -> int:
    return int(
        session.exec(select(func.count()).where(col(WebhookDelivery.webhook_id) == hook.id)).one()
    )


def test_a_review_stages_a_delivery_for_each_webhook_of_its_tenant_system_and_event(
    session: Session, signer: Signer
) -> None:
    tenant = f"notify-{uuid.uuid4().hex[:8]}"
    here, there = f"here-{uuid.uuid4().hex[:6]}", f"there-{uuid.uuid4().hex[:6]}"
    held = _held(session, signer, tenant, here)
    _held(session, signer, tenant, there)
    stranger = _held(session, signer, f"other-{uuid.uuid4().hex[:8]}", f"x-{uuid.uuid4().hex[:6]}")
    every = _hook(session, held, ["hold.waived"])
    this_system = _hook(session, held, ["hold.waived"], system=here)
    other_system = _hook(session, held, ["hold.waived"], system=there)
    other_event = _hook(session, held, ["decision", "hold.rejected"])
    other_tenant = _hook(session, stranger, ["hold.waived"])
    _waive(session, signer, held)
    session.flush()
    assert [_count(session, h) for h in (every, this_system, other_system)] == [1, 1, 0]
    assert [_count(session, h) for h in (other_event, other_tenant)] == [0, 0]
    delivery = session.exec(
        select(WebhookDelivery).where(WebhookDelivery.webhook_id == every.id)
    ).one()
    body = json.loads(render(delivery.body, HookFormat.JSON.value, "https://gate.example/"))
    assert body["event"] == "hold.waived" and body["delivery_id"] == str(delivery.id)
    assert body["links"]["candidate"] == f"https://gate.example/candidates/{held.id}"
    assert body["hold"]["status"] == "waived"


def test_rolling_the_review_back_rolls_its_deliveries_back(
    session: Session, signer: Signer
) -> None:
    tenant = f"notify-{uuid.uuid4().hex[:8]}"
    held = _held(session, signer, tenant, f"sys-{uuid.uuid4().hex[:6]}")
    hook = _hook(session, held, ["hold.waived"])
    savepoint = session.begin_nested()
    _waive(session, signer, held)
    session.flush()
    assert _count(session, hook) == 1
    savepoint.rollback()
    assert _count(session, hook) == 0
    hold = session.exec(select(Hold).where(Hold.candidate_id == held.id)).one()
    assert hold.status == "open"


def test_a_slack_body_shows_every_tenant_string_as_text_and_only_the_gates_links_as_markup() -> (
    None
):
    facts = {
        "event": "decision",
        "system": "refunds<@U123>",
        "candidate": {"version": "<!channel> <https://evil.example|login>"},
        "decision": "hold",
        "reasons": [{"code": "build_mismatch", "message": "agent said <!here> & <#C1>"}],
        "reasons_total": 1,
        "links": {"candidate": "/candidates/1"},
    }
    message = json.loads(render(json.dumps(facts), HookFormat.SLACK.value, "https://gate.example"))
    head, reasons = (b["text"]["text"] for b in message["blocks"][:2])
    links = message["blocks"][2]["elements"][0]["text"]
    assert message["text"] == head
    assert head.startswith(
        "refunds&lt;@U123&gt; &lt;!channel&gt; &lt;https://evil.example|login&gt; decided"
    )
    assert reasons == "• `build_mismatch`: agent said &lt;!here&gt; &amp; &lt;#C1&gt;"
    assert links == "<https://gate.example/candidates/1|Candidate>"


def _documented_body() -> dict[str, Any]:
    text = (ROOT / "docs" / "operations.md").read_text()
    found = re.search(r'^```json\n(\{\n  "event".*?)^```', text, re.M | re.S)
    assert found is not None, "docs/operations.md shows a webhook body"
    return dict(json.loads(found.group(1)))


def _keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_keys(value[0])] if value else []
    return None


def test_the_body_is_the_one_the_docs_show_its_dossier_digest_bare_hex_as_the_api_gives_it(
    session: Session, signer: Signer
) -> None:
    held = _held(session, signer, f"notify-{uuid.uuid4().hex[:8]}", f"d-{uuid.uuid4().hex[:6]}")
    hook = _hook(session, held, ["hold.waived"])
    _waive(session, signer, held)
    session.flush()
    delivery = session.exec(
        select(WebhookDelivery).where(WebhookDelivery.webhook_id == hook.id)
    ).one()
    body = json.loads(render(delivery.body, HookFormat.JSON.value, "https://gate.example/"))
    waived = session.get(Dossier, uuid.UUID(body["dossier"]["id"]))
    assert waived is not None
    assert body["dossier"]["digest"] == dossier_ref(waived).digest
    assert re.fullmatch(r"[0-9a-f]{64}", body["dossier"]["digest"])
    shown = _documented_body()
    assert re.fullmatch(r"[0-9a-f]{64}", shown["dossier"]["digest"]), "the docs show that form"
    assert _keys(body) == _keys(shown), "every field the docs show, and no other"
