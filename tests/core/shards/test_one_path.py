"""One execution path: the scheduler with one slot is the serial run. Every plan (fixed,
sequential, shared baselines, a budget, each stop kind, an abort) gives the same report, byte for
byte, whether its shards run the serial loop or the scheduler runs its faults on one slot."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from service.core.evidence.spend import Meter
from service.core.evidence.stopping import watch_for
from service.core.faults.plan import AssayPlan, StopConditions
from service.core.shards.assay import StopLimits, plan_shards, run_assay, run_shard
from service.core.shards.held import run_held
from service.core.shards.scheduled_assay import run_scheduled_assay
from tests.core.conftest import load_example
from tests.core.shards.test_stops import MODES, Crashing
from tests.support.slots import ReferenceSlots

PLANS: dict[str, tuple[str, AssayPlan, StopLimits | None]] = {
    "fixed": ("typed", AssayPlan(modes=MODES, trials=12, seed=5), None),
    "sequential": ("baseline", AssayPlan(modes=MODES, trials=20, seed=3, rule="sequential"), None),
    "shared baseline": (
        "typed",
        AssayPlan(modes=MODES, trials=10, seed=7, baseline="shared", evidence_sample=None),
        None,
    ),
    "budget": (
        "typed",
        AssayPlan(modes=MODES, trials=10, seed=5, stop=StopConditions(max_runs=70)),
        None,
    ),
    "sequential budget": (
        "typed",
        AssayPlan(
            modes=MODES, trials=10, seed=5, rule="sequential", stop=StopConditions(max_runs=70)
        ),
        None,
    ),
    "target errors": (
        "crashing",
        AssayPlan(modes=MODES, trials=8, seed=5),
        StopLimits(max_target_errors=12),
    ),
    "unsafe limit": (
        "baseline",
        AssayPlan(modes=MODES, trials=10, seed=5),
        StopLimits(max_unsafe=6),
    ),
    "effects": ("typed", AssayPlan(modes=MODES, trials=10, seed=5), StopLimits(max_effects=30)),
}


def _engine(example: str, plan: AssayPlan) -> ReferenceSlots:
    manifest = load_example("typed" if example == "crashing" else example)
    if example == "crashing":
        return Crashing(manifest, plan)
    return ReferenceSlots(manifest, plan.resolve_catalogue(), 1)


class _Asked:
    """An abort asked for from the third time it is asked on."""

    def __init__(self) -> None:
        self.times = 0

    def __call__(self) -> bool:
        self.times += 1
        return self.times > 2


def _json(view: Any) -> str:
    return json.dumps(view, sort_keys=True, default=str)


@pytest.mark.parametrize("name", list(PLANS))
def test_the_scheduler_on_one_slot_reports_what_the_serial_loop_reports(name: str) -> None:
    example, plan, limits = PLANS[name]
    manifest = load_example("typed" if example == "crashing" else example)
    done: list[list[tuple[str, int, int]]] = [[], []]

    def seen(into: list[tuple[str, int, int]]) -> Callable[[str, Any, int, int], None]:
        return lambda fault, _tally, at, total: into.append((fault, at, total))

    serial = run_assay(
        manifest,
        plan,
        target=_engine(example, plan),
        limits=limits,
        clock=lambda: 0,
        trials_per_shard=4,
        fault_done=seen(done[0]),
    )
    scheduled = run_scheduled_assay(
        manifest,
        plan,
        _engine(example, plan),
        1,
        None,
        limits,
        True,
        seen(done[1]),
        Meter(lambda: 0),
        True,
        None
        if plan.baseline != "shared"
        else __import__(
            "service.core.shards.baselines", fromlist=["SharedBaselines"]
        ).SharedBaselines(),
    )
    if plan.stop.max_runs is not None or limits is not None:
        assert serial.stopped is not None
    assert _json(scheduled.to_dict()) == _json(serial.to_dict())
    if serial.stopped is None:
        assert done[1] == done[0]
    else:
        # A fault cut short by the stop is told too (the serial loop told it only from its last
        # shard).
        assert set(done[0]) <= set(done[1])


@pytest.mark.parametrize("rule", ["fixed", "sequential"])
def test_an_abort_stops_a_held_shard_on_one_slot_where_the_serial_loop_stops(rule: str) -> None:
    manifest = load_example("typed")
    plan = AssayPlan(modes=MODES, trials=30, seed=5, rule=rule)
    shard = plan_shards(manifest, plan, 30)[1]
    views = []
    for path in ("serial", "scheduled"):
        asked = _Asked()
        meter = Meter(lambda: 0.0)
        watch = watch_for(manifest, plan, shard.fault_id)
        engine = _engine("typed", plan)
        if path == "serial":
            result = run_shard(manifest, plan, shard, asked, engine, 4, watch=watch, meter=meter)
        else:
            [(result, _)] = run_held(
                manifest,
                plan,
                [(shard, watch)],
                engine,
                1,
                should_stop=asked,
                batch=4,
                meter=meter,
            )
        views.append(_json({**result.to_dict(), "spend": meter.view(rule), "asked": asked.times}))
    assert json.loads(views[0])["stop_reason"] == "aborted"
    assert views[1] == views[0]
