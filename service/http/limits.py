"""Submissions per key per minute: a fixed one-minute window counted in Redis when the broker is
Redis (shared by every API process), else in this process (embedded mode runs one API)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Protocol

import redis

from service.app.errors import BrokerUnavailable, SubmissionRateLimited
from service.settings import Settings

WINDOW_S = 60


class Counter(Protocol):
    def hit(self, key: str, window: int) -> int:
        """Count one hit on `key` in `window` and return the count so far."""


class MemoryCounter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, int], int] = {}

    def hit(self, key: str, window: int) -> int:
        with self._lock:
            # Older windows are finished: forget them so the dict stays small.
            for stale in [k for k in self._counts if k[1] < window]:
                del self._counts[stale]
            self._counts[(key, window)] = self._counts.get((key, window), 0) + 1
            return self._counts[(key, window)]


class RedisCounter:
    def __init__(self, settings: Settings) -> None:
        self._client = redis.Redis.from_url(
            settings.broker_url,
            socket_connect_timeout=settings.readiness_timeout,
            socket_timeout=settings.readiness_timeout,
        )
        self._prefix = f"{settings.redis_key_prefix}assaygate:ratelimit:"

    def hit(self, key: str, window: int) -> int:
        name = f"{self._prefix}{key}:{window}"
        try:
            pipe = self._client.pipeline()
            pipe.incr(name)
            pipe.expire(name, WINDOW_S * 2)
            count, _ = pipe.execute()
        except redis.RedisError as exc:
            raise BrokerUnavailable("the broker (which counts submissions) is unreachable") from exc
        return int(count)

    def close(self) -> None:
        self._client.close()


class SubmissionLimit:
    def __init__(self, settings: Settings, counter: Counter | None = None) -> None:
        self.per_minute = settings.submissions_per_minute
        self.counter: Counter = counter or (
            RedisCounter(settings) if settings.broker_is_redis else MemoryCounter()
        )

    def check(self, key_id: uuid.UUID, *, now: float | None = None) -> None:
        """Count one submission by this key; 429 with Retry-After once over the limit."""
        if self.per_minute <= 0:
            return
        now = time.time() if now is None else now
        window = int(now // WINDOW_S)
        if self.counter.hit(str(key_id), window) > self.per_minute:
            retry_after = max(1, int((window + 1) * WINDOW_S - now + 0.999))
            raise SubmissionRateLimited(
                f"more than {self.per_minute} submissions this minute for this key",
                retry_after=retry_after,
            )

    def close(self) -> None:
        if isinstance(self.counter, RedisCounter):
            self.counter.close()
