"""A shard's stop conditions are what the assay's caps leave after the stored shards' totals."""

from __future__ import annotations

from typing import Any

from service.app.shards import limits
from service.db.injector import InjectorState


def state(
    caps: dict[str, Any], effects: int = 0, unsafe: int = 0, errors: int = 0
) -> InjectorState:
    return InjectorState(
        credential=None,
        limits=caps,
        effects=effects,
        unsafe=unsafe,
        target_errors=errors,
        stop_reason=None,
        status="running",
    )


def test_a_shard_may_spend_only_what_the_stored_shards_left_of_each_cap() -> None:
    left = limits(state({"max_effects": 10, "max_unsafe": 3, "max_target_errors": 5}, 4, 1, 2))
    assert (left.max_effects, left.max_unsafe, left.max_target_errors) == (6, 2, 3)


def test_a_cap_already_overspent_leaves_nothing_rather_than_a_negative_allowance() -> None:
    assert limits(state({"max_effects": 2}, effects=7)).max_effects == 0


def test_an_assay_without_caps_stops_a_shard_on_nothing_but_its_deadline() -> None:
    left = limits(state({"deadline": 1_700_000_000}), clock=lambda: 0.0)
    assert (left.max_effects, left.max_unsafe, left.max_target_errors) == (None, None, None)
    assert left.deadline == 1_700_000_000.0
    assert left.tripped(1_000, 1_000, 1_000) is None
