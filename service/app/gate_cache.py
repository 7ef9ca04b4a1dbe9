"""The gate route's answer cache: rendered answers per process, each valid for one epoch of its
system (split from `service.app.gate`, which re-exports `AnswerCache`)."""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from service.db.models import as_utc

if TYPE_CHECKING:
    from service.app.gate import Standing


class Epoched(Protocol):
    """A system as the cache keys it: its id and the gate epoch read for it."""

    @property
    def id(self) -> uuid.UUID: ...

    @property
    def gate_epoch(self) -> int: ...


class AnswerCache:
    """The gate route's rendered answers, per process, each valid for one epoch of its system.

    The database bumps a system's `gate_epoch` with every write that can change what its gate
    says (migration 0009's triggers), and the route reads the epoch in the one indexed lookup
    that finds the system, before anything else: an answer computed afterwards is at least as
    new as that epoch, so it is served only while the epoch stands. An answer resting on a
    waiver or rejection is served only until that review lapses. The least recently used
    answers beyond `size` are dropped."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[uuid.UUID, str | None, str | None], _Cached] = (
            OrderedDict()
        )

    def get(
        self,
        system: Epoched,
        version: str | None,
        now: datetime,
        *,
        artifact: str | None = None,
    ) -> bytes | None:
        key = (system.id, version, artifact)
        with self._lock:
            found = self._entries.get(key)
            if found is None or found.epoch != system.gate_epoch:
                return None
            if found.until is not None and as_utc(found.until) <= as_utc(now):
                return None
            self._entries.move_to_end(key)
            return found.body

    def put(
        self,
        system: Epoched,
        version: str | None,
        standing: Standing,
        body: bytes,
        *,
        artifact: str | None = None,
    ) -> None:
        key = (system.id, version, artifact)
        with self._lock:
            self._entries[key] = _Cached(system.gate_epoch, standing.changes_at, body)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


@dataclass(frozen=True)
class _Cached:
    epoch: int
    until: datetime | None
    body: bytes
