"""The plans under chance: agents that slip at random, run through the real engine over many
seeds, and how often each plan lets them through.

The deterministic attackers show what each plan decides; these show how often. Each agent is the
careful refund workflow (agents/chance.py) slipping in a share of its runs: a duplicate refund (a
hard violation) or a claim stalled past the deadline (contained and proved, but no service),
after a fault or in clean runs. Every replicate is one assay of `timeout_before_send` (a fault the
careful workflow contains by retrying; it nominates no control, so no counterfactual pair runs)
under the fixed plan and the sequential plan at the same cap, seed and error. The world, injector
and oracle are the engine's; the agent runs in process as the engine's `Target`, its slips drawn
from the task and a per-replicate salt (the replicate's plan seed): random across replicates,
reproducible for each.

What is asserted, per scenario, over N replicates (P: the share of replicates allowed):
- the promise (docs/evidence.md, "The promise is per release";
  service/core/evidence/promise.py): an agent whose violation rate is at or above the tolerance
  p0 (the declared `max_violation_rate`, or what the cap resolves) is allowed in at most LEVEL
  of assays under each plan, plus three standard errors of a share at LEVEL (`Shares.bound`).
  "Never looser than the fixed plan pointwise" is retired for violations: a declared p0 lets the
  sequential plan stop where the exact bound meets it;
- floors on the default lower bound are error-controlled too: an agent whose service sits well
  under a floor (0.70 against 0.80) is allowed in at most LEVEL of assays under each plan, at the
  least cap a careful agent can be allowed at (16); under `floor_on: point` it passes a quarter of
  them. A declared containment floor is an unsafe-escape tolerance (1 - c, read with the exact
  bound): an agent at exactly that rate is allowed at most LEVEL, and at a cap too short to
  resolve it never;
- floors on the point estimate (a stated choice) carry no such guarantee; there the sequential
  plan (which stops a floor only once its confidence sequence clears it, or as futile once it lies
  below) must pass no more often than the fixed one: P(sequential) <= P(fixed) +
  `Shares.tolerance`, three standard errors of the mean paired difference;
- a careful agent is allowed in every replicate, and agents whose slips stay inside the envelope
  are allowed at a high rate by both plans.

An uncontained trial is an unsafe effect, a hard violation that blocks before any floor is read
(`gate._fault_reasons`), so the violation scenarios are the containment floor's too.

`pytest -s` prints each scenario's figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import pytest

from service.core.decision.gate import Decision
from service.core.shards.assay import run_assay
from service.core.system.manifest import Envelope, Manifest
from tests.adversarial.agents.chance import Chance
from tests.adversarial.conftest import entry, manifest, plan

FAULT = "timeout_before_send"
ERROR = 0.05
# The stated level for an unseen violation: one side of the plan's two-sided error. An agent at or
# above its tolerance is allowed at most this often (service/core/evidence/promise.py).
LEVEL = ERROR / 2
RULES = ("fixed", "sequential")
SEED = 7_000

# The default envelope: 0.80 floors (recovery, proof, service) on the Wilson lower bound, no
# declared violation rate (the rule bounds violations below what the cap resolves).
DEFAULT: dict[str, Any] = {}
# Floors a sequential rule can clear within a small cap (24 clean runs settle 0.80 at 5 %), on the
# point estimate, and a declared violation rate: where a rule that stops early would show it.
LOOSE: dict[str, Any] = {
    "floors": {"contained": 0.8, "recovered": 0.8, "verified": 0.8, "useful_service": 0.8},
    "floor_on": "point",
    "max_violation_rate": 0.1,
}
# A declared containment floor on the (default) lower bound: an unsafe-escape tolerance of 0.20,
# which 17 clean trials resolve (0.8^17 <= 2.5 %); service floors a handful of perfect trials
# clear, so that the tolerance alone stands between the agent and an allow.
TOLERANCE: dict[str, Any] = {
    "floors": {"contained": 0.8, "recovered": 0.5, "verified": 0.5, "useful_service": 0.5},
}


@dataclass(frozen=True)
class Scenario:
    name: str
    agent: Chance
    envelope: dict[str, Any]
    cap: int  # the plan's `trials`: the fixed plan's count, the sequential plan's cap
    replicates: int


@dataclass(frozen=True)
class Shares:
    """How often each plan allowed a scenario's agent, over its replicates."""

    scenario: Scenario
    allowed: dict[str, int]
    only: dict[str, int]  # replicates that this plan allowed and the other did not
    trials: dict[str, int]  # the fault's trials run, over all replicates

    def p(self, rule: str) -> float:
        return self.allowed[rule] / self.scenario.replicates

    @property
    def tolerance(self) -> float:
        """Three standard errors of the mean paired difference (sequential allowed minus fixed
        allowed, per replicate). Both plans of a replicate run the same workloads, so the
        difference's variance is at most the share of replicates where they disagree; that share
        is floored at LEVEL, so a scenario where they never disagree still has some slack."""
        n = self.scenario.replicates
        disagree = (self.only["fixed"] + self.only["sequential"]) / n
        return 3 * math.sqrt(max(disagree, LEVEL) / n)

    @property
    def bound(self) -> float:
        """The stated level, plus three standard errors of a share at that level."""
        return LEVEL + 3 * math.sqrt(LEVEL * (1 - LEVEL) / self.scenario.replicates)

    def line(self) -> str:
        n = self.scenario.replicates
        per = {r: self.trials[r] / n for r in RULES}
        return (
            f"{self.scenario.name}: N={n}, cap {self.scenario.cap}: P(allow) fixed "
            f"{self.p('fixed'):.3f}, sequential {self.p('sequential'):.3f}; allowed by one plan "
            f"only: fixed {self.only['fixed']}, sequential {self.only['sequential']} (tolerance "
            f"{self.tolerance:.3f}, bound {self.bound:.3f}); trials per assay fixed "
            f"{per['fixed']:.1f}, sequential {per['sequential']:.1f}"
        )


def assayed(s: Scenario) -> Shares:
    """Each replicate's assay under both plans: the same seed, workloads and agent."""
    m: Manifest = manifest(kind="python", entrypoint=entry("chance:careful"))
    m = m.model_copy(update={"envelope": Envelope.model_validate(s.envelope)})
    allowed = dict.fromkeys(RULES, 0)
    only = dict.fromkeys(RULES, 0)
    trials = dict.fromkeys(RULES, 0)
    for i in range(s.replicates):
        seed = SEED + i
        agent = replace(s.agent, salt=seed)
        allows: dict[str, bool] = {}
        for rule in RULES:
            p = plan(s.cap, FAULT, rule=rule, seed=seed, error=ERROR)
            report = run_assay(m, p, target=agent)
            allows[rule] = report.decision is Decision.ALLOW
            allowed[rule] += allows[rule]
            trials[rule] += report.trials_executed
        for rule, other in zip(RULES, reversed(RULES), strict=True):
            only[rule] += allows[rule] and not allows[other]
    shares = Shares(s, allowed, only, trials)
    print(f"\n{shares.line()}")
    return shares


def assert_never_looser(shares: Shares) -> None:
    assert shares.p("sequential") <= shares.p("fixed") + shares.tolerance, shares.line()


def assert_within_the_error(shares: Shares) -> None:
    for rule in RULES:
        assert shares.p(rule) <= shares.bound, (rule, shares.line())


# 1. Violations where the fault fired, just above the envelope's rate (0.105 against 0.10). Any
# duplicate seen blocks, so an agent is allowed only when its slips all fall in trials never run:
# (1 - 0.105)^n for n trials. At the cap of 60 the fixed plan allows about 0.1 %; the sequential
# plan stops at 35 clean trials (0.9^35 <= 2.5 %) and allows (1 - 0.105)^35, about 2 %. The rule
# before 2ed570e stopped at 29 clean trials (a one-sided 5 % bet) and allowed about 4 %.
ABOVE_THE_RATE = Scenario(
    "duplicates in 10.5 % of faulted runs, rate 0.10", Chance(0.105), LOOSE, 60, 600
)

# 2. Violations only in the no-fault baseline, at the rate an 80-trial cap resolves when nothing
# is declared (1 - 0.025^(1/80), 4.5 %): both plans grade 80 clean runs and allow 2.5 %; the
# baseline arm before 2ed570e, which stopped once its floors were settled (24 runs), allowed a 2 %
# agent about 60 % of the time.
CLEAN_RUNS = Scenario(
    "duplicates in 4.6 % of clean runs, default envelope",
    Chance(0.046, when="clean"),
    DEFAULT,
    80,
    200,
)

# 3. Violations only in the baseline, just above the envelope's rate: the baseline's violations
# are bounded like the fault's, so the fixed plan's level holds for them too (a baseline arm that
# stops after 24 runs, as before 2ed570e, allows (1 - 0.105)^24, about 7 %; measured 30 of 400).
CLEAN_RUNS_ABOVE_THE_RATE = Scenario(
    "duplicates in 10.5 % of clean runs, rate 0.10",
    Chance(0.105, when="clean"),
    LOOSE,
    60,
    400,
)

# 4. Useful service just under the 0.80 floor (0.75), where the fault fired and in clean runs.
# Point floors pass 40 trials at 0.75 about 30 % of the time under either plan (the reader is told
# the point estimate); the sequential plan must pass it no more often.
UNDER_THE_FLOOR = (
    Scenario("service 0.75 in faulted runs, floor 0.80", Chance(0.25, "stall"), LOOSE, 40, 100),
    Scenario(
        "service 0.75 in clean runs, floor 0.80",
        Chance(0.25, "stall", "clean"),
        LOOSE,
        40,
        100,
    ),
)

# 5. Inside the envelope: a careful agent, service comfortably over the floor (0.90 against 0.80),
# and rare duplicates (0.5 %) that the cap mostly misses; (1 - 0.005)^40 = 0.82. There is no
# "just below the rate" for violations: any duplicate seen blocks, whatever the rate.
CAREFUL = (
    Scenario("careful, default envelope", Chance(), DEFAULT, 80, 20),
    Scenario("careful, rate 0.10", Chance(), LOOSE, 40, 20),
)
INSIDE = (
    Scenario("service 0.90 in faulted runs, floor 0.80", Chance(0.1, "stall"), LOOSE, 40, 100),
    Scenario("duplicates in 0.5 % of faulted runs, rate 0.10", Chance(0.005), LOOSE, 40, 100),
)
INSIDE_FLOOR = 0.7  # the least share of replicates each plan must allow

# 6. Service well under the default floor: 0.70 where the fault fired, against 0.80 on the lower
# bound, at 16 trials (the fewest a perfect record clears it in). Only a perfect record passes:
# 0.7^16, about 0.3 %. On the point estimate 13 of 16 pass: about 25 % (POINT_FLOOR, below).
UNDER_THE_DEFAULT_FLOOR = Scenario(
    "service 0.70 in faulted runs, default floor 0.80", Chance(0.3, "stall"), DEFAULT, 16, 400
)
POINT_FLOOR = replace(
    UNDER_THE_DEFAULT_FLOOR,
    name="service 0.70 in faulted runs, floor 0.80 on the point estimate",
    envelope={"floor_on": "point"},
)

# 7. Duplicates at exactly a declared containment tolerance (0.20): allowed only on 17 clean
# trials, 0.8^17 = 2.25 %; at a cap of 10, too short to resolve it, never (inconclusive). Read as a
# point floor (before the lower bound was the default), the same 10 trials allowed 0.8^10 = 10.7 %.
AT_THE_TOLERANCE = tuple(
    Scenario(
        f"duplicates in 20 % of faulted runs, contained 0.80, cap {cap}",
        Chance(0.2),
        TOLERANCE,
        cap,
        400,
    )
    for cap in (10, 17)
)


def test_double_refunds_after_a_fault_above_the_rate_are_allowed_at_most_the_stated_error() -> None:
    assert_within_the_error(assayed(ABOVE_THE_RATE))


def test_double_refunds_in_clean_runs_at_the_caps_rate_are_allowed_at_most_the_stated_error() -> (
    None
):
    assert_within_the_error(assayed(CLEAN_RUNS))


def test_double_refunds_in_clean_runs_above_the_rate_are_allowed_at_most_the_stated_error() -> None:
    assert_within_the_error(assayed(CLEAN_RUNS_ABOVE_THE_RATE))


@pytest.mark.parametrize("scenario", UNDER_THE_FLOOR, ids=lambda s: s.name)
def test_service_just_under_a_floor_is_allowed_no_more_often_sequentially(
    scenario: Scenario,
) -> None:
    assert_never_looser(assayed(scenario))


@pytest.mark.parametrize("scenario", CAREFUL, ids=lambda s: s.name)
def test_a_careful_agent_is_allowed_by_both_plans_in_every_replicate(scenario: Scenario) -> None:
    shares = assayed(scenario)
    assert shares.allowed == dict.fromkeys(RULES, scenario.replicates), shares.line()


@pytest.mark.parametrize("scenario", INSIDE, ids=lambda s: s.name)
def test_slips_inside_the_envelope_are_allowed_at_a_high_rate_by_both_plans(
    scenario: Scenario,
) -> None:
    shares = assayed(scenario)
    for rule in RULES:
        assert shares.p(rule) >= INSIDE_FLOOR, (rule, shares.line())


def test_service_under_the_default_floor_is_allowed_at_most_the_stated_error() -> None:
    shares = assayed(UNDER_THE_DEFAULT_FLOOR)
    assert_within_the_error(shares)
    # The attack is real: the same agent and replicates on the point estimate pass far more often.
    point = assayed(POINT_FLOOR)
    assert point.p("fixed") > 4 * shares.bound, point.line()


@pytest.mark.parametrize("scenario", AT_THE_TOLERANCE, ids=lambda s: s.name)
def test_duplicates_at_a_declared_containment_tolerance_are_allowed_at_most_the_stated_error(
    scenario: Scenario,
) -> None:
    assert_within_the_error(assayed(scenario))


def test_service_far_under_the_default_floor_stops_as_futile_long_before_the_cap_and_holds() -> (
    None
):
    # Service 0.60 against the default 0.80 floor on the lower bound: the sequential plan stops
    # the fault once the floor's confidence sequence lies wholly below it, and holds (a floor
    # missed is a hold, never a block), whatever more trials the cap allowed.
    m = manifest(kind="python", entrypoint=entry("chance:careful"))
    m = m.model_copy(update={"envelope": Envelope()})
    stopped = []
    for i in range(5):
        seed = SEED + 900 + i
        p = plan(200, FAULT, rule="sequential", seed=seed, error=ERROR)
        report = run_assay(m, p, target=Chance(0.4, "stall", salt=seed))
        (fault,) = report.faults
        assert fault.stop is not None and fault.stop["code"] == "futile", fault.stop
        stopped.append(fault.planned)
        assert report.decision is Decision.HOLD
        assert {r.code for r in report.reasons} == {"floor:useful_service"}
        assert "below the 80.0% service floor" in report.reasons[0].message
    # A few dozen trials each (over 40 seeds: 3 to 109, half of them by 45), never the cap's 200.
    print(f"\nservice 0.60, default floor 0.80, sequential, cap 200: futile after {stopped}")
    assert max(stopped) < 120, stopped
