"""A running shard's lease (and those of the shards held with it), renewed from a thread until the
shard is stored, and its progress."""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from service.app import shards
from service.app.records import DATABASE_ERRORS
from service.core.shards.shard import ShardActivity

if TYPE_CHECKING:
    from worker.context import WorkerContext

log = logging.getLogger("assaygate.worker")
# How often a running shard's progress is written, at most (the lease's own beat may be slower).
PROGRESS_S = 5.0


class EngineWatch:
    """A shard's engine, as the heartbeat sees it: set once the shard's target is loaded; its
    runs are counted from then (a worker keeps an engine for several shards)."""

    def __init__(self) -> None:
        self._target: Any = None
        self._base = (0, 0)

    def watch(self, target: Any) -> None:
        activity = getattr(target, "activity", None)  # an mcp engine; others have none
        if activity is not None:
            now = activity()
            self._base = (now["runs_done"], now.get("gate_runs_done", 0))
            self._target = target

    def activity(self) -> ShardActivity | None:
        target = self._target
        if target is None:
            return None
        now: ShardActivity = target.activity()
        return {
            **now,
            "runs_done": now["runs_done"] - self._base[0],
            "gate_runs_done": now.get("gate_runs_done", 0) - self._base[1],
        }


class Heartbeat:
    """Renews a running shard's lease every third of `shard_lease_s`, from a thread, until the
    shard is stored: a lease lapses only when its worker is gone or cut off. A database that
    does not answer skips a beat; the reconciler then may send the shard again, and whichever
    run stores first is kept.

    `activity`, when given, says what the shard's engine is doing (`EngineWatch.activity`):
    each beat writes it as the shard's progress.

    `held`: the (shard, attempt) of every other shard of the assay the worker holds and runs
    with this one on the same engine (worker.held); each beat renews all their leases in one
    transaction. The engine's activity is written on this shard only, as the assay's progress
    sums its shards'."""

    def __init__(
        self,
        ctx: WorkerContext,
        assay_id: uuid.UUID,
        index: int,
        attempt: int,
        activity: Callable[[], ShardActivity | None] | None = None,
        held: Sequence[tuple[int, int]] = (),
    ) -> None:
        self._ctx, self._assay_id, self._index, self._attempt = ctx, assay_id, index, attempt
        self._held = [(index, attempt), *held] if held else []
        self._holding = threading.Lock()  # `hold` adds a lease while the beat renews them
        self._activity = activity
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="lease-heartbeat", daemon=True)

    def hold(self, index: int, attempt: int) -> None:
        """Renew one more shard's lease from now on (a worker holding one more shard)."""
        with self._holding:
            if not self._held:
                self._held = [(self._index, self._attempt)]
            self._held.append((index, attempt))

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
        self._progress(final=True)

    def _progress(self, final: bool = False) -> None:
        """Write the engine's activity as the shard's progress (the final one: nothing busy)."""
        if self._activity is None:
            return
        try:
            now = self._activity()
        except Exception:  # progress is for people; a failure to read it never fails a shard
            return
        if now is None:
            return
        if final:
            now = {**now, "slots_busy": 0, "waiting": {}}
        with contextlib.suppress(*DATABASE_ERRORS):  # the next beat writes it
            shards.progress(self._ctx.engine, self._assay_id, self._index, self._attempt, now)

    def _beat(self) -> None:
        lease_s = self._ctx.settings.shard_lease_s
        every = min(lease_s / 3, PROGRESS_S) if self._activity is not None else lease_s / 3
        renewed = 0.0
        while not self._done.wait(every):
            self._progress()
            renewed += every
            if renewed + 1e-9 < lease_s / 3:
                continue
            renewed = 0.0
            try:
                with self._holding:
                    held = list(self._held)
                if held:
                    shards.renew_all(self._ctx.engine, self._assay_id, held, lease_s)
                else:
                    shards.renew(
                        self._ctx.engine, self._assay_id, self._index, self._attempt, lease_s
                    )
            except DATABASE_ERRORS:
                log.warning(
                    "lease not renewed: the database did not answer",
                    extra={"assay_id": str(self._assay_id), "shard": self._index},
                )
