"""Sending webhooks: the task `webhook.deliver` takes one outbox row (by id), claims it, posts it
signed, records the attempt and, on a failure, sends itself again after the back-off. A task that
is lost (a worker killed, a broker that dropped it) loses nothing: the reconciler's sweep
(`sweep`) finds every delivery that is due and nobody is sending, and sends its task again.

The target is checked against the egress policy at connection time, every redirect refused: a
webhook is never a way to reach the gate's own API, database or broker.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from celery import Celery
from celery.signals import worker_process_shutdown, worker_shutdown

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
from service.net.deadline import Deadline, DeadlinePassed, exchange
from service.net.egress import EgressPolicy, HTTPConnection, HTTPSConnection, refusal_in
from service.settings import Settings
from worker.context import WorkerContext

log = logging.getLogger("assaygate.webhooks")

DELIVER = "webhook.deliver"
USER_AGENT = "Assaygate-Webhook/1"
#: Attempts a worker process makes at once (each within its deadline), beside its shards.
SENDERS = 4
#: How much of a receiver's reply is read: its status is what counts.
REPLY_BYTES = 64 * 1024


def post(settings: Settings, sent: Outgoing) -> Attempted:
    """One attempt: the rendered body, signed now, posted through the egress policy within the
    attempt's total deadline (`webhook_timeout_s`: connect, send and the whole reply)."""
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

    try:
        policy = EgressPolicy.from_settings(settings, tenant=sent.tenant)
        status = _exchange(policy, sent.url, body, headers, settings)
    except DeadlinePassed:
        why = f"no whole reply within {settings.webhook_timeout_s:g} s (the attempt's deadline)"
        return Attempted(AttemptOutcome.FAILED, None, why, took())
    except Exception as exc:  # every way a send can fail is one failed attempt, recorded
        refused = refusal_in(exc)
        if refused is not None:
            return Attempted(AttemptOutcome.REFUSED, None, f"egress refused: {refused}", took())
        return Attempted(AttemptOutcome.FAILED, None, f"{exc.__class__.__name__}: {exc}", took())
    if 200 <= status < 300:
        return Attempted(AttemptOutcome.DELIVERED, status, None, took())
    return Attempted(AttemptOutcome.FAILED, status, f"HTTP {status}", took())


def _exchange(
    policy: EgressPolicy, url: str, body: bytes, headers: dict[str, str], settings: Settings
) -> int:
    """The receiver's status for one POST; no redirect is followed (http.client follows none)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    kind = HTTPSConnection if parts.scheme == "https" else HTTPConnection
    conn = kind(policy, parts.hostname, parts.port, settings.webhook_timeout_s)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        with Deadline(settings.webhook_timeout_s) as deadline:
            reply, _ = exchange(conn, deadline, "POST", path, body, headers, REPLY_BYTES)
    finally:
        conn.close()
    return reply.status


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
    """Queue a task per delivery on the deliveries' own queue (raises if the broker refuses)."""
    for delivery_id in delivery_ids:
        app.send_task(
            DELIVER,
            args=[str(delivery_id)],
            queue=queue_of(settings),
            countdown=countdown or None,
        )


def queue_of(settings: Settings) -> str:
    """The deliveries' own queue (`Settings.webhook_queue`): the shared workers consume it
    beside the shared queue and hand each delivery to their senders (`Senders`), never to the
    pool that runs shards."""
    return settings.webhook_queue


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


class Senders:
    """A worker process's own threads for webhook attempts. The task only hands its delivery
    over and returns, so the pool that runs shards is free again at once: a slow receiver
    delays the deliveries behind it, never an assay. Each attempt claims its delivery when it
    starts; a delivery lost here (the process killed while it waited or was being sent) is due
    and unclaimed once its lease lapses, and the reconciler's sweep sends it again."""

    def __init__(self, app: Celery, ctx: WorkerContext, threads: int = SENDERS) -> None:
        self.app = app
        self.ctx = ctx
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def hand(self, delivery_id: uuid.UUID) -> None:
        with self._lock:
            # A prefork child inherits no threads: it starts its own senders.
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="webhook")
                self._pid = os.getpid()
            pool = self._pool
        pool.submit(self._attempt, delivery_id)

    def stop(self) -> None:
        """Let the attempts under way end (each within its deadline); drop those waiting, which
        the sweep sends again, rather than hold the worker's shutdown for them."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _attempt(self, delivery_id: uuid.UUID) -> None:
        try:
            delay = deliver(self.ctx, delivery_id)
            if delay is not None:
                send(self.app, self.ctx.settings, [delivery_id], countdown=delay)
        except Exception:  # the sweep sends it again once its lease lapses
            log.exception("webhook delivery %s not attempted", delivery_id)


def register(app: Celery, ctx: WorkerContext) -> None:
    senders = Senders(app, ctx)

    # Not `shared`: the task closes over this app's context (as the shard task does).
    @app.task(name=DELIVER, ignore_result=True, acks_late=True, shared=False)
    def deliver_task(delivery_id: str) -> None:
        senders.hand(uuid.UUID(delivery_id))

    @worker_process_shutdown.connect(weak=False)
    def _stop_child_senders(**_kwargs: Any) -> None:
        senders.stop()

    @worker_shutdown.connect(weak=False)
    def _stop_senders(sender: Any = None, **_kwargs: Any) -> None:
        if getattr(sender, "app", None) is app:
            senders.stop()
