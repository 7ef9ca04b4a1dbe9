"""One execution path: the scheduler with one slot is the serial run. Every plan (fixed,
sequential, shared baselines, a budget, each stop kind, an abort) gives the same report, byte for
byte, whether its shards run the serial loop or the scheduler runs its faults on one slot; and the
same report the serial loop gave before the scheduler replaced it (`SERIAL`: the digests of its
reports, recorded from the serial loop of run_assay and run_shard at d624f0f)."""

from __future__ import annotations

import hashlib
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


#: The canonical JSON reports' SHA-256 of each plan (an abort: the shard's result and spend), as
#: the serial loop gave them.
SERIAL = {
    "fixed": "0f2a874fe34d2347c9a2e315fab7b67a58d52e7c4bd5a36f72a762be8ba03f9d",
    "sequential": "3955b3449192aa8ed7a91b6b34e2c3df929e4d080de8398b31a2b20feaa32d74",
    "shared baseline": "49ea81655a7af91c0c93553b5eb3eeb3ef1ee43dec2077e6c5943ecf9666ddca",
    "budget": "253f6720944dc28fbca40a80bb6df7d45f140a1a4fef89249dbe7a80f15df7ec",
    "sequential budget": "8c65db6c1930b9c094560f8ff9c5b6db102c879711aa20c3f67118cadb5d7cb2",
    "target errors": "17f3a201f37a00f7c93bc3788a31fd4a5eb47264d12610f4bb9e6321928f1b25",
    "unsafe limit": "44db2906d0f6394ff78731c72c71f306b682e8005c4270c8cc58bb5fa59e7ab1",
    "effects": "2ec58f6ed11af7d9fd7d892eb6f9c6bb74bf290399b00cc5be8bc035cef385fc",
    "abort fixed": "00c9cfdfb31c1d721f95dba859260ad387546abc3997c5712620bc272b3d51d8",
    "abort sequential": "10786b104bfbdf87424bb1a17237b1f249d438a86a738f7c7d08ba05b7f79a4b",
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


def _digest(view: Any) -> str:
    return hashlib.sha256(_json(view).encode()).hexdigest()


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
    assert _digest(serial.to_dict()) == SERIAL[name]
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
    assert hashlib.sha256(views[0].encode()).hexdigest() == SERIAL[f"abort {rule}"]


def _told(into: list[tuple[int, int]]) -> Callable[[int, int], None]:
    return lambda done, total: into.append((done, total))


def test_progress_is_told_every_shards_worth_of_a_faults_trials_at_any_concurrency() -> None:
    manifest = load_example("typed")
    plan = AssayPlan(modes=MODES, trials=10, seed=5)
    told: list[list[tuple[int, int]]] = []
    for concurrency in (1, 4):
        seen: list[tuple[int, int]] = []
        engine = ReferenceSlots(manifest, plan.resolve_catalogue(), 4)
        run_assay(
            manifest,
            plan,
            target=engine,
            progress=_told(seen),
            trials_per_shard=4,
            concurrency=concurrency,
        )
        told.append(seen)
    # Each fault: after 4 and 8 of its trials, then as it finishes (10).
    fault = [4, 8, 10]
    assert told[0] == [(10 * i + n, 40) for i in range(4) for n in fault]
    # On slots a fault's end may be told after the next fault's first trials are.
    assert sorted(told[1]) == told[0]
