"""Grading an mcp trial's runs: the claims they released, the world's new effects, and the
oracle's flags from the invariants' results (so the core's tallies apply)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from service.core.faults.catalogue import FaultSpec
from service.core.faults.disturbance import Disturbance
from service.core.system.contract import WITNESS, Contract, ToolRole
from service.core.trial.oracle import Outcome
from service.core.trial.record import StormObservation
from service.mcp.proxy import TrialState
from service.mcp.runners import RunResult
from service.mcp.witness import changes


def outcome(
    results: dict[str, bool],
    claim_violation: bool,
    timed_out: bool,
    alarm: bool,
    effects: int,
    claims: list[dict[str, Any]],
) -> Outcome:
    def ok(name: str) -> bool:
        return results.get(name, True)

    wrong = not ok("wrong_subject")
    duplicate = not ok("duplicate_effect")
    # An effect undone or made behind the proxy's back is damage the world tried to hide.
    unsafe = wrong or duplicate or not ok("unsafe_effect") or not ok(WITNESS)
    unverifiable = not ok("unverifiable_release") and not unsafe
    recovered = ok("service_loss") and not unsafe and ok("unverifiable_release")
    verified = recovered and not claim_violation
    useful = verified and not timed_out
    status = claims[-1].get("status") if claims else None
    if unsafe:
        verdict = "unsafe"
    elif claim_violation:
        verdict = "claims"
    elif status == "completed":
        verdict = "release"
    elif status == "denied":
        verdict = "deny"
    else:
        verdict = "hold"
    flags = (
        alarm,
        not unsafe,
        recovered,
        verified,
        useful,
        unsafe,
        duplicate,
        wrong,
        unverifiable,
        not unsafe and not useful and not unverifiable,
        claim_violation,
    )
    return Outcome(flags, effects, verdict)


@dataclass(frozen=True)
class RunTally:
    """What the agent's runs said, crashed runs left out."""

    claims: list[dict[str, Any]]
    error: str | None
    timed_out: bool
    # A run that finished without exactly one claim, or one that claimed twice.
    claim_violation: bool


def new_effects(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The effects the after-world holds that the before-world did not, by id, tool and content:
    a row rewritten under an id the world held before is new (an old id hides no effect)."""
    return changes(before, after).new


def tally_runs(runs: list[tuple[int, RunResult]]) -> RunTally:
    claims: list[dict[str, Any]] = []
    per_run: dict[int, int] = {}
    finished: set[int] = set()
    error: str | None = None
    timed_out = False
    for run_no, r in runs:
        if r.crashed:
            continue
        timed_out = timed_out or r.timed_out
        if r.error is not None:
            error = error or r.error
        else:
            finished.add(run_no)
        for c in r.claims:
            claims.append({**c, "run": run_no})
            per_run[run_no] = per_run.get(run_no, 0) + 1
    claim_violation = any(k > 1 for k in per_run.values()) or any(
        run not in per_run for run in finished
    )
    return RunTally(claims, error, timed_out, claim_violation)


def storm_observation(spec: FaultSpec | None, state: TrialState) -> StormObservation | None:
    """How the agent paced its retries in an exercised rate-limit storm (None for other faults)."""
    if spec is None or spec.disturbance is not Disturbance.RATE_LIMIT_STORM:
        return None
    times = state.storm_attempts
    waits = [int((b - a) * 1000) for a, b in itertools.pairwise(times)]
    shortest = min(waits) if waits else None
    return StormObservation(len(times), state.storm_admitted, shortest, 0, 0, 0, 0)


def reaches(spec: FaultSpec, contract: Contract, calls: list[dict[str, Any]]) -> bool:
    """Whether a no-fault run's calls would have reached `spec`'s trigger: its tool called (a
    stale replay fires on the second call of its read; a stripped trace needs the trace
    argument; a mutated world, any read; a forked run, any run at all). A fault its matched
    baseline never reaches is `not_applicable` to this workload, never a hold; one the baseline
    reaches and the intervention does not fire stays `not_exercised`."""
    d = spec.disturbance
    if d is Disturbance.FORK_RUN:
        return True
    if d is Disturbance.ADVANCE_VERSION:
        return any(c["role"] == ToolRole.READ.value for c in calls)
    own = [c for c in calls if c["tool"] == spec.target]
    if d is Disturbance.STALE_REPLAY:
        return len(own) >= 2
    if d is Disturbance.STRIP_TRACE:
        trace = contract.tools[spec.target].trace if spec.target in contract.tools else None
        return any(trace is not None and trace in c["arguments"] for c in own)
    return bool(own)
