"""A running shard's lease, renewed from a thread until the shard is stored."""

from __future__ import annotations

import logging
import threading
import uuid
from types import TracebackType
from typing import TYPE_CHECKING

from service.db.lease import renew_lease
from service.db.session import DATABASE_ERRORS, session_scope

if TYPE_CHECKING:
    from worker.tasks import WorkerContext

log = logging.getLogger("assaygate.worker")


class Heartbeat:
    """Renews a running shard's lease every third of `shard_lease_s`, from a thread, until the
    shard is stored: a lease lapses only when its worker is gone or cut off. A database that
    does not answer skips a beat; the reconciler then may send the shard again, and whichever
    run stores first is kept."""

    def __init__(self, ctx: WorkerContext, assay_id: uuid.UUID, index: int, attempt: int) -> None:
        self._ctx, self._assay_id, self._index, self._attempt = ctx, assay_id, index, attempt
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="lease-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self._done.set()
        self._thread.join(timeout=10)

    def _beat(self) -> None:
        lease_s = self._ctx.settings.shard_lease_s
        while not self._done.wait(lease_s / 3):
            try:
                with session_scope(self._ctx.engine) as session:
                    renew_lease(session, self._assay_id, self._index, self._attempt, lease_s)
            except DATABASE_ERRORS:
                log.warning(
                    "lease not renewed: the database did not answer",
                    extra={"assay_id": str(self._assay_id), "shard": self._index},
                )
