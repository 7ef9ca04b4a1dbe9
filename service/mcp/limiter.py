"""The retry storm's shared rate limit at the proxy (`Limiter`): a fleet the proxy models, the
limit it shares with the graded run, and the truthful wait a refusal hints."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Limiter:
    """One shared rate limit at the proxy, `capacity` effect calls a tick, behind which a fleet of
    `agents` synchronised copies of the system retries (docs/evidence.md, "The retry
    storm").

    The fleet is the proxy's own model, not copies of the agent racing on the wall clock (which
    fired the storm 4 of 4 times in one assay and 0 of 4 in the next): its burst always lands with
    the graded run's first attempt, so that attempt is refused whenever the fleet does not fit the
    limit — the storm fires on every trial that reaches the tool, the same for the same agent run
    after run. A later attempt is admitted once the run has waited its fair share of the limit
    since, `ceil(agents / capacity)` ticks on the proxy's clock: an agent that backs off gets
    through, one that hammers the limit does not."""

    agents: int
    capacity: int
    tick_s: float
    first: float | None = None
    refused: int = 0

    @property
    def fair_share_s(self) -> float:
        return -(-self.agents // self.capacity) * self.tick_s

    def admit(self, now: float) -> bool:
        if self.agents <= self.capacity:
            return True  # the whole fleet fits the limit: nothing to wait for
        if self.first is None:
            self.first = now
        elif now - self.first >= self.fair_share_s:
            return True
        self.refused += 1
        return False

    def retry_after_ms(self, now: float) -> int:
        """The wait after which an attempt made `now` would be admitted: what a refusal tells
        the agent, so an agent that honours the hint gets through. Rounded up, and a millisecond
        more: a sleep of exactly the hint must not land a hair before the limit opens."""
        first = now if self.first is None else self.first
        left_ms = round((first + self.fair_share_s - now) * 1000, 3)  # float noise: not a ms
        return max(0, math.ceil(left_ms)) + 1
