"""A trial's arms run in different slots: its baseline beside its intervention, its pairs once the
intervention has fired, and the fold is the serial run's whatever slot ran what."""

from __future__ import annotations

import threading
import time

import pytest

from service.core.faults.catalogue import FaultSpec
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.system.manifest import Manifest
from service.core.trial.engine import MatchedEngine
from service.core.trial.harness import Runtime, run_trial
from service.core.trial.record import TrialRecord
from tests.support.slots import ReferenceSlots

MODES = ("timeout_after_commit", "subject_swap", "fork_run")


class Timed:
    """A slot of the reference world that takes `pause` seconds an arm, notes when each arm of
    each trial ran and where, and remembers which fault its next baseline is matched to."""

    def __init__(self, world: TimedSlots, index: int) -> None:
        self.world = world
        self.index = index
        self.matched: dict[int, str] = {}

    def match(self, workload_key: int, spec: FaultSpec) -> None:
        self.matched[workload_key] = spec.id

    def run_trial(
        self,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord:
        arm = "baseline" if spec is None else "pairs" if disabled else "intervention"
        with self.world.lock:
            if arm == "baseline":
                self.world.told.append((workload_key, self.matched.pop(workload_key, None)))
            elif arm == "intervention":
                assert spec is not None
                self.world.faults[workload_key] = spec.id
        start = time.monotonic()
        if self.world.raise_on == (arm, workload_key):
            raise RuntimeError("the world broke")
        time.sleep(self.world.pause)
        record = run_trial(self.world.rt, spec, workload_key, storm_key, disabled, capture)
        with self.world.lock:
            self.world.runs.append((workload_key, arm, self.index, start, time.monotonic()))
        return record


class TimedSlots(ReferenceSlots):
    """The reference world on `n` slots of `Timed`."""

    def __init__(self, manifest: Manifest, plan: AssayPlan, n: int, pause: float = 0.0) -> None:
        self.rt = Runtime(manifest, plan.resolve_catalogue())
        self.pause = pause
        self.lock = threading.Lock()
        self.runs: list[tuple[int, str, int, float, float]] = []
        self.told: list[tuple[int, str | None]] = []
        self.faults: dict[int, str] = {}
        self.raise_on: tuple[str, int] | None = None
        self._slots = [Timed(self, i) for i in range(n)]  # type: ignore[misc]


def _by_trial(engine: TimedSlots) -> dict[int, dict[str, list[tuple[int, float, float]]]]:
    out: dict[int, dict[str, list[tuple[int, float, float]]]] = {}
    for key, arm, slot, start, end in engine.runs:
        out.setdefault(key, {}).setdefault(arm, []).append((slot, start, end))
    return out


def test_a_trials_baseline_runs_in_another_slot_beside_its_intervention(typed: Manifest) -> None:
    plan = AssayPlan(modes=MODES[:1], trials=2, seed=5)
    engine = TimedSlots(typed, plan, 4, pause=0.05)
    run_assay(typed, plan, target=engine, concurrency=4)
    beside = 0
    for arms in _by_trial(engine).values():
        [(iv_slot, iv_start, iv_end)] = arms["intervention"]
        [(b_slot, b_start, b_end)] = arms["baseline"]
        if b_slot != iv_slot and b_start < iv_end and iv_start < b_end:
            beside += 1
    assert beside == 2


def test_a_trials_pairs_start_only_once_its_intervention_has_fired(typed: Manifest) -> None:
    plan = AssayPlan(modes=MODES, trials=4, seed=5)
    engine = TimedSlots(typed, plan, 8, pause=0.01)
    report = run_assay(typed, plan, target=engine, concurrency=8)
    trials = _by_trial(engine)
    with_pairs = [arms for arms in trials.values() if "pairs" in arms]
    assert with_pairs, "the typed workflow's pairs run"
    for arms in with_pairs:
        [(_slot, _start, iv_end)] = arms["intervention"]
        assert all(start >= iv_end for _s, start, _e in arms["pairs"])
    # Each pair is a run of its own arm: four controls, each removed once a fired trial.
    views = [f.to_dict()["counterfactual"] for f in report.faults]
    assert sum(len(a["pairs"]) for a in with_pairs) == sum(v["runs"] for v in views if v)


def test_a_baseline_is_told_its_fault_wherever_its_intervention_ran(typed: Manifest) -> None:
    plan = AssayPlan(modes=MODES, trials=6, seed=9)
    engine = TimedSlots(typed, plan, 8, pause=0.002)
    assert isinstance(engine.slot(0), MatchedEngine)
    run_assay(typed, plan, target=engine, concurrency=8)
    assert len(engine.told) == len(MODES) * 6
    assert all(told == engine.faults[key] for key, told in engine.told)


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_arms_in_any_slots_fold_to_the_serial_report(typed: Manifest, concurrency: int) -> None:
    plan = AssayPlan(modes=MODES, trials=8, seed=21)
    serial = run_assay(typed, plan, clock=lambda: 0).to_dict()
    engine = TimedSlots(typed, plan, 8)
    mine = run_assay(typed, plan, target=engine, concurrency=concurrency, clock=lambda: 0)
    assert mine.to_dict()["faults"] == serial["faults"]


@pytest.mark.parametrize("arm", ["baseline", "intervention"])
def test_an_arm_that_raises_fails_the_assay_and_no_slot_is_left_waiting(
    typed: Manifest, arm: str
) -> None:
    plan = AssayPlan(modes=MODES[:1], trials=6, seed=5)
    probe = TimedSlots(typed, plan, 1)
    run_assay(typed, plan, target=probe, concurrency=1)
    third = [key for key, a, *_ in probe.runs if a == "intervention"][2]
    engine = TimedSlots(typed, plan, 4, pause=0.01)
    engine.raise_on = (arm, third)
    with pytest.raises(RuntimeError, match="the world broke"):
        run_assay(typed, plan, target=engine, concurrency=4)
