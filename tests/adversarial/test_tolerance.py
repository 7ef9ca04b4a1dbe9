"""A declared tolerance's early allow, attacked: agents that slip at, just above and below p0, and
submitters who retry with another p0 or cap under an organisation's policy.

Each replicate is one sequential assay of `timeout_before_send` (it fires in every trial and
nominates no control) at a cap of 200 with p0 = 0.05 declared, through the real engine; the
agent is the careful refund workflow slipping a duplicate refund (a hard violation) in a share
`rate` of the runs where the fault reached it (agents/chance.py), its slips drawn per replicate.
Any violation blocks, so the rule allows only on 72 clean trials, the least n with
0.95^n <= 2.5 %: P(allow) = (1 - rate)^72 exactly, however early the rule stops.

What is asserted (`pytest -s` prints each figure):
- at p0 and above it (0.05, 0.06, 0.08) the share allowed is at most LEVEL plus three standard
  errors of a share at LEVEL, and every allow stopped at 72 trials;
- below it the early stop is real: a careful agent is allowed in every replicate at 72 trials,
  and an agent at 0.02 about (0.98)^72 = 23 % of the time (the fixed plan's 200 trials: 1.8 %);
- under a policy of p0 = 0.05, no retry with another declared p0 or cap runs at a looser p0 or
  stops before 72 trials: it is refused, or runs at the policy's p0 or a stricter one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from service.core.decision.gate import Decision
from service.core.decision.policy import parse_policy, tighten
from service.core.errors import AssaygateError
from service.core.evidence.forecast import careful_course
from service.core.evidence.promise import refuse_unresolvable, runs_to_resolve
from service.core.evidence.stopping import rule_for
from service.core.shards.assay import run_assay
from service.core.system.manifest import Envelope
from tests.adversarial.agents.chance import Chance
from tests.adversarial.conftest import entry, manifest, plan

FAULT = "timeout_before_send"
ERROR = 0.05
LEVEL = ERROR / 2
P0 = 0.05
CAP = 200
SEED = 46_000
STOPS_AT = runs_to_resolve(P0, LEVEL)


@dataclass(frozen=True)
class Shares:
    rate: float
    replicates: int
    allowed: int
    stops: frozenset[int]  # the trials at which allowed replicates stopped

    @property
    def p(self) -> float:
        return self.allowed / self.replicates

    @property
    def bound(self) -> float:
        return LEVEL + 3 * math.sqrt(LEVEL * (1 - LEVEL) / self.replicates)

    def line(self) -> str:
        exact = (1 - self.rate) ** STOPS_AT
        return (
            f"duplicates in {self.rate:.0%} of faulted runs, p0 {P0}, cap {CAP}: N="
            f"{self.replicates}, P(allow) {self.p:.3f} (exact {exact:.4f}, bound at p0 and "
            f"above {self.bound:.3f}); allowed at {sorted(self.stops)} trials"
        )


def assayed(rate: float, replicates: int) -> Shares:
    m = manifest(kind="python", entrypoint=entry("chance:careful"))
    m = m.model_copy(update={"envelope": Envelope()})
    allowed = 0
    stops: set[int] = set()
    for i in range(replicates):
        seed = SEED + i
        p = plan(CAP, FAULT, rule="sequential", seed=seed, error=ERROR, max_violation_rate=P0)
        report = run_assay(m, p, target=Chance(rate, salt=seed))
        if report.decision is Decision.ALLOW:
            allowed += 1
            (fault,) = report.faults
            stops.add(fault.planned)
    shares = Shares(rate, replicates, allowed, frozenset(stops))
    print(f"\n{shares.line()}")
    return shares


@pytest.mark.parametrize("rate", [0.05, 0.06, 0.08])
def test_agents_at_or_above_p0_are_allowed_at_most_the_stated_error_at_the_early_stop(
    rate: float,
) -> None:
    shares = assayed(rate, 400)
    assert shares.p <= shares.bound, shares.line()
    assert shares.stops <= {STOPS_AT}, shares.line()


def test_a_careful_agent_is_allowed_at_the_early_stop_in_every_replicate() -> None:
    shares = assayed(0.0, 20)
    assert shares.allowed == 20 and shares.stops == {STOPS_AT}, shares.line()


def test_an_agent_below_p0_is_allowed_as_often_as_the_exact_bound_says() -> None:
    shares = assayed(0.02, 200)
    exact = 0.98**STOPS_AT
    spread = 3 * math.sqrt(exact * (1 - exact) / shares.replicates)
    assert abs(shares.p - exact) <= spread, shares.line()
    # What the early stop buys the agent below p0: the fixed plan's 200 clean trials allow 1.8 %.
    assert shares.p > 4 * 0.98**CAP, shares.line()


@pytest.mark.parametrize("declared", [None, 0.02, 0.05, 0.1, 0.2, 0.5])
@pytest.mark.parametrize("cap", [6, 17, 50, 72, 200])
def test_no_retry_under_a_policys_p0_runs_at_a_looser_one(declared: float | None, cap: int) -> None:
    policy = parse_policy({"max_violation_rate": P0, "rules": ["sequential"]})
    m = manifest(kind="python", entrypoint=entry("chance:careful"))
    envelope = {} if declared is None else {"max_violation_rate": declared}
    m = m.model_copy(update={"envelope": Envelope.model_validate(envelope)})
    said = plan(cap, FAULT, error=ERROR)
    try:
        effective = tighten(policy, m.envelope, said, m.target.kind)
        held = effective.plan
        refuse_unresolvable(held, held.envelope_for(m), (said, m.envelope))
    except AssaygateError:
        # Refused: a looser p0 than the policy's, or a cap too short for the p0 in force.
        strictest = P0 if declared is None else min(declared, P0)
        assert (declared or 0.0) > P0 or cap < runs_to_resolve(strictest, LEVEL)
        return
    rule = rule_for(m, held, held.resolve_catalogue().by_id(FAULT))
    assert rule.violation_rate <= P0
    assert careful_course(rule).trials >= STOPS_AT
