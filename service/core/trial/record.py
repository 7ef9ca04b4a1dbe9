"""What one trial leaves: its graded outcome, the receipts of what was injected, the storm it saw,
and what an engine target adds (its evidence sample, the invariants that failed, the sensitivity
pair's outcome). The harness and every trial engine build it; tallies count it.

Below both the harness and the engine seam (`engine.TrialEngine` returns one), so neither imports
the other; compiled with the harness (`service/core/compiled.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.core.faults.catalogue import FaultSpec
from service.core.faults.injector import InjectionReceipt
from service.core.trial.oracle import Outcome
from service.core.trial.world import Workload, World


class StormObservation:
    """A storm trial: what the graded agent did (attempts, the attempt admitted or None, its
    shortest wait), and the reference fleet's peak retries and agents completed, bare (no jitter
    or budget) and disciplined."""

    __slots__ = (
        "admitted",
        "attempts",
        "bare_done",
        "bare_peak",
        "disciplined_done",
        "disciplined_peak",
        "min_wait_ms",
    )

    def __init__(
        self,
        attempts: int,
        admitted: int | None,
        min_wait_ms: int | None,
        bare_peak: int,
        disciplined_peak: int,
        bare_done: int,
        disciplined_done: int,
    ) -> None:
        self.attempts = attempts
        self.admitted = admitted
        self.min_wait_ms = min_wait_ms
        self.bare_peak = bare_peak
        self.disciplined_peak = disciplined_peak
        self.bare_done = bare_done
        self.disciplined_done = disciplined_done


# What answered a trial at a remote endpoint: (endpoint, the build it reported or None), once
# each (`manifest.build_endpoints` names the endpoints).
Builds = tuple[tuple[str, str | None], ...]


class TrialRecord:
    __slots__ = (
        "builds",
        "exercised",
        "invariants",
        "outcome",
        "reachable",
        "reaches",
        "receipts",
        "refusals",
        "sample",
        "sensitivity",
        "storm",
        "target_error",
        "trace",
        "usage",
        "usage_invalid",
        "workload",
        "world",
    )

    def __init__(
        self,
        outcome: Outcome,
        exercised: bool,
        receipts: list[InjectionReceipt],
        target_error: str | None,
        storm: StormObservation | None,
        trace: list[dict[str, Any]] | None,
        workload: Workload,
        world: World,
    ) -> None:
        self.outcome = outcome
        self.exercised = exercised
        self.receipts = receipts
        self.target_error = target_error
        self.storm = storm
        self.trace = trace
        self.workload = workload
        self.world = world
        self.refusals: list[str] = []
        # Engine trials: the sampled evidence, the invariants that failed, and the sensitivity
        # pair's outcome (a naive agent under the same fault in the same world).
        self.sample: dict[str, Any] | None = None
        self.invariants: tuple[str, ...] = ()
        self.sensitivity: Outcome | None = None
        # Engine baselines: would this no-fault run have reached the matched fault's trigger
        # (called its tool, or called it twice for a fault that fires on the second call)?
        # None where the target cannot say (the reference, python and http targets).
        self.reachable: bool | None = None
        # Engine baselines: the same question for any fault on the run's tool, read from its
        # calls (a baseline shared by several faults answers for each: core/shards/baselines.py).
        self.reaches: Callable[[FaultSpec], bool] | None = None
        # Tokens and cost the run's claims report (service/core/evidence/spend.py), for budgets.
        self.usage: tuple[int, float] = (0, 0.0)
        # The claims reported usage that is not a count (negative, not a number).
        self.usage_invalid = False
        # Remote targets: the build each endpoint that answered this trial reported (empty for
        # code the gate runs, and for the reference target).
        self.builds: Builds = ()
