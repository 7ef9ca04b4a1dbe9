"""What a webhook says, and when: each event that reaches people (a decision, a hold opened,
waived, rejected or reopened, a gate reopened) writes one outbox row per subscribed webhook, in
the transaction of the event itself, so a committed event always has its deliveries and a
rolled-back one never does. The workers send them (`service.app.webhooks`, `worker.webhooks`).

The row keeps the event's facts with links relative to the service; `render` makes the body a
webhook receives (JSON, or a Slack-compatible `text` + `blocks`), the same bytes on every
attempt for the same `public_url`.
"""

from __future__ import annotations

import json
import uuid
from enum import StrEnum
from typing import Any

from sqlmodel import Session

from service.db import tenant as tenants
from service.db import webhook as stored
from service.db.models import Candidate, Dossier, Hold, System, utcnow


class HookEvent(StrEnum):
    DECISION = "decision"  # an assay finished and its dossier was signed
    HOLD_OPENED = "hold.opened"  # a dossier that did not allow awaits review
    HOLD_WAIVED = "hold.waived"
    HOLD_REJECTED = "hold.rejected"
    HOLD_REOPENED = "hold.reopened"  # a waiver or rejection lapsed: the hold is open again
    GATE_REOPENED = "gate.reopened"  # a production or policy change reopened the gate


class HookFormat(StrEnum):
    JSON = "json"
    SLACK = "slack"


#: How many of a dossier's reasons a body carries (the dossier has them all).
FIRST_REASONS = 3


def emit(
    session: Session,
    candidate: Candidate,
    dossier: Dossier,
    event: HookEvent,
    hold: Hold | None = None,
) -> int:
    """Stage a delivery of `event` for every webhook of the candidate's tenant that wants it;
    the number staged. In the caller's transaction: the caller commits the event and these."""
    system = session.get(System, candidate.system_id)
    assert system is not None
    hooks = stored.subscribers(session, system.tenant_id, system.id, event.value)
    if not hooks:
        return 0
    tenant = tenants.by_id(session, system.tenant_id)
    facts = _facts(candidate, system, tenant.name if tenant else "", dossier, event, hold)
    for hook in hooks:
        delivery_id = uuid.uuid4()
        body = json.dumps({**facts, "delivery_id": str(delivery_id)}, sort_keys=True)
        session.add(
            stored.WebhookDelivery(
                id=delivery_id,
                webhook_id=hook.id,
                event=event.value,
                candidate_id=candidate.id,
                body=body,
            )
        )
    return len(hooks)


def _facts(
    candidate: Candidate,
    system: System,
    tenant: str,
    dossier: Dossier,
    event: HookEvent,
    hold: Hold | None,
) -> dict[str, Any]:
    reasons = [
        {k: r.get(k) for k in ("code", "message", "severity") if r.get(k) is not None}
        for r in dossier.reasons[:FIRST_REASONS]
    ]
    links = {
        "candidate": f"/candidates/{candidate.id}",
        "dossier": f"/candidates/{candidate.id}/dossier",
        "dossier_api": f"/v1/dossiers/{dossier.id}",
    }
    held: dict[str, Any] | None = None
    if hold is not None:
        links["hold"] = f"/holds?status=all#hold-{hold.id}"
        links["hold_api"] = f"/v1/holds/{hold.id}"
        held = {
            "id": str(hold.id),
            "status": hold.status,
            "reviewed_by": hold.reviewed_by,
            "review_reason": hold.review_reason,
            "expires_at": hold.expires_at.isoformat() if hold.expires_at else None,
        }
    return {
        "event": event.value,
        "occurred_at": utcnow().isoformat(timespec="seconds"),
        "tenant": tenant,
        "system": system.name,
        "candidate": {
            "id": str(candidate.id),
            "version": candidate.version,
            "source_revision": candidate.source_revision,
        },
        "decision": dossier.decision,
        "reasons": reasons,
        "reasons_total": len(dossier.reasons),
        "dossier": {"id": str(dossier.id), "version": dossier.version, "digest": dossier.digest},
        "hold": held,
        "links": links,
    }


# ---------------------------------------------------------------------------------- rendering


def render(stored_body: str, format: str, public_url: str) -> bytes:
    """The body a receiver gets: the stored facts with absolute links, or a Slack message."""
    facts: dict[str, Any] = json.loads(stored_body)
    base = public_url.rstrip("/")
    facts["links"] = {k: base + v for k, v in (facts.get("links") or {}).items()}
    if format == HookFormat.SLACK.value:
        return json.dumps(_slack(facts), sort_keys=True).encode()
    return json.dumps(facts, sort_keys=True, separators=(",", ":")).encode()


_HEADLINES = {
    HookEvent.DECISION.value: "decided",
    HookEvent.HOLD_OPENED.value: "is held for review",
    HookEvent.HOLD_WAIVED.value: "was waived",
    HookEvent.HOLD_REJECTED.value: "was rejected",
    HookEvent.HOLD_REOPENED.value: "is held again (the review lapsed)",
    HookEvent.GATE_REOPENED.value: "lost its gate (reopened)",
}


def slack_text(value: object) -> str:
    """`value` as plain text in a Slack mrkdwn field: `&`, `<` and `>` escaped (Slack's own
    rule), so a tenant's string (`<!channel>`, `<https://evil.example|login>`) shows as typed
    and never becomes a mention, a link or a command in the gate's own message."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack(facts: dict[str, Any]) -> dict[str, Any]:
    """Slack's incoming-webhook shape: `text` (also the notification) and mrkdwn `blocks`.
    Every string of the facts goes through `slack_text`: only the gate's own link syntax is
    markup."""
    candidate = facts.get("candidate") or {}
    links = facts.get("links") or {}
    what = _HEADLINES.get(str(facts.get("event")), str(facts.get("event")))
    head = (
        f"{slack_text(facts.get('system'))} {slack_text(candidate.get('version'))} "
        f"{slack_text(what)}: *{slack_text(str(facts.get('decision')).upper())}*"
    )
    reasons = [
        f"• `{slack_text(r.get('code'))}`: {slack_text(r.get('message', ''))}"
        for r in facts.get("reasons") or []
    ]
    more = int(facts.get("reasons_total") or 0) - len(reasons)
    if more > 0:
        reasons.append(f"… and {more} more in the dossier")
    named = [("candidate", "Candidate"), ("hold", "Hold"), ("dossier", "Dossier")]
    link_line = " · ".join(
        f"<{slack_text(links[k]).replace('|', '%7C')}|{label}>" for k, label in named if k in links
    )
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": head}}]
    if reasons:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(reasons)}})
    if link_line:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": link_line}]})
    return {"text": head, "blocks": blocks}
