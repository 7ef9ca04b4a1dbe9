"""A worker hands an engine that names its trials (an mcp target's) the assay's id key: the same
on every shard and every redelivery of the assay, never another assay's."""

from __future__ import annotations

from service.core.signing.credential import InjectorScope
from service.core.trial.engine import assay_key
from service.db.injector import InjectorState
from worker.steps import guard_target


class Named:
    """The part of an mcp engine a worker sets per assay: its guard and its trials' id key."""

    def __init__(self) -> None:
        self.guard = None
        self.blind_key = b"drawn per run"


def state(credential: str) -> InjectorState:
    return InjectorState(
        credential=credential,
        limits={},
        effects=0,
        unsafe=0,
        target_errors=0,
        stop_reason=None,
        status="running",
    )


SCOPE = InjectorScope("t", "c", "a", ("timeout_after_commit",), "synthetic/", 10, 0.0, 1e12)


def test_an_engine_that_names_its_trials_is_keyed_by_its_assays_credential_on_every_shard() -> None:
    engine = Named()
    guard_target(engine, SCOPE, state("payload.signature-of-assay-1"))
    first = engine.blind_key
    assert first == assay_key("payload.signature-of-assay-1")
    guard_target(engine, SCOPE, state("payload.signature-of-assay-1"))  # a redelivered shard
    assert engine.blind_key == first
    guard_target(engine, SCOPE, state("payload.signature-of-assay-2"))  # the next assay
    assert engine.blind_key != first
