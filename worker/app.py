"""The Celery application, built by `make_celery(settings)`.

Delivery is at-least-once on purpose: `acks_late` keeps a shard's message until the task
returns, so a worker killed mid-shard loses nothing (Redis hands the message to another worker
after the visibility timeout; a lost prefork child is rejected and requeued at once). Running a
shard twice is safe because its result is written only while unset (see service.db.assay).
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import setup_logging, worker_ready

from service.settings import Settings, configure_logging
from worker.tasks import WorkerContext, register


def make_celery(settings: Settings) -> Celery:
    app = Celery("assaygate", set_as_current=False)
    app.conf.update(settings.celery_config())
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # One message in hand per process: the rest stay in the broker for idle workers.
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        # Remote control needs fanout exchanges, which the embedded filesystem broker lacks.
        worker_enable_remote_control=settings.broker_is_redis,
    )

    @setup_logging.connect(weak=False)
    def _logging(**_kwargs: Any) -> None:
        configure_logging(settings)

    @worker_ready.connect(weak=False)
    def _ready(**_kwargs: Any) -> None:
        # `serve` waits for this before it listens, so its first screen is not buried.
        if settings.worker_ready_file is not None:
            settings.worker_ready_file.touch()

    register(app, WorkerContext(settings))
    return app
