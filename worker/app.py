"""The Celery application, built by `make_celery(settings)`.

Delivery is at-least-once on purpose, and the database, not the broker, is the record of what is
left to do:

- `acks_late` keeps a shard's message until the task returns, so a worker killed mid-shard loses
  nothing: Redis hands the message to another worker after the visibility timeout, and a lost
  prefork child is rejected and requeued at once (`task_reject_on_worker_lost`).
- A task that cannot reach the database retries with back-off, then hands its message back
  (`Reject(requeue=True)`): it never acknowledges a shard it did not store (worker.tasks).
- What the broker loses anyway (a Redis restarted without its data loses every queued message;
  one restarted with its append-only file still loses the messages in flight) is found by the
  reconciler in every worker through each shard's lease, and sent again (worker.reconciler).
- Running a shard twice is safe because its result is written only while unset, and a copy of a
  message finds the shard stored or leased by a live worker and does nothing (service.app.shards).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery, bootsteps
from celery.signals import setup_logging, worker_ready, worker_shutdown

from service.app import tenants
from service.settings import Settings, configure_logging
from worker import health, webhooks
from worker.code import say_posture
from worker.context import WorkerContext
from worker.reconciler import Reconciler
from worker.tasks import register

log = logging.getLogger("assaygate.worker")


def make_celery(settings: Settings) -> Celery:
    app = Celery("assaygate", set_as_current=False)
    app.conf.update(settings.celery_config())
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # One message in hand per process: the rest stay in the broker for idle workers.
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        # On a lost broker connection a running shard keeps running and stores its result in the
        # database; its message cannot be acknowledged on the new connection, and the copy the
        # broker may deliver again finds the shard stored. Cancelling it instead (Celery 6's
        # default) would throw the work away.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        # Keep reconnecting to the broker however long it is away (Celery gives up after 100).
        broker_connection_max_retries=None,
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

    @worker_ready.connect(weak=False)
    def _posture(sender: Any = None, **_kwargs: Any) -> None:
        if getattr(sender, "app", None) is app and settings.worker_tenant:
            say_posture(settings)

    @worker_ready.connect(weak=False)
    def _shared_loopback(sender: Any = None, **_kwargs: Any) -> None:
        # Every worker reaches loopback for tenants: the shared ones their webhooks and remote
        # agents, a tenant's its code's egress.
        if getattr(sender, "app", None) is app:
            tenants.say_shared_loopback(ctx.engine, settings)

    reconcilers: list[Reconciler] = []

    @worker_ready.connect(weak=False)
    def _start_reconciler(sender: Any = None, **_kwargs: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        reconciler = Reconciler(settings, str(getattr(sender, "hostname", "worker")))
        reconciler.start()
        reconcilers.append(reconciler)

    @worker_shutdown.connect(weak=False)
    def _stop_reconciler(sender: Any = None, **_kwargs: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        while reconcilers:
            reconcilers.pop().stop()

    if settings.worker_health_file is not None:
        app.steps["consumer"].add(health_beat(settings))

    ctx = WorkerContext(settings)
    register(app, ctx)
    webhooks.register(app, ctx)
    return app


# A blueprint's states once it shuts down (celery.bootsteps; celery-types does not declare them).
_SHUTTING_DOWN = (bootsteps.CLOSE, bootsteps.TERMINATE)  # type: ignore[attr-defined]


def health_beat(settings: Settings) -> type[bootsteps.StartStopStep]:
    """A consumer step that beats `consuming` into the health file from the consumer's event
    loop (its timer fires only while the loop turns), and says `connecting` when the consumer
    stops for a lost broker, `stopping` when the worker shuts down (worker.health)."""

    class HealthBeat(bootsteps.StartStopStep):
        requires = ("celery.worker.consumer.tasks:Tasks",)

        def __init__(self, parent: Any, **kwargs: Any) -> None:
            super().__init__(parent, **kwargs)
            self.entry: Any = None

        def start(self, parent: Any) -> None:
            def beat() -> None:
                # Never out of the loop: kombu would take an OSError for the broker's. A beat not
                # written goes stale, which is what the probes are for.
                try:
                    health.write(settings, health.CONSUMING)
                except OSError as exc:
                    log.warning("cannot write the health file: %s", exc)

            self.entry = parent.timer.call_repeatedly(settings.worker_health_interval_s, beat)
            if parent.hub is not None:
                parent.hub.call_soon(beat)  # once the loop first turns
            else:
                beat()

        def stop(self, parent: Any) -> None:
            if self.entry is not None:
                self.entry.cancel()
                self.entry = None
            # A shutdown closes the consumer's blueprint first; a lost broker only restarts it.
            stopping = parent.blueprint.state in _SHUTTING_DOWN
            health.write(settings, health.STOPPING if stopping else health.CONNECTING)

        def shutdown(self, parent: Any) -> None:
            health.write(settings, health.STOPPING)

    return HealthBeat
