"""The promise per release, attacked through the real engine: P(allow | rate >= p0) <= alpha.

Each attacker is one the issue measured getting an allow it did not deserve:
- the rare firer lets its fault fire in two trials of two hundred and is unsafe in 30 % of them:
  graded on the few it was allowed about half the time; now it holds (`not_exercised`, naming
  the fired count) in every replicate;
- a plan's `max_violation_rate` the cap cannot resolve was never read by the gate (the stop said
  "undecided", the gate said `allow`): the gate now holds it, and the service and the CLI refuse
  it at submission, naming the field and the trials it needs;
- at six trials Wilson's zero-event bound let an agent at the cap's own rate through 5.1 % of the
  time against a stated 2.5 %; the exact bound holds it to 2.5 % at every n.
"""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from service.core.decision.gate import Decision
from service.core.errors import ManifestInvalid, PlanInvalid
from service.core.evidence.promise import (
    allow_chance,
    clean_bound,
    refuse_unresolvable,
    runs_to_resolve,
)
from service.core.shards.assay import run_assay
from service.core.system.manifest import Envelope
from tests.adversarial.agents.chance import Chance
from tests.adversarial.agents.rare import RareFirer
from tests.adversarial.conftest import entry, manifest, plan

ALPHA = 0.025
ROOT = Path(__file__).resolve().parents[2]


def test_an_agent_that_lets_its_fault_fire_in_a_few_trials_is_never_graded_on_them() -> None:
    m = manifest()
    decided = []
    for salt in range(12):
        p = plan(200, "cross_source_conflict", counterfactuals=False, seed=900 + salt)
        report = run_assay(m, p, target=RareFirer(salt=salt))
        fault = report.faults[0]
        decided.append(report.decision)
        assert report.decision is not Decision.ALLOW, report.reasons
        if report.decision is Decision.HOLD and fault.exercised:
            (reason,) = report.reasons
            assert reason.code == "not_exercised"
            assert f"fired in only {fault.exercised} of 200 trials" in reason.message
    # The attack is real: most replicates let the fault fire a few times and stayed clean there.
    assert decided.count(Decision.HOLD) >= 6


def test_the_plans_max_violation_rate_is_the_rate_the_gate_applies() -> None:
    # 0.01 needs 368 clean trials at 2.5 %: 200 careful trials cannot show it, under either plan.
    m = manifest()
    for rule in ("fixed", "sequential"):
        p = plan(200, "timeout_before_send", rule=rule, max_violation_rate=0.01)
        report = run_assay(m, p)
        assert report.decision is Decision.HOLD, (rule, report.reasons)
        assert [r.code for r in report.reasons] == ["inconclusive"]
        assert "needs >= 368 trials" in report.reasons[0].message
    # And what the cap can show, it allows.
    allowed = run_assay(m, plan(200, "timeout_before_send", max_violation_rate=0.05))
    assert allowed.decision is Decision.ALLOW, allowed.reasons


def test_a_tolerance_the_cap_cannot_resolve_is_refused_naming_the_field_and_the_trials() -> None:
    with pytest.raises(PlanInvalid) as plan_error:
        refuse_unresolvable(plan(200, "timeout_before_send", max_violation_rate=0.01), Envelope())
    assert plan_error.value.field == "max_violation_rate"
    assert "needs 368 clean trials" in plan_error.value.message
    with pytest.raises(ManifestInvalid) as manifest_error:
        refuse_unresolvable(
            plan(100, "timeout_before_send"),
            Envelope.model_validate({"floor_on": "lower_bound", "floors": {"contained": 0.99}}),
        )
    assert manifest_error.value.field == "envelope.floors.contained"
    assert "needs 368 clean trials" in manifest_error.value.message


def test_the_cli_refuses_an_unresolvable_tolerance_in_one_line_as_an_error() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "assay",
            str(ROOT / "examples" / "copperfin-typed-repair.json"),
            "--max-violation-rate",
            "0.005",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    # `assay` exits 2 for hold, so its errors are 3 (README, "exit codes").
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert "max_violation_rate" in lines[0] and "736" in lines[0]


@pytest.mark.parametrize("cap", [6, 20])
def test_an_agent_at_the_caps_own_rate_is_allowed_at_most_the_stated_error(cap: int) -> None:
    # Nothing declared: p0 is what the cap resolves, and an agent duplicating at p0 after every
    # fault is allowed only on `cap` clean trials: exactly 2.5 % (Wilson read 5.1 % at six).
    p0 = clean_bound(cap, ALPHA)
    assert allow_chance(p0, cap) == pytest.approx(ALPHA)
    replicates = 400
    m = manifest(kind="python", entrypoint=entry("chance:careful"))
    # Floors out of the way (on the point estimate: six trials clear no lower-bound floor), so
    # that the violation bound alone decides.
    m = m.model_copy(
        update={
            "envelope": Envelope.model_validate(
                {
                    "floor_on": "point",
                    "floors": {"contained": 0.0, "recovered": 0.0, "verified": 0.0},
                }
            )
        }
    )
    allowed = 0
    agent = Chance(rate=p0)
    for i in range(replicates):
        seed = 40_000 + i
        report = run_assay(
            m,
            plan(cap, "timeout_before_send", seed=seed, counterfactuals=False),
            target=replace(agent, salt=seed),
        )
        allowed += report.decision is Decision.ALLOW
    share = allowed / replicates
    bound = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / replicates)
    print(f"\ncap {cap}: agent at p0 {p0:.3f} allowed in {allowed} of {replicates} ({share:.3f})")
    assert share <= bound


def test_a_careful_agent_earns_allow_at_a_declared_tolerance_its_trials_resolve() -> None:
    need = runs_to_resolve(0.1, ALPHA)
    m = manifest(kind="python", entrypoint=entry("chance:careful"))
    m = m.model_copy(
        update={
            "envelope": Envelope.model_validate(
                {
                    "max_violation_rate": 0.1,
                    "floors": {"contained": 0.8, "recovered": 0.8, "verified": 0.8},
                }
            )
        }
    )
    for rule in ("fixed", "sequential"):
        report = run_assay(m, plan(need, "timeout_before_send", rule=rule), target=Chance())
        assert report.decision is Decision.ALLOW, (rule, report.reasons)
