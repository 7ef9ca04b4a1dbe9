"""Nothing of a tenant's code outlives its right to run (docs/operations.md,
"When tenant code stops").

A worker process keeps an assay's warm targets (a python target's host, an mcp engine's runners
and stdio servers) only for that assay's shards, each under the assay's `Tenure`. The right ends
when the assay ends or starts stopping, when an operator revokes the tenant's code, or when a
secret the sandboxes hold is deleted or put again (rotated); `service.app.rights.lapsed` says
which, read afresh. The `Warden` asks at each shard's start (`check`) and, from a thread of each
worker process, every `POLL_S` for every assay it holds: a lost message or a quiet worker never
keeps a sandbox alive. Ending a tenure kills every tree of it at once and no sandbox is built
under it again; the worker then drops the targets (`on_end`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.engine import Engine

from service.app.records import DATABASE_ERRORS
from service.app.rights import Held, RightEnded, lapsed, resealed
from service.sandbox import Tenure

log = logging.getLogger("assaygate.worker")

#: How often a worker process reads whether each assay it holds sandboxes for may still run them.
POLL_S = 1.0


@dataclass
class Holding:
    """One assay's sandboxes on this process: what they hold, their tenure, the targets."""

    held: Held
    tenure: Tenure
    keys: set[str] = field(default_factory=set)


class Warden:
    """The assays this process holds sandboxes for, and the thread that ends them."""

    def __init__(
        self,
        engine: Callable[[], Engine],
        on_end: Callable[[uuid.UUID, RightEnded], None],
        every_s: float = POLL_S,
    ) -> None:
        self._engine, self._on_end, self._every_s = engine, on_end, every_s
        self._lock = threading.Lock()
        self._holdings: dict[uuid.UUID, Holding] = {}
        self._pid = 0

    def hold(self, held: Held, tenure: Tenure, key: str) -> None:
        """Watch the assay's sandboxes (under `tenure`, in the target at `key`) from now on."""
        with self._lock:
            found = self._holdings.get(held.assay_id)
            if found is None or found.tenure is not tenure:
                found = self._holdings[held.assay_id] = Holding(held, tenure)
            found.keys.add(key)
            if self._pid != os.getpid():  # a prefork child watches its own sandboxes
                self._pid = os.getpid()
                threading.Thread(target=self._watch, name="code-rights", daemon=True).start()

    def holding(self, assay_id: uuid.UUID) -> Holding | None:
        with self._lock:
            return self._holdings.get(assay_id)

    def drop(self, assay_id: uuid.UUID) -> Holding | None:
        with self._lock:
            return self._holdings.pop(assay_id, None)

    def check(self, assay_id: uuid.UUID) -> RightEnded | None:
        """At a shard's start (which found the assay open and the code allowed): whether the
        assay's warm sandboxes hold a secret since deleted or rotated, and must end first (a
        database that does not answer ends nothing here: the poll reads again)."""
        found = self.holding(assay_id)
        if found is None:
            return None
        with contextlib.suppress(*DATABASE_ERRORS):
            return resealed(self._engine(), found.held)
        return None

    def _watch(self) -> None:
        pid = os.getpid()
        while self._pid == pid:
            time.sleep(self._every_s)
            with self._lock:
                holdings = list(self._holdings.values())
            for found in holdings:
                try:
                    lapse = lapsed(self._engine(), found.held)
                except DATABASE_ERRORS:
                    continue  # read again next round; the shard's own checks still hold
                except Exception:  # the watch must outlive any one bad read
                    log.exception("could not read a tenant code's right to run")
                    continue
                if lapse is not None:
                    self._on_end(found.held.assay_id, lapse)
