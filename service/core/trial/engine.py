"""The seam for targets that run whole trials in a world of their own.

Kept out of the mypyc-compiled hot modules: a compiled class cannot be a runtime-checkable
protocol.

Blind arms: the ids a trial's agent, its tools and the team's hooks see are alike in every arm.

A trial runs in several arms (the intervention, its matched baseline, a counterfactual with
controls off, the sensitivity pair's naive run). An agent that could tell them apart could behave
only where it is graded, or keep a fault from firing only where one is armed. So a trial's id is
opaque: a keyed BLAKE2b of the workload key and the arm under a key the agent never sees (the
service derives it from the assay's signed injector credential; the local CLI draws one per run).
It depends on the trial and the arm, never on the slot or the order trials start in, so an agent
keyed on it behaves alike at any concurrency, and a redelivered shard sees the ids it saw before.
"""

from __future__ import annotations

import hashlib
from typing import Final, Protocol, runtime_checkable

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


# ------------------------------------------------------------------------- blind arms

KEY_BYTES: Final = 32
_PERSON_ID: Final = b"assaygate-trial"
_PERSON_KEY: Final = b"assaygate-blind"


def arm_of(
    spec: FaultSpec | None, disabled: frozenset[str] = frozenset(), naive: bool = False
) -> str:
    """The arm's name, for the key's input only (the agent never sees it). A faulted arm names
    its fault: faults that share a baseline run the same workload (`plan.baseline: shared`), and
    each of their arms must still have an id of its own, so no id repeats and none tells a run
    that was shared from one that was not."""
    arm = "baseline" if spec is None else f"intervention:{spec.id}"
    if disabled:
        arm += "-without-" + "+".join(sorted(disabled))
    return arm + "-naive" if naive else arm


def trial_id(key: bytes, workload_key: int, arm: str) -> str:
    """`t` and 16 hex digits, the same shape in every arm."""
    data = f"{workload_key % 2**64:016x}|{arm}".encode()
    digest = hashlib.blake2b(data, key=key, digest_size=8, person=_PERSON_ID)
    return "t" + digest.hexdigest()


def assay_key(credential: str) -> bytes:
    """An assay's id key from its signed injector credential: the service's signature over the
    assay's scope, which only the gate holds (it never leaves the service and its workers),
    stored with the assay, so every shard and every redelivery derives the same key."""
    return hashlib.blake2b(credential.encode(), digest_size=KEY_BYTES, person=_PERSON_KEY).digest()
