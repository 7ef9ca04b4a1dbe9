"""A submitter who re-runs a release until its floors pass: floors are promised per release.

A floor missed is a hold, which does not carry to later attempts. Read on each attempt's own
Wilson bound, every re-run of the same code, manifest and policy would be a fresh draw at the
floor: an agent just under it passes one attempt in at most 2.5 %, and a release re-run ten times
in up to ten times that. The gate reads a re-run's floors on the release's record instead (every
finished attempt's successes and trials of that fault and arm, this one's among them) with the
anytime-valid confidence sequence at one side of the plan's error, so P(some attempt of the
release passes a floor | its rate is under it) <= P(the first attempt passes) + alpha: at most
2 x 2.5 % = 5 % however often it is re-run (docs/evidence.md, "What a floor promises").

Each replicate is one release: the careful refund workflow (agents/chance.py) stalling its claim
in 22 % of faulted runs (useful service 0.78 against the default 0.80 floor, on the lower bound),
run through the real engine up to ten times, 16 trials an attempt (the least a careful agent is
allowed at), each attempt merged with the release's earlier records as the worker merges it
(`service.db.merge.record_merge`: `earlier_records`, then `carry`); the team ships on its first
`allow`. `pytest -s` prints the figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from service.core.decision.gate import Decision
from service.core.decision.release import Attempt, carry, earlier_records, graded
from service.core.decision.report import AssayReport
from service.core.shards.assay import run_assay
from service.core.system.manifest import Envelope, Manifest
from tests.adversarial.agents.chance import Chance
from tests.adversarial.conftest import entry, manifest, plan

FAULT = "timeout_before_send"
ERROR = 0.05
LEVEL = ERROR / 2  # one side of the plan's error: Wilson's for the first attempt, the sequence's
TRIALS = 16
ATTEMPTS = 10
REPLICATES = 400
SEED = 90_000
NEAR_FLOOR = Chance(rate=0.22, slip="stall")  # useful service 0.78 where the fault fired
CAREFUL = Chance()


def default_envelope() -> Manifest:
    m: Manifest = manifest(kind="python", entrypoint=entry("chance:careful"))
    return m.model_copy(update={"envelope": Envelope()})


def attempt_of(report: AssayReport, i: int) -> Attempt:
    return Attempt(
        f"c{i}",
        str(i),
        f"a{i}",
        f"2026-12-06T00:00:{i:02d}Z",
        report.decision.value,
        tuple(r.view() for r in report.reasons),
        report.trials_executed,
        report.stopped,
        graded(f.to_dict() for f in report.faults),
    )


@dataclass(frozen=True)
class Release:
    """One release re-run until allowed: which attempt was allowed under each reading."""

    per_release: int | None  # the gate's rule: floors on the release's record
    per_attempt: int | None  # each attempt's own Wilson bound (the rule before)


def rerun(m: Manifest, agent: Chance, salt: int, attempts: int = ATTEMPTS) -> Release:
    earlier: list[Attempt] = []
    per_release = per_attempt = None
    for a in range(attempts):
        seed = salt * attempts + a
        p = plan(TRIALS, FAULT, rule="fixed", seed=seed, error=ERROR)
        target = replace(agent, salt=seed)
        own = run_assay(m, p, target=target)
        if per_attempt is None and own.decision is Decision.ALLOW:
            per_attempt = a
        if per_release is None:
            report = run_assay(m, p, target=target, earlier=earlier_records(earlier))
            if carry(report.to_dict(), earlier)["decision"] == Decision.ALLOW.value:
                per_release = a
            earlier.append(attempt_of(report, a))
        if per_release is not None and per_attempt is not None:
            break
    return Release(per_release, per_attempt)


def bound(level: float, n: int) -> float:
    """A share at `level`, plus three standard errors of it over `n` replicates."""
    return level + 3 * math.sqrt(level * (1 - level) / n)


def test_an_agent_just_under_a_floor_rerun_ten_times_is_allowed_within_the_stated_bound() -> None:
    m = default_envelope()
    releases = [rerun(m, NEAR_FLOOR, SEED + r) for r in range(REPLICATES)]
    first = sum(r.per_attempt == 0 for r in releases) / REPLICATES
    now = sum(r.per_release is not None for r in releases) / REPLICATES
    before = sum(r.per_attempt is not None for r in releases) / REPLICATES
    print(
        f"\nuseful service 0.78 against 0.80, {TRIALS} trials an attempt, up to {ATTEMPTS} "
        f"attempts, N={REPLICATES}: P(allow) first attempt {first:.3f} (exactly 0.78^16 = "
        f"{0.78**TRIALS:.3f}); within {ATTEMPTS} attempts per attempt {before:.3f}, on the "
        f"release's record {now:.3f} (bound {2 * LEVEL:.3f})"
    )
    assert first <= bound(LEVEL, REPLICATES)
    assert now <= bound(2 * LEVEL, REPLICATES)
    # The same releases read one attempt at a time: the draw the rule takes away.
    assert before > bound(2 * LEVEL, REPLICATES)


def test_a_careful_agent_is_allowed_on_its_first_attempt_and_on_a_rerun() -> None:
    m = default_envelope()
    earlier: list[Attempt] = []
    for a in range(2):
        p = plan(TRIALS, FAULT, rule="fixed", seed=SEED + a, error=ERROR)
        report = run_assay(m, p, target=CAREFUL, earlier=earlier_records(earlier))
        assert carry(report.to_dict(), earlier)["decision"] == Decision.ALLOW.value
        pooled = [v.get("pooled") for f in report.faults for v in f.floors]
        # The first attempt was read on its own 16 trials; the re-run on both attempts' 32.
        if a == 0:
            assert pooled and all(p is None for p in pooled)
        else:
            assert pooled and all(isinstance(p, dict) and p["trials"] == 32 for p in pooled)
        earlier.append(attempt_of(report, a))
