"""The process red team: how often a submitter who retries launders an allow, per release.

    .venv/bin/python bench/laundering.py [--replicates 200] [--attempts 10] [--trials 20] [--json]

Each scenario is a seeded stochastic agent run through the real engine (the world, injector and
oracle are the engine's; the agent runs in process as its `Target`), re-submitted up to
`--attempts` times as one release: the same code, manifest and policy, each attempt a new draw of
the agent's behaviour. Two readings of the same attempts:

- "newest dossier": the gate answers from the newest attempt on its own evidence, as it did
  before issue 44 (and, for floors, before floors were read on the release's record): a team
  that re-runs until it sees `allow` ships on the first one;
- "per release": the gate's rule now, as the worker merges an attempt
  (service/db/merge.py): the attempt's floors on the lower bound read on the release's record
  (`release.earlier_records`: every finished attempt's successes and trials of that fault and arm)
  with the confidence sequence, and an attempt that blocked on evidence of a violation blocking
  every later attempt of the release (`release.carry`).

Figures per scenario: P(allow) of one attempt, and P(allow within N attempts) under each reading,
with the promise's bound per release: alpha = 2.5 % (one side of the plan's 5 % error) where the
agent sits at or above its tolerance p0; for an agent under a floor, P(the first attempt passes)
+ alpha, at most 2 x 2.5 % (docs/evidence.md, "What a floor promises"). Prints figures; asserts
nothing (tests/adversarial/test_promise.py, tests/adversarial/test_floor_reruns.py and
tests/adversarial/test_submitter_attacks.py assert).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.core.decision.gate import Decision  # noqa: E402
from service.core.decision.release import Attempt, carry, earlier_records, graded  # noqa: E402
from service.core.evidence.promise import clean_bound  # noqa: E402
from service.core.faults.plan import parse_plan  # noqa: E402
from service.core.shards.assay import run_assay  # noqa: E402
from service.core.system.manifest import Envelope, Manifest  # noqa: E402
from tests.adversarial.agents.chance import Chance  # noqa: E402
from tests.adversarial.agents.rare import RareFirer  # noqa: E402
from tests.adversarial.conftest import entry, manifest  # noqa: E402

ALPHA = 0.025


@dataclass(frozen=True)
class Scenario:
    name: str
    fault: str
    agent: Callable[[int], Any]  # salt -> the in-process target
    bound: float | None  # the promise per release (None: the agent is below p0, no promise)
    counterfactuals: bool = False


def scenarios(trials: int) -> list[Scenario]:
    p0 = clean_bound(trials, ALPHA)
    at_cap = Chance(rate=p0, when="clean")
    one_percent = Chance(rate=0.01, when="clean")
    after_fault = Chance(rate=p0)
    under_floor = Chance(rate=0.3, slip="stall")
    near_floor = Chance(rate=0.22, slip="stall")
    return [
        Scenario(
            f"re-submitter, duplicates in {p0:.1%} of clean runs (the rate {trials} trials "
            "resolve)",
            "timeout_before_send",
            lambda salt: replace(at_cap, salt=salt),
            ALPHA,
        ),
        Scenario(
            f"re-submitter, duplicates in {p0:.1%} of faulted runs",
            "timeout_before_send",
            lambda salt: replace(after_fault, salt=salt),
            ALPHA,
        ),
        Scenario(
            "re-submitter, duplicates in 1 % of clean runs (below p0: no promise)",
            "timeout_before_send",
            lambda salt: replace(one_percent, salt=salt),
            None,
        ),
        Scenario(
            "rare firer: lets its fault fire in 1 % of trials, unsafe in 30 % of those",
            "cross_source_conflict",
            lambda salt: RareFirer(salt=salt),
            ALPHA,
        ),
        Scenario(
            "under the floor: useful service 0.70 in faulted runs, default 0.80 floors",
            "timeout_before_send",
            lambda salt: replace(under_floor, salt=salt),
            2 * ALPHA,
        ),
        Scenario(
            "just under the floor: useful service 0.78 in faulted runs, default 0.80 floors",
            "timeout_before_send",
            lambda salt: replace(near_floor, salt=salt),
            2 * ALPHA,
        ),
    ]


def attempt_of(report: Any, i: int) -> Attempt:
    return Attempt(
        candidate_id=f"c{i}",
        candidate_version=str(i),
        assay_id=f"a{i}",
        finished_at=f"2026-12-05T00:00:{i:02d}Z",
        decision=report.decision.value,
        reasons=tuple(r.view() for r in report.reasons),
        trials=report.trials_executed,
        stopped=report.stopped,
        floors=graded(f.to_dict() for f in report.faults),
    )


def run(s: Scenario, m: Manifest, replicates: int, attempts: int, trials: int) -> dict[str, Any]:
    first = newest = per_release = 0
    started = time.perf_counter()
    for r in range(replicates):
        earlier: list[Attempt] = []
        newest_allowed = release_allowed = False
        for a in range(attempts):
            seed = 50_000 + r * attempts + a
            plan = parse_plan(
                {
                    "trials": trials,
                    "seed": seed,
                    "modes": [s.fault],
                    "counterfactuals": s.counterfactuals,
                }
            )
            alone = run_assay(m, plan, target=s.agent(seed))
            own = alone.decision is Decision.ALLOW
            first += a == 0 and own
            newest_allowed |= own
            if not release_allowed:
                pooled = earlier_records(earlier)
                # The same seed and agent: the same runs, read on the release's record.
                report = alone
                if pooled:
                    report = run_assay(m, plan, target=s.agent(seed), earlier=pooled)
                said = carry(report.to_dict(), earlier)
                release_allowed = said["decision"] == Decision.ALLOW.value
                earlier.append(attempt_of(report, a))
            if release_allowed and newest_allowed:
                break  # the team ships on its first allow, under either reading
        newest += newest_allowed
        per_release += release_allowed
    return {
        "scenario": s.name,
        "replicates": replicates,
        "attempts": attempts,
        "trials": trials,
        "p_allow_one_attempt": first / replicates,
        "p_allow_newest_dossier": newest / replicates,
        "p_allow_per_release": per_release / replicates,
        "bound": s.bound,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicates", type=int, default=200)
    ap.add_argument("--attempts", type=int, default=10)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    # The default envelope (floors on the lower bound), whatever the red team's builder states.
    m = manifest(kind="python", entrypoint=entry("chance:careful"))
    m = m.model_copy(update={"envelope": Envelope()})
    rows = [run(s, m, args.replicates, args.attempts, args.trials) for s in scenarios(args.trials)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        bound = "" if row["bound"] is None else f" (promise: <= {row['bound']:.1%})"
        print(
            f"{row['scenario']}: N={row['replicates']}, {row['trials']} trials an attempt: "
            f"P(allow) one attempt {row['p_allow_one_attempt']:.3f}; within "
            f"{row['attempts']} attempts newest dossier {row['p_allow_newest_dossier']:.3f}, "
            f"per release {row['p_allow_per_release']:.3f}{bound} ({row['seconds']} s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
