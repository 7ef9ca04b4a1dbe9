"""What the use cases need from outside the database, as protocols the edges satisfy: the broker
that runs shards (`service.http.dispatch.Dispatcher`) and the per-key submission limit
(`service.http.limits.SubmissionLimit`). The application layer never imports either."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol


class Queue(Protocol):
    def ping(self) -> None:
        """Raise `BrokerUnavailable` unless the broker answers now."""

    def enqueue_shards(
        self, assay_id: uuid.UUID, shard_indices: Sequence[int], queue: str | None = None
    ) -> None:
        """Send one task per shard to `queue` (None: the shared queue); raise
        `BrokerUnavailable` if the broker refuses any."""


class Limit(Protocol):
    def check(self, key_id: uuid.UUID) -> None:
        """Count one submission of this key; raise `SubmissionRateLimited` over the limit."""
