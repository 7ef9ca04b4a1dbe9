"""What a careful agent pays, known before anything runs: per fault, the trial at which the
sequential rule allows a clean record, and the team's agent runs under the plan and the fixed one.

Nothing here restates the statistical rule. The sequential plan's course is the rule itself
(`stopping.rule_for`, built as the assay builds it, read through `Rule.step` and `needs_pairs`
after each trial) fed a careful agent's record: the fault fires in every trial, no run violates,
every floor is met in every run, and each counterfactual pair shows its predicted violation. The
fixed plan's allow is the gate's own reading of the tolerance (`promise.tolerance_of`) and of the
lower-bound floors (`promise.clean_runs_to_clear`). Change the rule and the forecast follows.

The team's runs are counted as spend counts them (service/core/evidence/spend.py): the fault's
trials, its matched baseline and its counterfactual pairs; never the sensitivity pair's naive
agent, which is the gate's own. The matched baseline is counted in one place (`baseline_runs`
per fault, `baseline_total` over the plan): a baseline shared by the faults on one tool is
counted there.

Pure: a manifest and a plan in, numbers out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from service.core.evidence.pairs import removal
from service.core.evidence.promise import NEVER, clean_runs_to_clear, tolerance_of
from service.core.evidence.stopping import Rule, rule_for
from service.core.evidence.tally import Tally
from service.core.faults.catalogue import baseline_group
from service.core.faults.plan import AssayPlan
from service.core.system.manifest import Envelope, Manifest
from service.core.trial.oracle import FLAGS, Flag, Outcome

# A careful run: detected, contained, recovered, proved and served; no hard invariant broken.
_CAREFUL = frozenset(
    {Flag.DETECTED, Flag.CONTAINED, Flag.RECOVERED, Flag.VERIFIED, Flag.USEFUL_SERVICE}
)


def _outcome(flags: Iterable[str]) -> Outcome:
    on = {str(f) for f in flags}
    return Outcome(tuple(f in on for f in FLAGS), 0, "forecast")


@dataclass(frozen=True)
class Course:
    """A careful agent's course through one fault under the sequential rule."""

    trials: int  # the fault's trials when the rule stops
    stop: str  # "decided": the rule allows there; "max_runs": it ran to the cap
    baseline_trials: int  # trials whose matched baseline ran
    pair_trials: int  # trials whose counterfactual pairs ran


def careful_course(rule: Rule, pairs: bool = True, sample: float = 1.0) -> Course:
    """The sequential rule read after each trial of a careful agent, as the assay reads it
    (`service.core.shards.assay`): whether the next trial runs its pairs is asked before it runs.
    `pairs`: the fault has counterfactual pairs to run; `sample`: the share of trials in the
    plan's evidence sample (their baseline and pairs run)."""
    tally = Tally()
    clean = _outcome(_CAREFUL)
    shows = _outcome(_CAREFUL if rule.predicted is None else {rule.predicted})
    baseline = paired = 0
    for n in range(1, rule.max_runs + 1):
        extra = int(n * sample) > int((n - 1) * sample)
        run_pairs = pairs and extra and rule.needs_pairs(tally)
        tally.add_flags("intervention", clean)
        if extra and rule.baseline_runs is not None:
            tally.add_flags("baseline", clean)
            baseline += 1
        if run_pairs:
            tally.add_flags("counterfactual", shows)
            paired += 1
        stop = rule.step(tally, n)
        if stop is not None:
            return Course(n, stop.code, baseline, paired)
    return Course(rule.max_runs, "max_runs", baseline, paired)


@dataclass(frozen=True)
class FaultForecast:
    """One fault's forecast for a careful agent."""

    fault: str
    rule: str  # the plan's rule for this target: "sequential" | "fixed"
    cap: int  # the plan's trials: the fixed plan's count, the sequential plan's cap
    p0: float  # the tolerance the fault is judged at
    p0_field: str | None  # where a declared p0 was set; None: what the cap resolves
    needs: int  # clean trials the exact bound needs to meet p0 (NEVER: no count does)
    resolves: bool  # whether the cap resolves p0 and the floors: a careful agent can be allowed
    allowed_at: int | None  # the trial a careful agent is allowed at under the plan's rule
    trials: int  # the fault's own trials under the plan's rule
    baseline: int  # its matched baseline runs
    pair_runs: int  # its counterfactual pair runs
    fixed_trials: int
    fixed_baseline: int
    fixed_pair_runs: int
    # The tool whose faults share this fault's matched baseline (`plan.baseline: shared`): its
    # runs are the tool's, paid once for every fault on it; None: the fault's own.
    shared_by: str | None = None

    @property
    def team_runs(self) -> int:
        return self.trials + self.baseline + self.pair_runs

    @property
    def fixed_team_runs(self) -> int:
        return self.fixed_trials + self.fixed_baseline + self.fixed_pair_runs

    def view(self) -> dict[str, object]:
        return {
            "fault": self.fault,
            "rule": self.rule,
            "cap": self.cap,
            "p0": self.p0,
            "p0_declared_in": self.p0_field,
            "needs": None if self.needs == NEVER else self.needs,
            "resolves": self.resolves,
            "allowed_at": self.allowed_at,
            "team_runs": {
                "trials": self.trials,
                "matched_baseline": self.baseline,
                "baseline_shared_by": self.shared_by,
                "pairs": self.pair_runs,
                "total": self.team_runs,
            },
            "fixed_team_runs": self.fixed_team_runs,
        }


def baseline_runs(plan: AssayPlan, trials: int) -> int:
    """A fault's matched baseline runs over `trials` of its trials: one per trial of the
    evidence sample, none when the plan runs no baseline."""
    if not plan.matched_baseline:
        return 0
    return int(trials * _sample(plan))


def baseline_total(forecasts: Iterable[FaultForecast], fixed: bool = False) -> int:
    """The plan's matched baseline runs. A fault's own count for each; a shared baseline once
    per tool and trial: trial k's runs while any fault on the tool runs trial k, so the tool
    pays its longest-running fault's count. `fixed`: the fixed plan with a baseline per fault,
    what the team paid before baselines were shared."""
    found = list(forecasts)
    if fixed:
        return sum(f.fixed_baseline for f in found)
    tools: dict[str, int] = {}
    own = 0
    for f in found:
        if f.shared_by is None:
            own += f.baseline
        else:
            tools[f.shared_by] = max(tools.get(f.shared_by, 0), f.baseline)
    return own + sum(tools.values())


def team_total(forecasts: Iterable[FaultForecast], fixed: bool = False) -> int:
    """The team's agent runs over the plan: trials, matched baselines and pairs."""
    found = list(forecasts)
    own = sum(
        f.fixed_trials + f.fixed_pair_runs if fixed else f.trials + f.pair_runs for f in found
    )
    return own + baseline_total(found, fixed)


def _sample(plan: AssayPlan) -> float:
    sample = plan.evidence_sample
    if plan.sample_threshold() is None or sample is None:
        return 1.0
    return sample / plan.trials


def resolves(plan: AssayPlan, envelope: Envelope, cap: int) -> bool:
    """Whether `cap` clean trials of a careful agent can be allowed: they resolve the tolerance
    and clear every floor the gate reads on the lower bound."""
    if tolerance_of(plan, envelope, cap).need > cap:
        return False
    if envelope.floor_on != "lower_bound":
        return True
    return all(clean_runs_to_clear(envelope.floors.value(k)) <= cap for k in envelope.floored())


def forecast(manifest: Manifest, plan: AssayPlan) -> list[FaultForecast]:
    """Each fault's forecast for a careful agent under `plan` (not paper mode: its trials mix
    faults by the script's generator)."""
    envelope = plan.envelope_for(manifest)
    rule_name = plan.rule_for(manifest.target.kind)
    cap = plan.trials
    tol = tolerance_of(plan, envelope, cap)
    ok = resolves(plan, envelope, cap)
    sample = _sample(plan)
    out: list[FaultForecast] = []
    for spec in plan.faults():
        arms = len(removal(manifest, spec).pairs()) if plan.counterfactuals else 0
        fixed_sampled = int(cap * sample)
        fixed = (cap, baseline_runs(plan, cap), arms * fixed_sampled)
        if rule_name == "sequential":
            course = careful_course(rule_for(manifest, plan, spec), arms > 0, sample)
            trials, base, pair_runs = course.trials, course.baseline_trials, course.pair_trials
            pair_runs *= arms
            allowed = course.trials if course.stop == "decided" else (cap if ok else None)
        else:
            trials, base, pair_runs = fixed
            allowed = cap if ok else None
        out.append(
            FaultForecast(
                fault=spec.id,
                rule=rule_name,
                cap=cap,
                p0=tol.rate,
                p0_field=tol.field if tol.declared else None,
                needs=tol.need,
                resolves=ok,
                allowed_at=allowed,
                trials=trials,
                baseline=base,
                pair_runs=pair_runs,
                fixed_trials=fixed[0],
                fixed_baseline=fixed[1],
                fixed_pair_runs=fixed[2],
                shared_by=baseline_group(spec) if plan.baseline == "shared" else None,
            )
        )
    return out


@dataclass(frozen=True)
class RunEstimate:
    """Agent runs per fault of a careful agent (no violation, every floor met in every run)."""

    trials: int  # the fault's own trials (the intervention arm)
    pair_runs: int  # each counterfactual arm's runs
    baseline_runs: int = 0  # the matched baseline's: as many as the fault's trials


def estimate(envelope: Envelope, error: float, trials: int, rate: float | None) -> RunEstimate:
    """A generic fault's careful course (`careful_course`): a rule with a matched baseline and a
    counterfactual pair predicting a duplicate effect, under `envelope` at `error`, capped at
    `trials`, judged at the declared `rate` (None: what the cap resolves)."""
    rule = Rule(envelope, error, trials, rate, str(Flag.DUPLICATE_EFFECT), baseline_runs=trials)
    course = careful_course(rule)
    return RunEstimate(course.trials, course.pair_trials, course.baseline_trials)
