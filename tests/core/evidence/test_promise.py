"""The promise per release: P(allow | rate >= p0) <= error / 2 under every plan, exactly.

"Never looser than the fixed plan pointwise" is retired: a declared tolerance lets a careful
agent stop where the exact bound meets it, sooner than the fixed plan's cap, and that is sound
because any violation blocks. Each scenario (one fault, error 0.05) is computed exactly with the
project's own functions rather than sampled: `Rule.step` and `Rule.needs_pairs` drive the
trials, `decide` judges where they stop, and each scenario's probability of `allow` is summed
over every path of outcomes. A hard violation blocks in every plan, so a path that shows one
never allows; what is left is the clean paths' mass, and for a floor the count that met it.

Assumption (the bounds' own): trials are independent draws. A warm agent carrying state between
runs, or slots sharing one world, breaks it (docs/mcp.md, "Plans").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import pytest

from service.core.decision.gate import Decision, FaultEvidence, decide
from service.core.decision.policy import parse_policy, tighten
from service.core.evidence.promise import (
    allow_chance,
    clean_bound,
    clean_runs_to_clear,
    raised_to_resolve,
    runs_to_resolve,
    unresolvable,
)
from service.core.evidence.stopping import Rule
from service.core.evidence.tally import Tally
from service.core.faults.plan import parse_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import Envelope, Floors
from service.core.trial.oracle import FLAG_INDEX, FLAGS, Flag
from tests.core.conftest import load_example

ERROR = 0.05
FLOORED = (Flag.CONTAINED, Flag.RECOVERED, Flag.VERIFIED, Flag.USEFUL_SERVICE)


@dataclass(frozen=True)
class Scenario:
    """Per trial: the chance of a hard violation in the fault's run and in its no-fault
    baseline, and of useful service in the fault's run (every other floor always met)."""

    violation: float = 0.0
    baseline_violation: float = 0.0
    service: float = 1.0
    envelope: Envelope = field(default_factory=Envelope)
    plan_rate: float | None = None


def _arm(tally: Tally, arm: str, n: int, served: int) -> None:
    counts = tally.arms[arm]
    counts.n = n
    counts.flags = [0] * len(FLAGS)
    for flag in FLOORED:
        counts.flags[FLAG_INDEX[flag]] = n
    counts.flags[FLAG_INDEX[Flag.USEFUL_SERVICE]] = served


def _tally(trials: int, served: int, baseline: int) -> Tally:
    """A clean path after `trials` trials: `served` of them served, `baseline` baseline runs."""
    tally = Tally()
    tally.planned = tally.exercised = trials
    _arm(tally, "intervention", trials, served)
    _arm(tally, "baseline", baseline, baseline)
    return tally


def _allowed(s: Scenario, trials: int, served: int, baseline: int, error: float) -> bool:
    t = _tally(trials, served, baseline)
    iv = t.arms["intervention"]
    evidence = FaultEvidence(
        "f",
        trials,
        trials,
        dict(zip(FLAGS, iv.flags, strict=True)),
        baseline=t.arms["baseline"].hard_counts(),
        unfired=t.arms["unfired"].hard_counts(),
    )
    return decide([evidence], s.envelope, error=error).decision is Decision.ALLOW


def _binomial(n: int, p: float) -> list[float]:
    out = [0.0] * (n + 1)
    out[0] = 1.0
    for _ in range(n):
        out = [a * (1 - p) + (out[k - 1] * p if k else 0.0) for k, a in enumerate(out)]
    return out


def p_allow_fixed(s: Scenario, cap: int) -> float:
    """Every trial runs, and its matched baseline: allow needs no violation anywhere."""
    clean = (1 - s.violation) ** cap * (1 - s.baseline_violation) ** cap
    served = _binomial(cap, s.service)
    return clean * sum(m for k, m in enumerate(served) if m and _allowed(s, cap, k, cap, ERROR))


def p_allow_sequential(s: Scenario, cap: int) -> float:
    """The rule read after every trial, exactly as the assay loop reads it: the mass of the clean
    paths on which it stops with an allow."""
    # As `rule_for` builds it for a plan whose matched baseline runs on every trial.
    rule = Rule(s.envelope, ERROR, cap, s.plan_rate, baseline_runs=cap)

    @cache
    def stops(trials: int, served: int, baseline: int) -> bool:
        return rule.step(_tally(trials, served, baseline), trials) is not None

    mass = {(0, 0): 1.0}  # (served, baseline runs) -> probability of the clean path so far
    allow = 0.0
    for trials in range(1, cap + 1):
        step: dict[tuple[int, int], float] = {}
        for (served, base), m in mass.items():
            # The matched baseline runs on every trial (needs_pairs steers only the pairs).
            assert rule.needs_pairs(_tally(trials - 1, served, base)) in (True, False)
            clean = m * (1 - s.violation) * (1 - s.baseline_violation)
            for hit, p in ((1, s.service), (0, 1 - s.service)):
                if p:
                    key = (served + hit, base + 1)
                    step[key] = step.get(key, 0.0) + clean * p
        mass = {}
        for (served, base), m in step.items():
            if stops(trials, served, base):
                allow += m * _allowed(s, trials, served, base, ERROR)
            else:
                mass[(served, base)] = m
    return allow


ALPHA = ERROR / 2
# What 200 clean trials resolve when no tolerance is declared: 1 - 0.025^(1/200), 1.83 %.
AT_CAP = clean_bound(200, ALPHA)

# (name, scenario, cap, whether the scenario's agent sits at or above its tolerance p0)
ROWS: list[tuple[str, Scenario, int, bool]] = [
    (
        "violations at 0.02 against an envelope rate of 0.02, cap 200",
        Scenario(violation=0.02, envelope=Envelope(max_violation_rate=0.02)),
        200,
        True,
    ),
    (
        "violations at 0.02 against a plan rate of 0.02, cap 1000",
        Scenario(violation=0.02, plan_rate=0.02),
        1000,
        True,
    ),
    (
        "violations at what the cap resolves, nothing declared, cap 200",
        Scenario(violation=AT_CAP),
        200,
        True,
    ),
    (
        "baseline violations at what the cap resolves, cap 200",
        Scenario(baseline_violation=AT_CAP),
        200,
        True,
    ),
    (
        "violations at 0.15 against a declared 0.15, cap 30",
        Scenario(violation=0.15, envelope=Envelope(max_violation_rate=0.15)),
        30,
        True,
    ),
    (
        "service 0.78 against the 0.80 floor on the lower bound",
        Scenario(
            service=0.78, envelope=Envelope(floors=Floors(contained=0.5), floor_on="lower_bound")
        ),
        200,
        True,
    ),
    (
        "service 0.78 against the 0.80 floor on the point estimate",
        Scenario(service=0.78, envelope=Envelope(floors=Floors(contained=0.5), floor_on="point")),
        200,
        False,
    ),
]


@pytest.mark.parametrize(("row", "scenario", "cap", "bound"), ROWS, ids=[r[0] for r in ROWS])
def test_no_plan_allows_an_agent_at_its_tolerance_more_often_than_the_stated_error(
    row: str, scenario: Scenario, cap: int, bound: bool
) -> None:
    fixed, sequential = p_allow_fixed(scenario, cap), p_allow_sequential(scenario, cap)
    print(f"{row}: fixed P(allow) {fixed:.4g}, sequential {sequential:.4g}")
    if bound:
        # Exact sums, not samples: no simulation error to allow for beyond rounding.
        assert fixed <= ALPHA + 1e-12
        assert sequential <= ALPHA + 1e-12
    else:
        # A point floor is a decision rule, not a guarantee (docs/evidence.md): it says so, and
        # this row keeps the figure the docs quote honest.
        assert 0.2 < fixed < 0.4


def test_a_declared_tolerance_is_met_with_exactly_the_stated_error_at_the_tolerance() -> None:
    # Allowed only on `need` clean runs: an agent at p0 is allowed with (1 - p0)^need, the
    # largest such chance not above 2.5 %.
    for p0 in (0.3, 0.15, 0.05, 0.02, 0.01):
        need = runs_to_resolve(p0, ALPHA)
        assert allow_chance(p0, need) <= ALPHA < allow_chance(p0, need - 1)


def test_a_rate_the_cap_cannot_resolve_holds_under_both_plans() -> None:
    # 200 clean trials bound violations only below 1.83 % (the exact bound at 2.5 %): a 1.5 %
    # rate is unresolved at this cap, whichever plan ran them (the service refuses such a plan at
    # submission; the gate still holds it).
    envelope = Envelope(max_violation_rate=0.015)
    clean = Scenario(envelope=envelope)
    assert not _allowed(clean, 200, 200, 200, ERROR)
    assert p_allow_sequential(clean, 200) == 0.0
    rule = Rule(envelope, ERROR, 200)
    stop = rule.step(_tally(200, 200, 200), 200)
    assert stop is not None and stop.code == "max_runs"


def test_a_careful_agent_is_still_allowed_by_both_plans_at_the_default_cap() -> None:
    careful = Scenario()
    assert p_allow_fixed(careful, 200) == 1.0
    assert p_allow_sequential(careful, 200) == 1.0


def test_the_baseline_arm_is_bounded_like_the_faults_own_trials() -> None:
    # The fault's trials bounded below the rate, the baseline after only 24 runs: not decided.
    # (Point floors: on the lower bound a 0.5 containment floor declares a 0.5 tolerance, which
    # 24 clean baseline runs resolve, as the gate reads it.)
    envelope = Envelope(floors=Floors(contained=0.5), floor_on="point")
    rule = Rule(envelope, ERROR, 200, baseline_runs=200)
    early = rule.step(_tally(200, 200, 24), 200)
    assert early is not None and early.code == "max_runs"
    stop = rule.step(_tally(200, 200, 200), 200)
    assert stop is not None and stop.code == "decided"


Run = Callable[[str], tuple[Decision, int, int]]


@pytest.fixture(scope="module")
def engine_path() -> Run:
    """The real engine on the careful reference workflow: the clean path's decision and the
    graded runs of the fault's arm and of its matched baseline."""
    manifest = load_example("typed-repair")

    def run(rule: str) -> tuple[Decision, int, int]:
        plan = parse_plan({"trials": 200, "rule": rule, "modes": ["timeout_after_commit"]})
        report = run_assay(manifest, plan)
        fault = report.faults[0]
        assert fault.baseline is not None
        return report.decision, fault.exercised, fault.baseline.trials

    return run


@pytest.mark.parametrize(("violation", "baseline_violation"), [(0.021, 0.0), (0.0, 0.01)])
def test_the_engine_grades_as_many_clean_runs_under_both_plans(
    engine_path: Run, violation: float, baseline_violation: float
) -> None:
    # An agent whose runs violate independently at these rates is allowed only on the clean path
    # (any violation blocks): P(allow) is (1 - p)^fault runs x (1 - q)^baseline runs of it.
    fixed, sequential = engine_path("fixed"), engine_path("sequential")
    assert fixed[0] is sequential[0] is Decision.ALLOW

    def p_allow(path: tuple[Decision, int, int]) -> float:
        return (1 - violation) ** path[1] * (1 - baseline_violation) ** path[2]

    assert p_allow(sequential) <= p_allow(fixed)
    assert sequential[2] == fixed[2] == 200


def test_a_rerun_under_a_risen_tolerance_is_raised_to_the_trials_it_needs_never_refused() -> None:
    plan = parse_plan({"trials": 17, "error": 0.01})
    raised = raised_to_resolve(plan, Envelope(max_violation_rate=0.2))
    # 0.2 at 0.5 % (one side of 1 %) needs 24 clean trials.
    assert raised.trials == runs_to_resolve(0.2, 0.005) == 24
    assert raised_to_resolve(raised, Envelope(max_violation_rate=0.2)) == raised


def test_a_floor_the_policy_raised_past_the_caps_reach_is_refused_saying_the_policy_set_it() -> (
    None
):
    manifest = load_example("typed")
    plan = parse_plan({"catalogue": "full", "trials": 20, "modes": ["subject_swap"]})
    policy = parse_policy({"floors": {"recovered": 0.95}})
    # The manifest states no floor: the policy's 0.95 needs more trials than 20.
    silent = tighten(policy, Envelope(), plan, manifest.target.kind)
    refused = unresolvable(silent.plan, silent.envelope, (plan, Envelope()))
    assert refused is not None and refused.field == "manifest.envelope.floors.recovered"
    assert "set by the organisation's policy" in refused.message
    assert f"needs {clean_runs_to_clear(0.95)} trials" in refused.message
    # Stated by the manifest itself, the same refusal is the manifest's own.
    own = Envelope(floors=Floors(recovered=0.95))
    stated = tighten(policy, own, plan, manifest.target.kind)
    refused = unresolvable(stated.plan, stated.envelope, (plan, own))
    assert refused is not None and "policy" not in refused.message
