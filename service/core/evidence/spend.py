"""What an assay spends, per fault and arm: agent runs, seconds, reported tokens and cost; and the
budgets (`plan.stop.max_runs`, `max_seconds`, `max_tokens`, `max_cost`) that stop it.

Tokens and cost are what the agent reports: a claim's `usage` object (`{"tokens": .., "cost":
..}`), which the framework runners fill from the framework itself (LangGraph messages'
`usage_metadata`, the OpenAI Agents SDK's `context_wrapper.usage`). A budget protects the team's
money, not the gate's evidence: an agent that under-reports only spends more of its own.

What the team pays is kept apart from what the gate runs on its own: the team's agent runs every
arm but the sensitivity pair's naive run (`GATE_ARMS`), the gate's own agent, which costs the team
nothing. The budgets count the team's share (`Meter.team`). A stop decided in trial order may find
trials beyond it already run at concurrency: their runs are `past_stop`, paid but not evidence.

Pure: the clock is handed in (the core reads no time of its own).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from service.core.faults.plan import StopConditions

#: The reason a budget stop starts with; the gate reads it as a hold, never a block or an allow.
BUDGET = "budget"
#: The reason a stop starts with when an agent reports usage a token or cost budget cannot count.
USAGE_INVALID = "usage_invalid"
#: The reasons a budget states once the trials in flight have finished (`Meter.settled`).
KEEPS_FINISHED = (f"{BUDGET}:", f"{USAGE_INVALID}:")
#: The arms the gate's own agent runs (the sensitivity pair's naive agent): not the team's runs.
GATE_ARMS = frozenset({"sensitivity"})


def budgeted(stop: StopConditions) -> bool:
    return any(
        x is not None for x in (stop.max_runs, stop.max_seconds, stop.max_tokens, stop.max_cost)
    )


def usage_of(claims: Iterable[Mapping[str, object]]) -> tuple[int, float]:
    """Tokens and cost a run's claims report; malformed or negative figures count as none (and
    `usage_invalid` says the run reported some)."""
    tokens, cost = 0, 0.0
    for claim in claims:
        usage = claim.get("usage")
        if not isinstance(usage, Mapping):
            continue
        t, c = usage.get("tokens"), usage.get("cost")
        if isinstance(t, int) and _count(t):
            tokens += t
        if isinstance(c, (int, float)) and _count(c):
            cost += float(c)
    return tokens, cost


def usage_invalid(claims: Iterable[Mapping[str, object]]) -> bool:
    """Whether a claim reports usage that is not a count: a `usage` that is not an object, or
    `tokens` (an integer) or `cost` (a number) that is negative, not finite or not a number. A
    budget on tokens or cost cannot be kept on such figures, so they hold the gate
    (`usage_invalid`) rather than count as none in silence."""
    for claim in claims:
        usage = claim.get("usage")
        if usage is None:
            continue
        if not isinstance(usage, Mapping):
            return True
        t, c = usage.get("tokens"), usage.get("cost")
        if t is not None and not (isinstance(t, int) and _count(t)):
            return True
        if c is not None and not _count(c):
            return True
    return False


def _count(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


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
    # What earlier shards of the assay spent, the team's share (a worker's shard counts against
    # the whole budget).
    used: ArmSpend = field(default_factory=ArmSpend)
    _last: float = 0.0
    # Every fault's arms summed as they are added, and the team's arms: a budget is read after
    # every trial, so the totals are kept running (O(1) a run) rather than summed again.
    _total: ArmSpend = field(default_factory=ArmSpend)
    _team: ArmSpend = field(default_factory=ArmSpend)
    # Runs of trials discarded past a stop (all of them, and the team's): paid, not evidence.
    _past: ArmSpend = field(default_factory=ArmSpend)
    _past_team: ArmSpend = field(default_factory=ArmSpend)
    # Trials whose runs this meter holds (what a next trial is estimated from), and runs whose
    # agent reported malformed usage.
    trials: int = 0
    invalid: int = 0

    def mark(self) -> None:
        """Start timing the next run."""
        if self.clock is not None:
            self._last = self.clock()

    def add(
        self, fault: str, arm: str, runs: int, usage: tuple[int, float], invalid: bool = False
    ) -> None:
        """`runs` agent runs of `arm` ended now (and reported `usage`; `invalid`: malformed)."""
        if invalid:
            self.invalid += runs
        now = self.clock() if self.clock is not None else 0.0
        one = ArmSpend(runs, now - self._last if self.clock is not None else 0.0, *usage)
        self._last = now
        self.faults.setdefault(fault, {}).setdefault(arm, ArmSpend()).add(one)
        self._count(arm, one)

    def _count(self, arm: str, spent: ArmSpend) -> None:
        self._total.add(spent)
        if arm not in GATE_ARMS:
            self._team.add(spent)

    def absorb(self, other: Meter) -> None:
        """Add what another meter counted (a slot's trial, timed on its own)."""
        self.trials += other.trials
        self.invalid += other.invalid
        for fault, arms in other.faults.items():
            mine = self.faults.setdefault(fault, {})
            for arm, spent in arms.items():
                mine.setdefault(arm, ArmSpend()).add(spent)
                self._count(arm, spent)

    def discard(self, other: Meter) -> None:
        """What a trial past a stop spent (another meter's): paid, so reported (`past_stop`),
        but neither a fault's spend nor what a budget counts, as the trial is not evidence."""
        for arms in other.faults.values():
            for arm, spent in arms.items():
                self._past.add(spent)
                if arm not in GATE_ARMS:
                    self._past_team.add(spent)

    def total(self) -> ArmSpend:
        """What every fault's arms spent (this meter's own runs, not `used`)."""
        out = ArmSpend()
        out.add(self._total)
        return out

    def team(self) -> ArmSpend:
        """What the team's agent spent: every arm but the gate's own (`GATE_ARMS`)."""
        out = ArmSpend()
        out.add(self._team)
        return out

    def exceeded(self, stop: StopConditions) -> str | None:
        """The first budget the spend is over, as a `budget: ...` stop reason, or None."""
        return self.refuses(stop, -1)

    def refuses(self, stop: StopConditions, in_flight: int = 0) -> str | None:
        """Why a next trial may not start, as a stop reason, or None. A budget admits a trial
        only if what is left of the team's spend pays for it and for the `in_flight` trials
        that come before it, each estimated at what the trials counted cost on average; before
        any has been counted, a trial starts only alone (the caller waits while `waits` says
        so). `in_flight=-1`: only whether a budget is already over. Agent runs with malformed
        usage under a token or cost budget: `usage_invalid`."""
        if self.invalid and (stop.max_tokens is not None or stop.max_cost is not None):
            return (
                f"{USAGE_INVALID}: {self.invalid} agent runs reported usage that is not a "
                "count (negative, not finite or not a number): the token or cost budget "
                "cannot be kept"
            )
        own = self._team
        n = self.trials
        for limit, spent, mine, what in self._budgets(stop):
            if limit is None:
                continue
            if spent > limit:
                return f"{BUDGET}: {what} {_figure(what, spent)} over the budget of {limit:g}"
            if in_flight < 0 or n == 0:
                continue
            each = mine(own) / n
            if spent + each * (in_flight + 1) > limit:
                return (
                    f"{BUDGET}: {what} {_figure(what, spent)} spent of the budget of {limit:g}; "
                    f"too little left for another trial (about {_figure(what, each)} each)"
                )
        return None

    def waits(self, stop: StopConditions, in_flight: int) -> bool:
        """Whether a next trial waits before it is admitted: a budget is set and no trial has
        finished yet to estimate from, while one is running."""
        return self.trials == 0 and in_flight > 0 and budgeted(stop)

    def settled(self, stop: StopConditions, reason: str) -> str:
        """A budget stop's reason restated once the trials in flight have finished, so it states
        the spend exactly as the report's `spend.total` does (plus what earlier shards spent)."""
        if not reason.startswith(KEEPS_FINISHED):
            return reason
        return self.refuses(stop) or reason

    def _budgets(
        self, stop: StopConditions
    ) -> list[tuple[float | None, float, Callable[[ArmSpend], float], str]]:
        t = self.team()
        t.add(self.used)
        return [
            (stop.max_runs, t.runs, _runs, "agent runs"),
            (stop.max_seconds, t.seconds, _seconds, "seconds"),
            (stop.max_tokens, t.tokens, _tokens, "tokens"),
            (stop.max_cost, t.cost, _cost, "cost"),
        ]

    def view(self, rule: str) -> dict[str, object]:
        """The report's `spend`: the rule; the total, the team's share (what the budgets count)
        and the gate's own runs; each arm's total and each fault's arms; and, when a stop found
        trials beyond it already run, what they spent (`past_stop`, with the team's runs)."""
        arms: dict[str, ArmSpend] = {}
        for by_arm in self.faults.values():
            for arm, spent in by_arm.items():
                arms.setdefault(arm, ArmSpend()).add(spent)
        past = (
            {"past_stop": {**self._past.view(), "team_runs": self._past_team.runs}}
            if self._past.runs
            else {}
        )
        return {
            "rule": rule,
            "total": self.total().view(),
            "team": self.team().view(),
            "gate": {"runs": self._total.runs - self._team.runs},
            **past,
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
                meter._count(arm, view_spend)
    return meter


def _runs(s: ArmSpend) -> float:
    return s.runs


def _seconds(s: ArmSpend) -> float:
    return s.seconds


def _tokens(s: ArmSpend) -> float:
    return s.tokens


def _cost(s: ArmSpend) -> float:
    return s.cost


def _figure(what: str, x: float) -> str:
    """A spend figure as the report's `spend` rounds it (`ArmSpend.view`)."""
    if what == "seconds":
        return repr(round(x, 3))
    if what == "cost":
        return repr(round(x, 6))
    return str(round(x))


def _int(x: object) -> int:
    return int(x) if isinstance(x, (int, float)) else 0


def _float(x: object) -> float:
    return float(x) if isinstance(x, (int, float)) else 0.0
