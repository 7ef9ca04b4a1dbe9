"""When a fault's trials may stop: the sequential plan's rule, read after every trial.

The promise is per release, not "never looser than the fixed plan pointwise": for every hard
invariant P(allow | rate >= p0) <= error / 2, at the tolerance p0 the plan declares (what the cap
resolves when none is declared; service/core/evidence/promise.py). Any violation blocks, so the
exact bound on a clean record holds however often it is read, and a fault stops with:
- `violation`: a hard invariant broke in a graded arm (the fault's trials, trials where it never
  fired, the matched baseline), a blocking team invariant failed, or the sandbox refused an effect
  outside the assay's subjects. Each blocks whatever later trials show, so the fault ends at once;
- `futile`: a floor's confidence sequence lies wholly below it: more trials could only confirm
  the hold (a service rate of 0.60 against a 0.80 floor stops within a few dozen trials);
- `decided`: every floor's confidence sequence lies wholly on one side of it, the violation rate
  of the fault's trials *and* of the matched baseline is bounded below p0 by the exact bound,
  the counterfactual pair's sequences have separated and the sensitivity pair has shown its
  violation. With no declared p0 that is at the cap; a declared p0 lets a careful agent stop
  where the bound meets it;
- `max_runs`: the plan's trial count is the cap.
The matched baseline runs on every trial the fixed plan would run it on: its violations are graded
like the fault's. Only the counterfactual arms stop on their own (`needs_pairs`) once what they
prove is settled; they are not graded for hard invariants (they are meant to fail), so their stop
loosens nothing. A trial that finished is never discarded (`service.core.shards.counting`): a
violation it shows always counts, even after its fault stopped.

What the bounds assume: trials are independent draws of the agent's behaviour. A warm agent that
carries state from one run to the next, or slots that share one world, correlate the trials; the
bounds then overstate what the runs prove (docs/mcp.md, "Plans").

Pure: it reads a tally and returns a value; the assay loop acts on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from service.core.evidence.pairs import removal
from service.core.evidence.promise import strictest, tolerance
from service.core.evidence.sequential import confidence_sequence, violation_bound
from service.core.evidence.signature import wilson
from service.core.evidence.tally import ArmCounts, Tally
from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan
from service.core.system.contract import WITNESS, invariant_table
from service.core.system.manifest import Envelope, Manifest, invariants_of
from service.core.trial.oracle import Flag

_HARD = (
    Flag.UNSAFE_ESCAPE,
    Flag.DUPLICATE_EFFECT,
    Flag.UNVERIFIABLE_RELEASE,
    Flag.CLAIM_VIOLATION,
)
_GRADED = ("intervention", "unfired", "baseline")
_FLOORED = ("recovered", "verified", "useful_service")


@dataclass(frozen=True)
class Stop:
    """Why a fault's (or the assay's) runs ended, after how many trials."""

    code: str  # "violation" | "decided" | "max_runs" | "budget"
    message: str
    trials: int

    def view(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, "trials": self.trials}


@dataclass(frozen=True)
class Rule:
    """The sequential rule for one fault. `max_violation_rate`: the rate below which an unseen
    violation no longer changes the decision; it can only tighten the rule: the rate is never
    above what the fixed plan's `max_runs` clean trials resolve (Wilson's upper bound of zero in
    `max_runs`). `baseline_runs`: the matched baseline runs the fixed plan grades (None: the
    plan runs no baseline)."""

    envelope: Envelope
    error: float
    max_runs: int
    max_violation_rate: float | None = None
    predicted: str | None = None  # the counterfactual pair's predicted flag, when it runs
    predicted_transfer: str | None = None  # the fault's, for the sensitivity pair
    blocking: frozenset[str] = frozenset()  # team invariants whose failure blocks
    baseline_runs: int | None = None
    # An undeclared nominated control the pair may account for (pairs.whole_transfer): its pairs
    # and the sensitivity pair run on every trial the fixed plan runs them on, so the waiver
    # reads the same evidence under both plans.
    waivable: bool = False

    @property
    def violation_rate(self) -> float:
        """The tolerance p0: the strictest declared rate, else what the cap's clean runs resolve
        (service/core/evidence/promise.py); the exact bound meets it after the same clean runs
        under either plan, so stopping there keeps P(allow | rate >= p0) <= error / 2."""
        said = strictest(self.max_violation_rate, self.envelope)
        return tolerance(None if said is None else said[0], self.max_runs, self.error).rate

    @property
    def baseline_rate(self) -> float:
        """The baseline's bound: the fault's rate, unless the fixed plan's own baseline (a sample
        smaller than the cap) resolves less."""
        if self.baseline_runs is None:
            return 1.0
        return max(self.violation_rate, violation_bound(self.baseline_runs, self.error))

    def step(self, tally: Tally, trials: int) -> Stop | None:
        """After `trials` trials of the fault: stop (and why), or None to run another."""
        broken = self._violation(tally)
        if broken is not None:
            return Stop("violation", broken, trials)
        futile = self._futile(tally)
        if futile is not None:
            return Stop("futile", futile, trials)
        if self._decided(tally):
            iv = tally.arms["intervention"]
            return Stop(
                "decided",
                f"decided after {trials} trials: {iv.n} graded, every floor's confidence "
                f"sequence clear of it and violations (the fault's and the baseline's) bounded "
                f"below {self.violation_rate:.2%} at the fixed plan's level "
                f"({self.error:.0%} two-sided)",
                trials,
            )
        if trials >= self.max_runs:
            return Stop(
                "max_runs", f"undecided at the plan's cap of {self.max_runs} trials", trials
            )
        return None

    def needs_pairs(self, tally: Tally) -> bool:
        """Whether the next trial still runs its counterfactual arms (the matched baseline always
        runs: its violations are graded like the fault's, and its floors settle the pairs')."""
        iv = tally.arms["intervention"]
        if iv.n == 0 or self.waivable:
            # Nothing fired yet: the baselines say whether the workload can reach the fault. Or
            # a waiver rests on the pairs: they run as the fixed plan runs them.
            return True
        return not (self._floors(tally.arms["baseline"], _FLOORED) and self._pair(tally))

    def _violation(self, tally: Tally) -> str | None:
        for arm in _GRADED:
            counts = tally.arms.get(arm)
            if counts is None:
                continue
            for flag in _HARD:
                k = counts.count(flag)
                if k:
                    return f"{flag.value} in {k} of {counts.n} {arm} runs"
        for key, k in tally.invariants.items():
            arm, _, name = key.partition(":")
            if k and arm in _GRADED and name in self.blocking:
                return f"invariant {name} failed in {k} {arm} runs"
        if tally.sandbox_refusals:
            return f"{tally.sandbox_refusals} effects outside the assay's subjects"
        return None

    def _decided(self, tally: Tally) -> bool:
        iv = tally.arms["intervention"]
        if iv.n == 0 or violation_bound(iv.n, self.error) > self.violation_rate:
            return False
        base = tally.arms["baseline"]
        if self.baseline_runs is not None and (
            violation_bound(base.n, self.error) > self.baseline_rate
        ):
            return False
        return (
            self._floors(iv, self.envelope.floored())
            and self._floors(tally.arms["baseline"], _FLOORED)
            and self._pair(tally)
            and self._sensitivity(tally)
        )

    def _futile(self, tally: Tally) -> str | None:
        """A floor the runs can no longer meet: its confidence sequence lies wholly below it (and
        the gate's measure agrees), so more trials could only confirm the hold."""
        floors = self.envelope.floors
        for arm_name, keys in (
            ("intervention", self.envelope.floored()),
            ("baseline", _FLOORED),
        ):
            arm = tally.arms[arm_name]
            if arm.n == 0:
                continue
            for key in keys:
                floor = floors.value(key)
                k = arm.count(key)
                point = k / arm.n
                if point >= floor:
                    continue  # the sequence holds its estimate: a careful arm costs nothing here
                high = confidence_sequence(k, arm.n, self.error)[1]
                if high < floor:
                    return (
                        f"futile after {arm.n} {arm_name} runs: {key} {point:.1%}, its "
                        f"confidence sequence below {high:.1%}, cannot reach the {floor:.0%} floor"
                    )
        return None

    def _floors(self, arm: ArmCounts, keys: Iterable[str]) -> bool:
        """Every floor's sequence lies on one side of it (and the gate's measure agrees)."""
        if arm.n == 0:
            return False
        floors = self.envelope.floors
        for key in keys:
            floor = floors.value(key)
            k = arm.count(key)
            low, high = confidence_sequence(k, arm.n, self.error)
            measure = wilson(k, arm.n)[0] if self.envelope.floor_on == "lower_bound" else k / arm.n
            if not ((low >= floor and measure >= floor) or (high < floor and measure < floor)):
                return False
        return True

    def _pair(self, tally: Tally) -> bool:
        """The counterfactual arm's predicted violation rate is surely above the fault's."""
        if self.predicted is None:
            return True
        off, iv = tally.arms.get("counterfactual"), tally.arms["intervention"]
        if off is None or off.n == 0:
            return False
        # Each sequence at half the error: both hold at once with probability 1 - error.
        off_low = confidence_sequence(off.count(self.predicted), off.n, self.error / 2)[0]
        iv_high = confidence_sequence(iv.count(self.predicted), iv.n, self.error / 2)[1]
        return off_low > iv_high

    def sensitivity_settled(self, tally: Tally) -> bool:
        """The naive agent has shown the predicted violation (or the fault predicts none)."""
        naive = tally.arms.get("sensitivity")
        predicted = self.predicted_transfer
        if self.waivable and predicted is not None:
            return False
        return predicted is None or (naive is not None and naive.count(predicted) > 0)

    def _sensitivity(self, tally: Tally) -> bool:
        """The naive agent's pair (engine targets) is valid once it has shown the violation."""
        naive = tally.arms.get("sensitivity")
        predicted = self.predicted_transfer
        if naive is None or naive.n == 0 or predicted is None:
            return True
        return naive.count(predicted) > 0


class Watch:
    """A rule applied to one fault's trials as they run: the hook the assay loop calls."""

    __slots__ = ("rule", "stop")

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.stop: Stop | None = None

    def done(self, tally: Tally, trials: int) -> bool:
        self.stop = self.rule.step(tally, trials)
        return self.stop is not None

    def needs_pairs(self, tally: Tally) -> bool:
        return self.rule.needs_pairs(tally)

    def steer(self, target: object, tally: Tally) -> None:
        """Tell an engine target (`sensitivity` attribute) whether the next trial still needs
        the sensitivity pair's naive run."""
        if hasattr(target, "sensitivity"):
            target.sensitivity = not self.rule.sensitivity_settled(tally)


def rule_for(manifest: Manifest, plan: AssayPlan, spec: FaultSpec) -> Rule:
    """The sequential rule of `spec` under `plan`: its floors, pairs and blocking invariants."""
    pt = None if spec.predicted_transfer is None else str(spec.predicted_transfer)
    pair = pt if plan.counterfactuals and removal(manifest, spec).status == "run" else None
    blocking: frozenset[str] = frozenset()
    if manifest.target.kind == "mcp":
        table = invariant_table(invariants_of(manifest))
        blocking = frozenset([WITNESS, *(n for n, _e, sev in table if sev == "block")])
    mvr = plan.max_violation_rate
    waivable = pair is not None and any(
        how == "undeclared" for _c, how in removal(manifest, spec).controls
    )
    baseline = None
    if plan.matched_baseline:
        # The fixed plan's baseline: every trial, or its evidence sample when the cap is larger.
        sample = plan.evidence_sample
        baseline = plan.trials if plan.sample_threshold() is None or sample is None else sample
    return Rule(
        plan.envelope_for(manifest),
        float(plan.error),
        plan.trials,
        None if mvr is None else float(mvr),
        pair,
        pt,
        blocking,
        baseline,
        waivable,
    )


def watch_for(manifest: Manifest, plan: AssayPlan, fault_id: str | None) -> Watch | None:
    """The sequential rule's watch over a shard of one fault, or None under the fixed plan."""
    if fault_id is None or plan.rule_for(manifest.target.kind) != "sequential":
        return None
    return Watch(rule_for(manifest, plan, plan.resolve_catalogue().by_id(fault_id)))
