"""Sending webhooks: the task `webhook.deliver` takes one outbox row (by id), claims it, posts it
signed, records the attempt and, on a failure, sends itself again after the back-off. A task that
is lost (a worker killed, a broker that dropped it) loses nothing: the reconciler's sweep
(`sweep`) finds every delivery that is due and nobody is sending, and sends its task again.

The target is checked against the egress policy at connection time, every redirect refused: a
webhook is never a way to reach the gate's own API, database or broker.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta

import httpx
from celery import Celery

from service.app import webhooks
from service.app.notify import render
from service.app.records import utcnow
from service.app.webhooks import Attempted, AttemptOutcome, Outgoing
from service.core.signing.webhook import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    header,
)
from service.net.egress import EgressPolicy, EgressTransport, refusal_in
from service.settings import Settings
from worker.context import WorkerContext

log = logging.getLogger("assaygate.webhooks")

DELIVER = "webhook.deliver"
USER_AGENT = "Assaygate-Webhook/1"


def post(settings: Settings, sent: Outgoing) -> Attempted:
    """One attempt: the rendered body, signed now, posted through the egress policy."""
    body = render(sent.body, sent.format, settings.link_base)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        DELIVERY_HEADER: str(sent.delivery_id),
        EVENT_HEADER: sent.event,
        SIGNATURE_HEADER: header(sent.secret, body, int(time.time())),
    }
    started = time.monotonic()

    def took() -> int:
        return int((time.monotonic() - started) * 1000)

    transport = EgressTransport(EgressPolicy.from_settings(settings, tenant=sent.tenant))
    try:
        with httpx.Client(
            transport=transport, timeout=settings.webhook_timeout_s, follow_redirects=False
        ) as client:
            response = client.post(sent.url, content=body, headers=headers)
    except Exception as exc:  # every way a send can fail is one failed attempt, recorded
        refused = refusal_in(exc)
        if refused is not None:
            return Attempted(AttemptOutcome.REFUSED, None, f"egress refused: {refused}", took())
        return Attempted(AttemptOutcome.FAILED, None, f"{exc.__class__.__name__}: {exc}", took())
    if 200 <= response.status_code < 300:
        return Attempted(AttemptOutcome.DELIVERED, response.status_code, None, took())
    return Attempted(
        AttemptOutcome.FAILED, response.status_code, f"HTTP {response.status_code}", took()
    )


def deliver(ctx: WorkerContext, delivery_id: uuid.UUID) -> float | None:
    """One attempt at a delivery if it is due and free; the seconds until its next attempt
    (None: delivered, failed for good, or not this call's to send)."""
    settings = ctx.settings
    sent = webhooks.claim(ctx.engine, delivery_id, lease_s=settings.webhook_timeout_s + 30)
    if sent is None:
        return None
    result = post(settings, sent)
    delay = webhooks.settle(ctx.engine, sent, result, settings)
    level = logging.INFO if result.outcome is AttemptOutcome.DELIVERED else logging.WARNING
    log.log(
        level,
        "webhook %s attempt %d: %s%s",
        sent.event,
        sent.number,
        result.outcome.value,
        f" ({result.error})" if result.error else "",
        extra={"delivery_id": str(delivery_id)},
    )
    return delay


def send(
    app: Celery, settings: Settings, delivery_ids: list[uuid.UUID], countdown: float = 0
) -> None:
    """Queue a task per delivery on the shared queue (raises if the broker refuses)."""
    for delivery_id in delivery_ids:
        app.send_task(
            DELIVER, args=[str(delivery_id)], queue=settings.queue, countdown=countdown or None
        )


def sweep(app: Celery, ctx: WorkerContext, grace_s: float) -> int:
    """Send the task of every delivery due for `grace_s` that nobody is sending: the first
    attempt of an event whose writer sent no task, a retry whose task was lost."""
    due = webhooks.due(ctx.engine, utcnow() - timedelta(seconds=grace_s))
    if due:
        send(app, ctx.settings, due)
    return len(due)


def kick(app: Celery, ctx: WorkerContext) -> None:
    """Send the deliveries an event just committed. Best effort: what fails here, the
    reconciler's sweep sends."""
    try:
        sweep(app, ctx, 0)
    except Exception as exc:  # the sweep finds them; a decided shard must not fail for this
        log.warning("webhooks not sent yet (%s); the reconciler will", exc.__class__.__name__)


def register(app: Celery, ctx: WorkerContext) -> None:
    # Not `shared`: the task closes over this app's context (as the shard task does).
    @app.task(name=DELIVER, ignore_result=True, acks_late=True, shared=False)
    def deliver_task(delivery_id: str) -> None:
        delay = deliver(ctx, uuid.UUID(delivery_id))
        if delay is not None:
            send(app, ctx.settings, [uuid.UUID(delivery_id)], countdown=delay)
