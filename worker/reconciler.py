"""The reconciler: a thread in every worker process that finds lost shards and sends them again.

Messages are hints; the database says what is left to do (service.app.reconcile). Every
`reconcile_interval_s` (with jitter, so workers spread out) each worker's reconciler:

1. fails an assay one of whose shards lapsed after `shard_max_attempts` starts or sends, with a
   reason naming the shard; settles the lapsed shards of an assay that is stopping (an empty,
   stopped result, as a worker would store on finding the stop);
2. sends again every lapsed shard that was running (its worker is gone or cut off), and every
   lapsed shard that was queued if its queue is empty (its message was lost: a broker that
   restarted without its data, or a task that could not store it). A queued shard behind a
   long queue is not lost, only waiting, so it is not sent twice. Each goes back to the queue
   it belongs to: its tenant's code queue when its manifest runs code, else the shared one, and
   each queue's depth is measured on its own;
3. merges any assay whose shards are all stored but which nobody decided;
4. signs the dossier version that records each lapsed waiver or rejection (the gate already
   reads it as lapsed; this writes it into the signed chain, once however many workers look);
5. sends the task of every webhook delivery that is due and that nobody is sending (an event
   whose writer sent none, a retry whose task was lost: worker.webhooks).

Reconcilers in several workers never do a step twice: the lapsed rows are locked (`SKIP LOCKED`)
and each send extends the lease in the transaction that publishes it. Any step that cannot
reach the database or the broker is skipped until the next round.

One bad item never stops a round: each assay decided, each lost shard's queue and each lapsed
review is its own unit, and a unit that fails for anything but an outage (a row no canonical
form exists for, a manifest that no longer parses) is logged and skipped, and so is a step that
fails that way; every other tenant's work in the round is still done.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from celery import Celery
from kombu import Connection
from kombu.exceptions import KombuError
from kombu.exceptions import OperationalError as KombuOperationalError

from service.app import reconcile
from service.app.reconcile import Lapsed
from service.app.records import DATABASE_ERRORS, ShardStatus, utcnow
from service.app.tenants import queue_for
from service.settings import Settings
from worker import webhooks
from worker.context import WorkerContext
from worker.tasks import RUN_SHARD, dossier_signer, finalize, seals

log = logging.getLogger("assaygate.reconciler")

T = TypeVar("T")

BROKER_ERRORS: tuple[type[Exception], ...] = (KombuError, KombuOperationalError, OSError)


@dataclass
class Round:
    """What one round did, for logs and tests."""

    failed: list[str] = field(default_factory=list)
    settled: int = 0
    resent: int = 0
    decided: int = 0
    expired: int = 0
    webhooks: int = 0
    # The shared queue's depth (None: the broker did not answer), and every queue measured.
    queue_depth: int | None = None
    queue_depths: dict[str, int] = field(default_factory=dict)


class Reconciler:
    def __init__(self, settings: Settings, name: str) -> None:
        self.settings = settings
        self.name = name
        # Its own database engine and broker client: never the ones a task is using.
        self.ctx = WorkerContext(settings)
        self.client = Celery("assaygate-reconciler", set_as_current=False)
        self.client.conf.update(settings.celery_config())
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="reconciler", daemon=True)
        # The stores this reconciler found unreachable, so an outage is logged once, not per round.
        self._down: set[str] = set()
        # A pool child forked while this thread holds connections must never use or close them.
        os.register_at_fork(after_in_child=self.ctx.forget_engine)
        # Whether its worker signs (a shared one); a tenant's worker never holds the key.
        self.signs = seals(settings)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.client.close()

    def _loop(self) -> None:
        interval = self.settings.reconcile_interval_s
        while not self._stopping.wait(interval * random.uniform(0.75, 1.25)):
            try:
                done = self.run_once()
            except DATABASE_ERRORS as exc:
                self._unreachable("database", exc)
                continue
            except Exception:
                log.exception("reconciler round failed")
                continue
            if done.failed or done.settled or done.resent or done.decided or done.expired:
                log.info(
                    "reconciled: %d resent, %d settled, %d decided, %d failed, %d reviews "
                    "expired (queue depth %s)",
                    done.resent,
                    done.settled,
                    done.decided,
                    len(done.failed),
                    done.expired,
                    done.queue_depth,
                )
            if done.webhooks:
                log.info("reconciled: %d webhook deliveries sent again", done.webhooks)

    # ---------------------------------------------------------------------------------- rounds

    def _unreachable(self, store: str, exc: Exception) -> None:
        if store not in self._down:
            self._down.add(store)
            log.warning("reconciler waits: the %s does not answer (%s)", store, exc)

    def _reachable(self, store: str) -> None:
        if store in self._down:
            self._down.discard(store)
            log.info("reconciler resumes: the %s answers again", store)

    def _isolated(self, what: str, unit: Callable[[], T], skipped: T) -> T:
        """`unit()`, or `skipped` when it fails for anything but an outage (logged): one bad
        row is skipped, and the round goes on. A database that does not answer still ends the
        round (the loop waits for it)."""
        try:
            return unit()
        except DATABASE_ERRORS:
            raise
        except Exception:
            log.exception("reconciler skipped %s", what)
            return skipped

    def run_once(self) -> Round:
        done = Round()
        lapsed = self._isolated(
            "the lapsed shards",
            lambda: reconcile.settle_lapsed(
                self.ctx.engine,
                utcnow(),
                self.settings.shard_max_attempts,
                by=f"reconciler:{self.name}",
            ),
            reconcile.Settled(),
        )
        for shard, reason in lapsed.failed:
            done.failed.append(str(shard.assay_id))
            log.error(
                "assay failed: %s",
                reason,
                extra={"assay_id": str(shard.assay_id), "shard": shard.shard_index},
            )
        done.settled = lapsed.settled
        stopping = lapsed.stopping
        self._reachable("database")
        # A stopping assay whose last shards were just settled is decided now, not next round
        # (by a shared worker: a tenant's worker holds no key, and leaves the merges to them).
        done.decided = sum(self._decide(assay_id) for assay_id in stopping if self.signs)
        done.queue_depth = self.queue_depth()
        if done.queue_depth is not None:
            done.queue_depths[self.settings.queue] = done.queue_depth
            done.resent = self._resend(done.queue_depths)
        if self.signs:
            done.decided += self._isolated("the undecided assays", self._decide_leftovers, 0)
            done.expired = self._isolated("the lapsed reviews", self.expire_reviews, 0)
        done.webhooks = self._isolated("the due webhooks", self.sweep_webhooks, 0)
        return done

    def sweep_webhooks(self) -> int:
        """Send the tasks of due deliveries nobody is sending. A retry's own task is due at its
        time; the sweep waits one interval more, so it only sends what was lost."""
        try:
            return webhooks.sweep(self.client, self.ctx, self.settings.reconcile_interval_s)
        except BROKER_ERRORS as exc:
            self._unreachable("broker", exc)
            return 0

    def expire_reviews(self) -> int:
        """Sign the version that records each lapsed waiver or rejection."""
        return reconcile.expire_reviews(self.ctx.engine, dossier_signer(self.ctx))

    def _resend(self, depths: dict[str, int]) -> int:
        """Send again the lapsed shards that were lost, each to the queue it belongs to (its
        tenant's code queue when its manifest runs code, else the shared queue); rolled back if
        the broker refuses. `depths`: the queues measured so far, grown with each queue seen."""

        def queue_of(shard: Lapsed) -> str | None:
            """The queue a lost shard goes back to; None when it is not lost (or its assay
            cannot be read: skipped, logged)."""
            what = f"the lost shard {shard.shard_index} of assay {shard.assay_id}"
            queue = self._isolated(what, lambda: self._queue_of(shard.assay_id), None)
            if queue is None:
                return None
            if queue not in depths:
                depth = self.queue_depth(queue)
                if depth is None:
                    return None
                depths[queue] = depth
            return queue if self._lost(shard, depths[queue]) else None

        def publish(queue: str, by_assay: dict[uuid.UUID, list[int]]) -> None:
            self.publish(by_assay, queue)

        try:
            lost = reconcile.resend_lost(
                self.ctx.engine, utcnow(), self.settings.shard_lease_s, queue_of, publish
            )
        except BROKER_ERRORS as exc:
            self._unreachable("broker", exc)  # nothing counted: the transaction rolled back
            return 0
        if not lost:
            return 0
        count = sum(len(v) for by_assay in lost.values() for v in by_assay.values())
        log.warning("resent %d lost shards to %s", count, ", ".join(sorted(lost)))
        return count

    def _queue_of(self, assay_id: uuid.UUID) -> str | None:
        parsed = self.ctx.assay(assay_id)
        if parsed is None:
            return None
        return queue_for(self.settings, parsed.inputs.tenant, parsed.manifest)

    def _lost(self, shard: Lapsed, queue_depth: int) -> bool:
        if shard.stop_reason is not None or shard.tries >= self.settings.shard_max_attempts:
            return False  # settled or failed by the first step
        return shard.status == ShardStatus.RUNNING.value or queue_depth == 0

    def _decide_leftovers(self) -> int:
        grace = max(self.settings.reconcile_interval_s, 1.0)
        undecided = reconcile.undecided(self.ctx.engine, utcnow() - timedelta(seconds=grace))
        return sum(self._decide(assay_id) for assay_id in undecided)

    def _decide(self, assay_id: uuid.UUID) -> int:
        """1 if the assay is now decided (by this call or a racing one), else 0 (also when it
        cannot be: logged, and the round goes on)."""

        def decide() -> int:
            parsed = self.ctx.assay(assay_id)
            return int(parsed is not None and finalize(self.ctx, parsed) is not None)

        return self._isolated(f"the merge of assay {assay_id}", decide, 0)

    # ---------------------------------------------------------------------------------- broker

    def _connection(self) -> Connection:
        connection: Connection = self.client.connection_for_write()
        connection.ensure_connection(
            max_retries=1,
            interval_start=0,
            interval_step=1,
            timeout=max(1, round(self.settings.readiness_timeout)),
        )
        return connection

    def _declare(self, connection: Connection, queue: str) -> int:
        """Declare a shard queue and its binding; return the messages waiting in it. Declared
        every time: a broker that restarted empty has lost them, and a message sent to an
        exchange with no binding is dropped without an error."""
        channel: Any = connection.default_channel
        self.client.amqp.queues[queue].bind(channel).declare()
        return int(channel.queue_declare(queue=queue, passive=False).message_count)

    def queue_depth(self, queue: str | None = None) -> int | None:
        """Messages waiting in a shard queue (None: the shared one), or None if the broker does
        not answer."""
        try:
            with self._connection() as connection:
                depth = self._declare(connection, queue or self.settings.queue)
        except BROKER_ERRORS as exc:
            self._unreachable("broker", exc)
            return None
        self._reachable("broker")
        return depth

    def publish(self, shards: dict[uuid.UUID, list[int]], queue: str | None = None) -> None:
        """Send one message per shard to `queue` (None: the shared one); raises if the broker
        refuses any."""
        name = queue or self.settings.queue
        with self._connection() as connection:
            self._declare(connection, name)
            with self.client.producer_or_acquire() as producer:
                for assay_id, indices in shards.items():
                    for index in indices:
                        self.client.send_task(
                            RUN_SHARD,
                            args=[str(assay_id), index],
                            producer=producer,
                            queue=name,
                        )
