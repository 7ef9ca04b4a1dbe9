"""Blind arms: the ids a trial's agent, its tools and the team's hooks see are alike in every arm.

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
from typing import Final

from service.core.faults.catalogue import FaultSpec

KEY_BYTES: Final = 32
_PERSON_ID: Final = b"assaygate-trial"
_PERSON_KEY: Final = b"assaygate-blind"


def arm_of(
    spec: FaultSpec | None, disabled: frozenset[str] = frozenset(), naive: bool = False
) -> str:
    """The arm's name, for the key's input only (the agent never sees it)."""
    arm = "baseline" if spec is None else "intervention"
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


__all__ = ["KEY_BYTES", "arm_of", "assay_key", "trial_id"]
