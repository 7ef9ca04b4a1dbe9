"""What an assay spends, per fault and arm: agent runs, seconds, reported tokens and cost; and the
budgets (`plan.stop.max_runs`, `max_seconds`, `max_tokens`, `max_cost`) that stop it.

Tokens and cost are what the agent reports: a claim's `usage` object (`{"tokens": .., "cost":
..}`), which the framework runners fill from the framework itself (LangGraph messages'
`usage_metadata`, the OpenAI Agents SDK's `context_wrapper.usage`). A budget protects the team's
money, not the gate's evidence: an agent that under-reports only spends more of its own.

Pure: the clock is handed in (the core reads no time of its own).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from service.core.faults.plan import StopConditions

#: The reason a budget stop starts with; the gate reads it as a hold, never a block or an allow.
BUDGET = "budget"


def budgeted(stop: StopConditions) -> bool:
    return any(
        x is not None for x in (stop.max_runs, stop.max_seconds, stop.max_tokens, stop.max_cost)
    )


def usage_of(claims: Iterable[Mapping[str, object]]) -> tuple[int, float]:
    """Tokens and cost a run's claims report; malformed or negative figures count as none."""
    tokens, cost = 0, 0.0
    for claim in claims:
        usage = claim.get("usage")
        if not isinstance(usage, Mapping):
            continue
        t, c = usage.get("tokens"), usage.get("cost")
        if isinstance(t, int) and not isinstance(t, bool) and t > 0:
            tokens += t
        if isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c > 0:
            cost += float(c)
    return tokens, cost


@dataclass
class ArmSpend:
    runs: int = 0
    seconds: float = 0.0
    tokens: int = 0
    cost: float = 0.0

    def add(self, other: ArmSpend) -> None:
        self.runs += other.runs
        self.seconds += other.seconds
        self.tokens += other.tokens
        self.cost += other.cost

    def view(self) -> dict[str, object]:
        return {
            "runs": self.runs,
            "seconds": round(self.seconds, 3),
            "tokens": self.tokens,
            "cost": round(self.cost, 6),
        }


@dataclass
class Meter:
    """Spend per fault and arm as trials run. `clock` (seconds) times each arm's runs."""

    clock: Callable[[], float] | None = None
    faults: dict[str, dict[str, ArmSpend]] = field(default_factory=dict)
    # What earlier shards of the assay spent (a worker's shard counts against the whole budget).
    used: ArmSpend = field(default_factory=ArmSpend)
    _last: float = 0.0
    # Every fault's arms summed as they are added: a budget is read after every trial, so the
    # total is kept running (O(1) a run) rather than summed again over every fault and arm.
    _total: ArmSpend = field(default_factory=ArmSpend)

    def mark(self) -> None:
        """Start timing the next run."""
        if self.clock is not None:
            self._last = self.clock()

    def add(self, fault: str, arm: str, runs: int, usage: tuple[int, float]) -> None:
        """`runs` agent runs of `arm` ended now (and reported `usage`)."""
        spent = self.faults.setdefault(fault, {}).setdefault(arm, ArmSpend())
        total = self._total
        spent.runs += runs
        spent.tokens += usage[0]
        spent.cost += usage[1]
        total.runs += runs
        total.tokens += usage[0]
        total.cost += usage[1]
        if self.clock is not None:
            now = self.clock()
            spent.seconds += now - self._last
            total.seconds += now - self._last
            self._last = now

    def absorb(self, other: Meter) -> None:
        """Add what another meter counted (a slot's trial, timed on its own)."""
        for fault, arms in other.faults.items():
            mine = self.faults.setdefault(fault, {})
            for arm, spent in arms.items():
                mine.setdefault(arm, ArmSpend()).add(spent)
                self._total.add(spent)

    def total(self) -> ArmSpend:
        """What every fault's arms spent (this meter's own runs, not `used`)."""
        out = ArmSpend()
        out.add(self._total)
        return out

    def exceeded(self, stop: StopConditions) -> str | None:
        """The first budget the spend is over, as a `budget: ...` stop reason, or None."""
        t = self.total()
        t.add(self.used)
        for limit, used, what in (
            (stop.max_runs, t.runs, "agent runs"),
            (stop.max_seconds, t.seconds, "seconds"),
            (stop.max_tokens, t.tokens, "tokens"),
            (stop.max_cost, t.cost, "cost"),
        ):
            if limit is not None and used > limit:
                return f"{BUDGET}: {what} {used:g} over the budget of {limit:g}"
        return None

    def view(self, rule: str) -> dict[str, object]:
        """The report's `spend`: the rule, each arm's total, and each fault's arms."""
        arms: dict[str, ArmSpend] = {}
        for by_arm in self.faults.values():
            for arm, spent in by_arm.items():
                arms.setdefault(arm, ArmSpend()).add(spent)
        return {
            "rule": rule,
            "total": self.total().view(),
            "arms": {arm: s.view() for arm, s in sorted(arms.items())},
            "faults": {
                fault: {arm: s.view() for arm, s in sorted(by_arm.items())}
                for fault, by_arm in self.faults.items()
            },
        }


def from_views(views: Iterable[Mapping[str, object] | None]) -> Meter:
    """Shards' stored spend (`Meter.view(...)["faults"]`) summed into one meter."""
    meter = Meter()
    for view in views:
        if not view:
            continue
        for fault, arms in view.items():
            if not isinstance(arms, Mapping):
                continue
            for arm, s in arms.items():
                if not isinstance(s, Mapping):
                    continue
                spent = meter.faults.setdefault(fault, {}).setdefault(arm, ArmSpend())
                view_spend = ArmSpend(
                    _int(s.get("runs")),
                    _float(s.get("seconds")),
                    _int(s.get("tokens")),
                    _float(s.get("cost")),
                )
                spent.add(view_spend)
                meter._total.add(view_spend)
    return meter


def _int(x: object) -> int:
    return int(x) if isinstance(x, (int, float)) else 0


def _float(x: object) -> float:
    return float(x) if isinstance(x, (int, float)) else 0.0
