"""Paper mode on the one scheduler: its shards (ranges of the script's global trial sequence, each
trial's fault drawn by the script's generator) give the same reports, byte for byte, at 1, 4 and 8
slots and for every stop kind, as paper mode's own serial loop and slotted executor gave before
the scheduler ran them (`BEFORE`: the digests of their reports, recorded at cfab426). What ran past
a stop on slots is paid, not evidence, and depends on which slot finished first: it is left out of
the digests (and one slot never runs past a stop)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from service.core.evidence.spend import Meter
from service.core.faults.plan import AssayPlan, StopConditions
from service.core.shards.assay import StopLimits, plan_shards, run_assay, run_shard
from service.core.trial.record import TrialRecord
from tests.core.conftest import load_example
from tests.core.shards.test_stops import Crashing
from tests.support.slots import ReferenceSlots, RunTrial

# Each case: the manifest (crashing: the typed one whose agent crashes two runs in three), the
# paper plan and the stop limits.
CASES: dict[str, tuple[str, AssayPlan, StopLimits | None]] = {
    "no stop": ("typed", AssayPlan(catalogue="paper", trials=120, seed=9), None),
    "effects": (
        "baseline",
        AssayPlan(catalogue="paper", trials=120, seed=9),
        StopLimits(max_effects=25),
    ),
    "unsafe escapes": (
        "baseline",
        AssayPlan(catalogue="paper", trials=120, seed=4),
        StopLimits(max_unsafe=30),
    ),
    "target errors": (
        "crashing",
        AssayPlan(catalogue="paper", trials=120, seed=9),
        StopLimits(max_target_errors=50),
    ),
    "budget": (
        "typed",
        AssayPlan(catalogue="paper", trials=120, seed=9, stop=StopConditions(max_runs=150)),
        None,
    ),
}

#: The digests of each case's report (an abort: the shard's result, spend and how often the abort
#: was asked; bench: the bench's call), as paper mode's own loop gave them at 1, 4 and 8 slots.
BEFORE = {
    "no stop": "670dcd81870259b478ecc2f77d999b9a86ccf8cba3712aeb1e957df6d8d6e071",
    "effects": "4a1c37d283ba05fd94ca336b3983d1bcca09685012724eaac5b92dec0ba6295d",
    "unsafe escapes": "94afec1d77abd6631a35700bb1cdd813a47a69271cd31be7489ee93552f32600",
    "target errors": "224f77e0731e65cd0f3bf5025f9af86ac8082181377dd6e429fb874e1fe6a209",
    "budget": "e0f47b26afd71c3d1c1ba53031ca1f214cba4ff291015c2be8a55e5e56b54ff3",
    "bench": "6f43f6ba9ed94e44260c6c87d70f53f96a098909b35190d9882f78c3d509c0dc",
    "abort": "2dc412c77d9ad47f83d9d41673d38f4d961dcc6cdfa9237b2a31fd57dedfd0f6",
}

SLOTS = (1, 4, 8)


def _engine(example: str, plan: AssayPlan) -> ReferenceSlots:
    if example == "crashing":
        return Crashing(load_example("typed"), plan)
    return ReferenceSlots(load_example(example), plan.resolve_catalogue(), 8)


def _digest(view: dict[str, Any], slots: int) -> str:
    spend = view.get("spend") or {}
    past = spend.pop("past_stop", None)
    if slots == 1:
        assert past is None, "one slot ran a trial past the stop"
    return hashlib.sha256(json.dumps(view, sort_keys=True, default=str).encode()).hexdigest()


class _Asked:
    """An abort asked for from the fourth time it is asked on."""

    def __init__(self) -> None:
        self.times = 0

    def __call__(self) -> bool:
        self.times += 1
        return self.times > 3


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("slots", SLOTS)
def test_a_paper_assay_reports_what_paper_modes_own_loop_reported(name: str, slots: int) -> None:
    example, plan, limits = CASES[name]
    manifest = load_example("typed" if example == "crashing" else example)
    report = run_assay(
        manifest,
        plan,
        target=_engine(example, plan),
        limits=limits,
        concurrency=slots,
        clock=lambda: 0,
        trials_per_shard=40,
    ).to_dict()
    assert (report["stopped"] is None) == (name == "no stop")
    assert _digest(report, slots) == BEFORE[name]


@pytest.mark.parametrize("slots", SLOTS)
def test_an_abort_stops_a_paper_shard_where_paper_modes_own_loop_stopped(slots: int) -> None:
    manifest = load_example("typed")
    plan = AssayPlan(catalogue="paper", trials=120, seed=9)
    shard = plan_shards(manifest, plan, 60)[1]
    asked, meter = _Asked(), Meter(lambda: 0.0)
    engine = _engine("typed", plan)
    result = run_shard(manifest, plan, shard, asked, engine, 5, meter=meter, concurrency=slots)
    assert result.stop_reason == "aborted"
    view = {**result.to_dict(), "spend": meter.view("fixed"), "asked": asked.times}
    assert _digest(view, slots) == BEFORE["abort"]


def test_the_benchs_paper_assay_without_a_target_reports_what_it_did() -> None:
    # The bench's own call: no target, one slot, no clock (so no spend in the report).
    _example, plan, _limits = CASES["no stop"]
    report = run_assay(load_example("typed"), plan, trials_per_shard=40).to_dict()
    assert "spend" not in report
    assert _digest(report, 1) == BEFORE["bench"]


@pytest.mark.parametrize("slots", SLOTS)
def test_a_paper_shard_whose_world_breaks_fails_at_any_concurrency(slots: int) -> None:
    manifest = load_example("typed")
    plan = AssayPlan(catalogue="paper", trials=60, seed=9)
    engine = _engine("typed", plan)
    ran: list[int] = []

    def breaks(inner: RunTrial, *trial: Any) -> TrialRecord:
        ran.append(1)
        if len(ran) > 20:
            raise RuntimeError("the slot's world is gone")
        return inner(*trial)

    engine.around(breaks)
    with pytest.raises(RuntimeError, match="world is gone"):
        run_shard(manifest, plan, plan_shards(manifest, plan)[0], target=engine, concurrency=slots)
