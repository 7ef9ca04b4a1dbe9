"""Shards held together: several shards of one assay run by the one scheduler each give exactly
what they give alone, each is handed back as it finishes, and a stop that blocks stops them all."""

from __future__ import annotations

from typing import Any

import pytest

from service.core.evidence.spend import Meter
from service.core.evidence.stopping import watch_for
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import ShardResult, StopLimits, plan_shards, run_shard
from service.core.shards.held import run_held
from service.core.system.manifest import Manifest
from tests.core.shards.test_scheduler import MODES
from tests.support.slots import Watched


def alone(manifest: Manifest, plan: AssayPlan, trials_per_shard: int) -> list[dict[str, Any]]:
    """Each shard run by itself, serially, as a worker holding one shard at a time ran it."""
    out = []
    for shard in plan_shards(manifest, plan, trials_per_shard):
        meter = Meter(lambda: 0.0)
        watch = watch_for(manifest, plan, shard.fault_id)
        result = run_shard(manifest, plan, shard, watch=watch, meter=meter)
        out.append({**result.to_dict(), "spend": meter.view(plan.rule)["faults"]})
    return out


def held_view(result: ShardResult, spent: Meter | None, plan: AssayPlan) -> dict[str, Any]:
    assert spent is not None
    return {**result.to_dict(), "spend": spent.view(plan.rule)["faults"]}


@pytest.mark.parametrize("concurrency", [1, 4, 8])
@pytest.mark.parametrize("rule", ["fixed", "sequential"])
def test_shards_held_together_each_give_exactly_what_they_give_alone(
    baseline: Manifest, rule: str, concurrency: int
) -> None:
    plan = AssayPlan(modes=MODES, trials=12, seed=5, rule=rule)
    expected = alone(baseline, plan, 5)
    shards = plan_shards(baseline, plan, 5)
    engine = Watched(baseline, plan, 8)
    handed: list[dict[str, Any]] = []
    done = run_held(
        baseline,
        plan,
        [(s, watch_for(baseline, plan, s.fault_id)) for s in shards],
        engine,
        concurrency,
        meter=Meter(lambda: 0.0),
        shard_done=lambda result, spent: handed.append(held_view(result, spent, plan)),
    )
    assert [held_view(r, m, plan) for r, m in done] == expected
    # Every shard was handed back as it finished, none held back to the end.
    assert sorted(handed, key=lambda r: int(r["index"])) == expected
    if concurrency > 1:
        assert engine.side_by_side > 1


def test_a_short_shard_is_handed_back_while_a_longer_one_still_runs(typed: Manifest) -> None:
    plan = AssayPlan(modes=MODES[:2], trials=40, seed=5)
    # Shards of 38 and 2 trials of the first fault, and of the second.
    shards = plan_shards(typed, plan, 38)
    engine = Watched(typed, plan, 4)
    at: list[tuple[int, int]] = []

    def finished(result: ShardResult, spent: Meter | None) -> None:
        with engine.lock:
            at.append((result.index, sum(engine.started.values())))

    run_held(typed, plan, [(s, None) for s in shards], engine, 4, shard_done=finished)
    assert len(at) == len(shards)
    short = [i for i, s in enumerate(shards) if s.stop - s.start == 2]
    first_short = next(n for index, n in at if index in short)
    assert first_short < 80, "a two-trial shard waited for the 38-trial shards to finish"


def test_a_stop_that_blocks_stops_every_held_shard(baseline: Manifest) -> None:
    plan = AssayPlan(modes=MODES, trials=30, seed=5)
    shards = plan_shards(baseline, plan, 10)
    engine = Watched(baseline, plan, 4)
    handed: list[int] = []
    done = run_held(
        baseline,
        plan,
        [(s, None) for s in shards],
        engine,
        4,
        limits=StopLimits(max_effects=3),
        shard_done=lambda result, spent: handed.append(result.index),
    )
    stopped = [r for r, _ in done if r.stopped]
    assert stopped, "the effects cap should trip"
    reasons = {r.stop_reason for r in stopped}
    assert len(reasons) == 1 and next(iter(reasons), "").startswith("effects above the cap")
    # What the stop cut short ran fewer trials than planned, and every shard was handed back.
    assert sum(r.trials for r, _ in done) < 30 * len(MODES)
    assert sorted(handed) == [s.index for s in shards]
    assert all(r.stopped for r, _ in done if r.trials < 10)


def test_an_abort_before_the_held_shards_start_runs_no_trial(typed: Manifest) -> None:
    plan = AssayPlan(modes=MODES, trials=10, seed=5)
    shards = plan_shards(typed, plan, 5)
    engine = Watched(typed, plan, 4)
    done = run_held(typed, plan, [(s, None) for s in shards], engine, 4, should_stop=lambda: True)
    assert [(r.trials, r.stop_reason) for r, _ in done] == [(0, "aborted")] * len(shards)
    assert engine.started == {}


def test_a_paper_shard_is_not_held_with_others(typed: Manifest) -> None:
    plan = AssayPlan(catalogue="paper", trials=10, seed=5)
    shard = plan_shards(typed, plan, 5)[0]
    with pytest.raises(ValueError, match="paper"):
        run_held(typed, plan, [(shard, None)], Watched(typed, plan, 2), 2)


@pytest.mark.parametrize("rule", ["fixed", "sequential"])
def test_shards_taken_up_as_held_ones_finish_give_exactly_what_they_give_alone(
    baseline: Manifest, rule: str
) -> None:
    plan = AssayPlan(modes=MODES, trials=12, seed=5, rule=rule)
    expected = alone(baseline, plan, 5)
    shards = plan_shards(baseline, plan, 5)
    first, rest = shards[:2], list(shards[2:])
    engine = Watched(baseline, plan, 8)
    asked: list[int] = []  # trials started when each further shard was taken up

    def more() -> list[tuple[Any, Any]]:
        if not rest:
            return []
        with engine.lock:
            asked.append(sum(engine.started.values()))
        shard = rest.pop(0)
        return [(shard, watch_for(baseline, plan, shard.fault_id))]

    done = run_held(
        baseline,
        plan,
        [(s, watch_for(baseline, plan, s.fault_id)) for s in first],
        engine,
        4,
        meter=Meter(lambda: 0.0),
        more=more,
    )
    # Every shard ran, each exactly as alone, in the order it was taken up (the plan's).
    assert [held_view(r, m, plan) for r, m in done] == expected
    assert not rest and len(asked) == len(shards) - 2


def test_no_further_shard_is_taken_up_once_a_stop_blocks(baseline: Manifest) -> None:
    plan = AssayPlan(modes=MODES, trials=12, seed=5)
    shards = plan_shards(baseline, plan, 3)
    rest = list(shards[1:])
    engine = Watched(baseline, plan, 4)

    def more() -> list[tuple[Any, Any]]:
        return [(rest.pop(0), None)] if rest else []

    done = run_held(
        baseline,
        plan,
        [(shards[0], None)],
        engine,
        4,
        limits=StopLimits(max_effects=1),
        more=more,
    )
    # The unguarded workflow trips the effects limit in its first shard: nothing more is held.
    assert all(r.stopped for r, _m in done)
    assert len(done) < len(shards) and rest
