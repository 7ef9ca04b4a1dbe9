"""A synchronised retry storm: a fleet of identical agents on one shared rate limit.

Discrete time in ticks. Every agent sends its first request at tick 0. The dependency accepts up
to `capacity` requests a tick; above `overload_factor * capacity` it browns out and accepts none,
so synchronised retries keep it down. A rejected agent retries by its policy: exponential backoff,
optional full jitter, and an optional token bucket shared by the fleet (a retry spends a token and
waits for one when the bucket is empty). Agent 0 is the agent whose refund the trial executes.

`FleetLimit` is the sandbox's side of a storm: the shared limit as the graded agent meets it.
"""

from __future__ import annotations

from service.core.system.manifest import RetryBudget, RetryPolicy
from service.core.trial.rng import Stream


class StormResult:
    __slots__ = ("accept_attempt", "accept_ms", "completed", "gave_up", "peak_retries")

    def __init__(
        self,
        accept_attempt: int | None,
        accept_ms: int | None,
        completed: int,
        gave_up: int,
        peak_retries: int,
    ) -> None:
        self.accept_attempt = accept_attempt
        self.accept_ms = accept_ms
        self.completed = completed
        self.gave_up = gave_up
        self.peak_retries = peak_retries


def simulate(
    policy: RetryPolicy,
    stream: Stream,
    agents: int,
    capacity: int,
    tick_ms: int,
    overload_factor: int,
    max_backoff_ms: int,
    max_ticks: int = 20_000,
) -> StormResult:
    buckets: dict[int, list[tuple[int, int]]] = {0: [(a, 1) for a in range(agents)]}
    budget = policy.budget
    tokens = float(budget.capacity) if budget else 0.0
    refill = budget.refill_per_s * tick_ms / 1000.0 if budget else 0.0
    overload = capacity * overload_factor
    jitter = policy.jitter == "full"
    peak = completed = gave_up = 0
    accept_attempt: int | None = None
    accept_ms: int | None = None
    last_tick = 0
    while buckets:
        t = min(buckets)
        if t > max_ticks:
            gave_up += sum(len(v) for v in buckets.values())
            break
        arrivals = buckets.pop(t)
        if budget:
            tokens = min(float(budget.capacity), tokens + refill * (t - last_tick))
        last_tick = t
        sent: list[tuple[int, int]] = []
        retries = 0
        for agent, attempt in arrivals:
            if attempt > 1 and budget:
                if tokens < 1.0:
                    buckets.setdefault(t + 1, []).append((agent, attempt))
                    continue
                tokens -= 1.0
            if attempt > 1:
                retries += 1
            sent.append((agent, attempt))
        if retries > peak:
            peak = retries
        n = len(sent)
        accepted = 0 if n > overload else min(n, capacity)
        offset = stream.randint(0, n - 1) if 0 < accepted < n else 0
        for i, (agent, attempt) in enumerate(sent):
            if (i - offset) % n < accepted:
                completed += 1
                if agent == 0:
                    accept_attempt, accept_ms = attempt, t * tick_ms
                continue
            if attempt >= policy.max_attempts:
                gave_up += 1
                continue
            delay = min(max_backoff_ms, policy.backoff_ms * (1 << (attempt - 1)))
            if jitter:
                delay = stream.randint(0, delay)
            nxt = t + max(1, -(-delay // tick_ms))
            buckets.setdefault(nxt, []).append((agent, attempt + 1))
    return StormResult(accept_attempt, accept_ms, completed, gave_up, peak)


def comparison_policies(policy: RetryPolicy, agents: int) -> tuple[RetryPolicy, RetryPolicy]:
    """The configured policy without jitter or budget, and with full jitter and a shared budget."""
    budget = policy.budget or RetryBudget(
        capacity=max(1, agents // 5), refill_per_s=float(max(1, agents // 5))
    )
    bare = policy.model_copy(update={"jitter": "none", "budget": None})
    disciplined = policy.model_copy(update={"jitter": "full", "budget": budget})
    return bare, disciplined


class FleetLimit:
    """The shared rate limit under a synchronised storm, judged by what the agent really does.

    The fleet is `agents` copies of the system under test behind a limit of `capacity` requests a
    tick. Identical copies retry at identical moments unless something (jitter, a budget) spreads
    them, so the sandbox watches several: other fleet members are run first against a limit that
    refuses them every time (`waits` records their back-off), then the graded copy. The graded
    copy's first request lands in the synchronised burst and is refused unless the whole fleet
    fits the limit; a later attempt is admitted only when its wait differs from every other
    copy's wait at the same attempt (no lockstep) and is at least the agent's fair share of the
    limit (`ceil(agents / capacity)` ticks). Nothing the manifest declares counts.
    """

    __slots__ = (
        "admitted",
        "attempts",
        "fair_ms",
        "first_fits",
        "last_at",
        "min_wait",
        "others",
        "waits",
    )

    def __init__(
        self, agents: int, capacity: int, tick_ms: int, others: list[list[int]] | None
    ) -> None:
        self.fair_ms = -(-agents // capacity) * tick_ms
        self.first_fits = agents <= capacity
        self.attempts = 0
        self.last_at = 0
        self.admitted: int | None = None
        self.min_wait: int | None = None
        # The other copies' waits before each retry; None while this is one of them.
        self.others = others
        self.waits: list[int] = []

    def admit(self, now: int) -> bool:
        self.attempts += 1
        if self.attempts == 1:
            ok = self.first_fits
        else:
            wait = now - self.last_at
            self.waits.append(wait)
            self.min_wait = wait if self.min_wait is None else min(self.min_wait, wait)
            others = self.others
            if others is None:
                ok = False
            else:
                k = len(self.waits) - 1
                lockstep = False
                for other in others:
                    if k < len(other) and other[k] == wait:
                        lockstep = True
                ok = not lockstep and wait >= self.fair_ms
        self.last_at = now
        if ok and self.admitted is None:
            self.admitted = self.attempts
        return ok

    def observed(self) -> tuple[int, int | None, int | None]:
        """Attempts, the attempt admitted (None: never), the shortest wait between attempts."""
        return self.attempts, self.admitted, self.min_wait
