"""Tallies: what one fault's trials contribute, as named, mergeable counts.

Merging is addition (and max/min for the storm's peaks and shortest wait), so any split into
shards merges to the figures of one sequential run. `to_dict` is the stored shape of a shard's
result: an arm is a list `[n, one count per oracle flag, violations, effects]`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from service.core.trial.oracle import FLAG_INDEX, FLAGS, VIOLATIONS, Flag, Outcome
from service.core.trial.record import Builds, StormObservation, TrialRecord

# The arms every fault keeps. Counterfactual pairs for single controls add arms named
# "counterfactual:<control>" on demand.
ARMS: Final = ("intervention", "baseline", "unfired", "counterfactual")
SAMPLES: Final = 3
_NFLAGS: Final = len(FLAGS)
_V1: Final = VIOLATIONS[0]
_V2: Final = VIOLATIONS[1]
_V3: Final = VIOLATIONS[2]


def violating(flags: tuple[bool, ...]) -> bool:
    """Any hard invariant broken. Three indexed reads: this runs for every arm of every trial."""
    return flags[_V1] or flags[_V2] or flags[_V3]


class ArmCounts:
    """One arm's counts: trials, trials per oracle flag, violating trials, effects."""

    __slots__ = ("effects", "flags", "n", "violations")

    def __init__(self) -> None:
        self.n = 0
        self.flags = [0] * _NFLAGS
        self.violations = 0
        self.effects = 0

    def count(self, flag: Flag | str) -> int:
        return self.flags[FLAG_INDEX[flag]]

    def add(self, outcome: Outcome) -> None:
        self.n += 1
        counts = self.flags
        flags = outcome.flags
        for i in range(_NFLAGS):
            if flags[i]:
                counts[i] += 1
        if flags[_V1] or flags[_V2] or flags[_V3]:
            self.violations += 1
        self.effects += outcome.effects

    def merge(self, other: ArmCounts) -> None:
        self.n += other.n
        counts, theirs = self.flags, other.flags
        for i in range(_NFLAGS):
            counts[i] += theirs[i]
        self.violations += other.violations
        self.effects += other.effects

    def hard_counts(self) -> dict[str, int]:
        """Per flag, and `n`: what the gate reads of an arm."""
        out = dict(zip(FLAGS, self.flags, strict=True))
        out["n"] = self.n
        return out

    def to_list(self) -> list[int]:
        return [self.n, *self.flags, self.violations, self.effects]

    @classmethod
    def from_list(cls, values: list[int]) -> ArmCounts:
        counts = [int(x) for x in values]
        if len(counts) == _NFLAGS + 2:
            # Stored before `claim_violation` existed: it never fired there.
            counts.insert(1 + FLAG_INDEX[Flag.CLAIM_VIOLATION], 0)
        arm = cls()
        arm.n = counts[0]
        arm.flags = counts[1 : 1 + _NFLAGS]
        arm.violations = counts[1 + _NFLAGS]
        arm.effects = counts[2 + _NFLAGS]
        return arm


class StormTally:
    """A storm fault's observations, summed (and peaks maxed) over its trials."""

    __slots__ = (
        "admitted",
        "attempts",
        "bare_done",
        "bare_peak",
        "disciplined_done",
        "disciplined_peak",
        "max_attempts",
        "min_wait_ms",
        "trials",
    )

    def __init__(self) -> None:
        self.trials = 0
        self.attempts = 0
        self.admitted = 0
        self.bare_done = 0
        self.disciplined_done = 0
        self.max_attempts = 0
        self.bare_peak = 0
        self.disciplined_peak = 0
        self.min_wait_ms: int | None = None

    def add(self, seen: StormObservation) -> None:
        self.trials += 1
        self.attempts += seen.attempts
        self.admitted += int(seen.admitted is not None)
        self.bare_done += seen.bare_done
        self.disciplined_done += seen.disciplined_done
        self.max_attempts = max(self.max_attempts, seen.attempts)
        self.bare_peak = max(self.bare_peak, seen.bare_peak)
        self.disciplined_peak = max(self.disciplined_peak, seen.disciplined_peak)
        self._shortest(seen.min_wait_ms)

    def merge(self, other: StormTally) -> None:
        self.trials += other.trials
        self.attempts += other.attempts
        self.admitted += other.admitted
        self.bare_done += other.bare_done
        self.disciplined_done += other.disciplined_done
        self.max_attempts = max(self.max_attempts, other.max_attempts)
        self.bare_peak = max(self.bare_peak, other.bare_peak)
        self.disciplined_peak = max(self.disciplined_peak, other.disciplined_peak)
        self._shortest(other.min_wait_ms)

    def _shortest(self, wait: int | None) -> None:
        if wait is not None and (self.min_wait_ms is None or wait < self.min_wait_ms):
            self.min_wait_ms = wait

    def to_dict(self) -> dict[str, int]:
        if not self.trials:
            return {}
        out = {
            "admitted": self.admitted,
            "attempts": self.attempts,
            "bare_done": self.bare_done,
            "bare_peak": self.bare_peak,
            "disciplined_done": self.disciplined_done,
            "disciplined_peak": self.disciplined_peak,
            "max_attempts": self.max_attempts,
        }
        if self.min_wait_ms is not None:
            out["min_wait_ms"] = self.min_wait_ms
        out["trials"] = self.trials
        return out

    @classmethod
    def from_dict(cls, d: dict[str, int]) -> StormTally:
        s = cls()
        s.trials = int(d.get("trials", 0))
        s.attempts = int(d.get("attempts", 0))
        s.admitted = int(d.get("admitted", 0))
        s.bare_done = int(d.get("bare_done", 0))
        s.disciplined_done = int(d.get("disciplined_done", 0))
        s.max_attempts = int(d.get("max_attempts", 0))
        s.bare_peak = int(d.get("bare_peak", 0))
        s.disciplined_peak = int(d.get("disciplined_peak", 0))
        wait = d.get("min_wait_ms")
        s.min_wait_ms = None if wait is None else int(wait)
        return s


def _add(into: dict[str, int], key: str, n: int) -> None:
    into[key] = into.get(key, 0) + n


# Distinct messages kept per error kind, and the length each is cut to.
CAUSES: Final = 3
CAUSE_CHARS: Final = 300


def add_cause(into: dict[str, list[str]], kind: str, message: str) -> None:
    kept = into.get(kind)
    if kept is None:
        kept = into[kind] = []
    message = message[:CAUSE_CHARS]
    if len(kept) < CAUSES and message not in kept:
        kept.append(message)


class Tally:
    """Everything one fault's trials contribute, as mergeable counts."""

    __slots__ = (
        "arms",
        "baseline_errors",
        "baseline_reach",
        "baseline_reached",
        "builds",
        "counterfactual_errors",
        "counterfactual_runs",
        "counterfactual_unfired",
        "error_causes",
        "error_kinds",
        "exercised",
        "first_violation",
        "injector_refusals",
        "invariants",
        "not_exercised",
        "planned",
        "samples",
        "sandbox_refusals",
        "storm",
        "target_errors",
    )

    def __init__(self) -> None:
        self.planned = 0
        self.exercised = 0
        self.not_exercised = 0
        self.target_errors = 0
        self.baseline_errors = 0
        # Engine targets: matched baselines that said whether they reached the fault's trigger,
        # and how many did. None reached in any of them: the workload cannot reach the fault.
        self.baseline_reach = 0
        self.baseline_reached = 0
        # Counterfactual runs: attempted, failed by the target, and where the fault never fired.
        self.counterfactual_runs = 0
        self.counterfactual_errors = 0
        self.counterfactual_unfired = 0
        # Target-error causes by kind (the adapter's error type), across every arm.
        self.error_kinds: dict[str, int] = {}
        # The first few distinct messages of each kind: a count alone ("TargetFailed 4") hides
        # the cause a team needs to fix its agent.
        self.error_causes: dict[str, list[str]] = {}
        self.arms: dict[str, ArmCounts] = {a: ArmCounts() for a in ARMS}
        self.storm = StormTally()
        self.first_violation: dict[str, Any] | None = None
        self.samples: list[dict[str, Any]] = []
        # Effects the sandbox refused (outside the credential's subject namespace) and
        # injections the injector refused (outside the credential's scope or window).
        self.sandbox_refusals = 0
        self.injector_refusals = 0
        # Engine targets: failed invariants, counted per "<arm>:<invariant>".
        self.invariants: dict[str, int] = {}
        # Remote targets: runs (of every arm) in which an endpoint reported a build, per
        # (endpoint, build or None).
        self.builds: dict[tuple[str, str | None], int] = {}

    @property
    def all_errors(self) -> int:
        """Target errors in every run: the fault's trials, its baselines and its pairs."""
        return self.target_errors + self.baseline_errors + self.counterfactual_errors

    def arm(self, name: str) -> ArmCounts:
        counts = self.arms.get(name)
        if counts is None:
            counts = self.arms[name] = ArmCounts()
        return counts

    def add_outcome(self, arm: str, rec: TrialRecord) -> None:
        self.arm(arm).add(rec.outcome)
        for name in rec.invariants:
            _add(self.invariants, f"{arm}:{name}", 1)

    def saw(self, builds: Builds) -> None:
        """What answered one run; called only for a run whose record carries builds."""
        counts = self.builds
        for seen in builds:
            counts[seen] = counts.get(seen, 0) + 1

    def add_flags(self, arm: str, outcome: Outcome) -> None:
        self.arm(arm).add(outcome)

    def error(self, message: str) -> None:
        kind = message.split(":", 1)[0]
        _add(self.error_kinds, kind, 1)
        add_cause(self.error_causes, kind, message)

    def merge(self, other: Tally) -> None:
        self.planned += other.planned
        self.exercised += other.exercised
        self.not_exercised += other.not_exercised
        self.target_errors += other.target_errors
        self.baseline_errors += other.baseline_errors
        self.baseline_reach += other.baseline_reach
        self.baseline_reached += other.baseline_reached
        self.counterfactual_runs += other.counterfactual_runs
        self.counterfactual_errors += other.counterfactual_errors
        self.counterfactual_unfired += other.counterfactual_unfired
        self.sandbox_refusals += other.sandbox_refusals
        self.injector_refusals += other.injector_refusals
        for kind, n in other.error_kinds.items():
            _add(self.error_kinds, kind, n)
        for kind, messages in other.error_causes.items():
            for message in messages:
                add_cause(self.error_causes, kind, message)
        for key, n in other.invariants.items():
            _add(self.invariants, key, n)
        for seen, n in other.builds.items():
            self.builds[seen] = self.builds.get(seen, 0) + n
        for a, theirs in other.arms.items():
            self.arm(a).merge(theirs)
        self.storm.merge(other.storm)
        fv = [x for x in (self.first_violation, other.first_violation) if x is not None]
        self.first_violation = min(fv, key=_trial) if fv else None
        self.samples = sorted(self.samples + other.samples, key=_trial)[:SAMPLES]

    def to_dict(self) -> dict[str, Any]:
        return {
            "planned": self.planned,
            "exercised": self.exercised,
            "not_exercised": self.not_exercised,
            "target_errors": self.target_errors,
            "baseline_errors": self.baseline_errors,
            "counterfactual_runs": self.counterfactual_runs,
            "counterfactual_errors": self.counterfactual_errors,
            "counterfactual_unfired": self.counterfactual_unfired,
            "error_kinds": dict(sorted(self.error_kinds.items())),
            "arms": {a: v.to_list() for a, v in sorted(self.arms.items())},
            "storm": self.storm.to_dict(),
            "first_violation": self.first_violation,
            "samples": list(self.samples),
            "sandbox_refusals": self.sandbox_refusals,
            "injector_refusals": self.injector_refusals,
            **({"invariants": dict(sorted(self.invariants.items()))} if self.invariants else {}),
            **(
                {"baseline_reach": [self.baseline_reached, self.baseline_reach]}
                if self.baseline_reach
                else {}
            ),
            **(
                {"error_causes": {k: list(v) for k, v in sorted(self.error_causes.items())}}
                if self.error_causes
                else {}
            ),
            # [[endpoint, build or null, runs], ...]: written only when an endpoint reported.
            **({"builds": builds_list(self.builds)} if self.builds else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tally:
        t = cls()
        t.planned, t.exercised = int(d["planned"]), int(d["exercised"])
        t.not_exercised, t.target_errors = int(d["not_exercised"]), int(d["target_errors"])
        t.baseline_errors = int(d.get("baseline_errors", 0))
        reach = d.get("baseline_reach")
        if isinstance(reach, list) and len(reach) == 2:
            t.baseline_reached, t.baseline_reach = int(reach[0]), int(reach[1])
        t.counterfactual_runs = int(d.get("counterfactual_runs", 0))
        t.counterfactual_errors = int(d.get("counterfactual_errors", 0))
        t.counterfactual_unfired = int(d.get("counterfactual_unfired", 0))
        t.error_kinds = {str(k): int(v) for k, v in d.get("error_kinds", {}).items()}
        causes = d.get("error_causes", {})
        t.error_causes = {
            str(k): [str(m) for m in v][:CAUSES]
            for k, v in (causes.items() if isinstance(causes, dict) else ())
            if isinstance(v, list)
        }
        for a, v in d["arms"].items():
            t.arms[a] = ArmCounts.from_list(v)
        storm = d.get("storm", {})
        t.storm = StormTally.from_dict(storm if isinstance(storm, dict) else {})
        t.first_violation = d.get("first_violation")
        t.samples = list(d.get("samples", []))
        t.sandbox_refusals = int(d.get("sandbox_refusals", 0))
        t.injector_refusals = int(d.get("injector_refusals", 0))
        t.invariants = {str(k): int(v) for k, v in d.get("invariants", {}).items()}
        # A shard stored before builds were recorded has none.
        for row in d.get("builds") or ():
            endpoint, build, n = row
            t.builds[(str(endpoint), None if build is None else str(build))] = int(n)
        return t


def builds_list(builds: dict[tuple[str, str | None], int]) -> list[list[Any]]:
    """Builds counts as JSON rows, in one order: endpoint, then build (nothing first)."""
    rows = sorted(builds.items(), key=lambda kv: (kv[0][0], kv[0][1] is not None, kv[0][1] or ""))
    return [[endpoint, build, n] for (endpoint, build), n in rows]


def _trial(sample: dict[str, Any]) -> int:
    return int(sample["trial"])


@dataclass
class ShardResult:
    index: int
    tallies: dict[str, Tally]
    trials: int
    stopped: bool = False
    # Why the shard stopped early: an abort, or a stop condition that tripped.
    stop_reason: str | None = None
    effects: int = 0
    unsafe: int = 0
    # What the shard's runs spent, per fault and arm (service/core/evidence/spend.py `Meter.view`).
    spend: dict[str, Any] | None = None
    # The sandbox layers in force around the tenant code the shard ran (a tenant worker's
    # posture, service/sandbox/layers.py); None when it ran none.
    sandbox: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "index": self.index,
            "trials": self.trials,
            "stopped": self.stopped,
            "stop_reason": self.stop_reason,
            "effects": self.effects,
            "unsafe": self.unsafe,
            "tallies": {k: v.to_dict() for k, v in sorted(self.tallies.items())},
        }
        if self.spend is not None:
            out["spend"] = self.spend
        if self.sandbox is not None:
            out["sandbox"] = self.sandbox
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShardResult:
        return cls(
            int(d["index"]),
            {k: Tally.from_dict(v) for k, v in d["tallies"].items()},
            int(d["trials"]),
            bool(d.get("stopped", False)),
            d.get("stop_reason"),
            int(d.get("effects", 0)),
            int(d.get("unsafe", 0)),
            d.get("spend"),
            d.get("sandbox"),
        )


def layers(results: Iterable[ShardResult]) -> tuple[dict[str, Any], ...]:
    """The distinct sandbox postures the shards ran tenant code under (one, unless the assay's
    shards ran on workers that differ), in a stable order."""
    seen: dict[str, dict[str, Any]] = {}
    for r in results:
        if r.sandbox is not None:
            seen.setdefault(json.dumps(r.sandbox, sort_keys=True), r.sandbox)
    return tuple(seen[k] for k in sorted(seen))
