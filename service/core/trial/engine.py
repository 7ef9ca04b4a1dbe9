"""The seam for targets that run whole trials in a world of their own.

Kept out of the mypyc-compiled hot modules: a compiled class cannot be a runtime-checkable
protocol.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from service.core.faults.catalogue import FaultSpec
from service.core.trial.record import TrialRecord


@runtime_checkable
class TrialEngine(Protocol):
    """A target that runs whole trials in a world of its own (an `mcp` target: the team's sandbox
    servers behind Assaygate's proxy) and grades them with the oracle's flags."""

    def run_trial(
        self,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord: ...


@runtime_checkable
class SlottedEngine(Protocol):
    """A trial engine whose world offers isolated copies (slots): `slots` of them are open, and
    `slot(i)` is the engine that runs trials in copy `i` alone, so trials on different slots may
    run at once (`run_shard(..., concurrency=N)`)."""

    @property
    def slots(self) -> int: ...

    def slot(self, index: int) -> TrialEngine: ...


@runtime_checkable
class MatchedEngine(Protocol):
    """A trial engine whose matched baseline resets its world for the fault the trial's
    intervention ran (the fault's tool, nothing armed). The scheduler may run a trial's baseline
    in another slot than its intervention, or before it: `match` tells the engine that runs the
    baseline which fault it is matched to, so the baseline is the same wherever it runs."""

    def match(self, workload_key: int, spec: FaultSpec) -> None: ...
