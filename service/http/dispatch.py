"""Sending shard tasks by name. The API never imports `worker`; it only knows the task names."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Sequence

from celery import Celery
from kombu.exceptions import KombuError
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy.engine import Engine

from service.app import webhooks
from service.app.errors import BrokerUnavailable
from service.app.records import DATABASE_ERRORS
from service.settings import Settings

log = logging.getLogger("assaygate.dispatch")

RUN_SHARD = "assay.run_shard"
DELIVER_WEBHOOK = "webhook.deliver"

_BROKER_ERRORS: tuple[type[Exception], ...] = (KombuError, KombuOperationalError, OSError)


class Dispatcher:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        # set_as_current=False: this client must not become the process-wide default app.
        self._celery = Celery("assaygate-api", set_as_current=False)
        self._celery.conf.update(settings.celery_config())

    def prepare(self) -> None:
        """Create what a serverless broker needs on disk (the embedded filesystem queue)."""
        if self._settings.broker_url.startswith("filesystem"):
            for folder in ("queue", "processed"):
                (self._settings.broker_dir / folder).mkdir(parents=True, exist_ok=True)

    def ping(self) -> None:
        """Raise BrokerUnavailable unless the broker answers now."""
        if self._settings.broker_url.startswith("filesystem"):
            folder = self._settings.broker_dir / "queue"
            if not (folder.is_dir() and os.access(folder, os.W_OK)):
                raise BrokerUnavailable(f"broker folder {folder} is not writable")
            return
        try:
            with self._celery.connection_for_write() as connection:
                connection.ensure_connection(
                    max_retries=1,
                    interval_start=0,
                    interval_step=1,
                    timeout=max(1, round(self._settings.readiness_timeout)),
                )
                client = getattr(connection.default_channel, "client", None)
                if client is not None and hasattr(client, "ping"):
                    client.ping()
        except _BROKER_ERRORS as exc:
            raise BrokerUnavailable(
                f"the broker is unreachable ({exc.__class__.__name__})"
            ) from exc

    def enqueue_shards(
        self, assay_id: uuid.UUID, shard_indices: Sequence[int], queue: str | None = None
    ) -> None:
        """To `queue`: a tenant's code queue (`Settings.tenant_queue`) or, None, the shared one."""
        name = queue or self._settings.queue
        try:
            with self._celery.producer_or_acquire() as producer:
                # Declared on every send, not once per connection: a Redis restarted without its
                # data has lost the queue's binding, and kombu drops a message sent to an
                # exchange with no binding without an error.
                self._celery.amqp.queues[name].bind(producer.channel).declare()
                for index in shard_indices:
                    self._celery.send_task(
                        RUN_SHARD,
                        args=[str(assay_id), index],
                        producer=producer,
                        queue=name,
                    )
        except _BROKER_ERRORS as exc:
            raise BrokerUnavailable(
                f"the broker is unreachable ({exc.__class__.__name__})"
            ) from exc
        log.info(
            "assay enqueued on %s",
            name,
            extra={"assay_id": str(assay_id), "shard": len(shard_indices)},
        )

    def kick_webhooks(self, engine: Engine) -> None:
        """Send the task of each due webhook delivery (what a review or a reopened gate just
        committed). Best effort: a delivery this misses, the reconciler's sweep sends."""
        try:
            due = webhooks.due(engine)
            if not due:
                return
            with self._celery.producer_or_acquire() as producer:
                for delivery_id in due:
                    self._celery.send_task(
                        DELIVER_WEBHOOK,
                        args=[str(delivery_id)],
                        producer=producer,
                        queue=self._settings.queue,
                    )
        except (*_BROKER_ERRORS, *DATABASE_ERRORS) as exc:
            log.warning("webhooks left to the reconciler (%s)", exc.__class__.__name__)

    def close(self) -> None:
        self._celery.close()
