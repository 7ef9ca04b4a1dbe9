"""The reference target as a slotted engine for the shard tests: each slot runs the built-in
workflow after a random pause (so trials finish out of order), and `around` lets a test wrap every
slot's trials (crash, count, slow or watch them) in one place."""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable
from typing import Protocol

from service.core.faults.catalogue import Catalogue, FaultSpec
from service.core.faults.plan import AssayPlan
from service.core.system.manifest import Manifest
from service.core.trial.engine import TrialEngine
from service.core.trial.harness import Runtime, run_trial
from service.core.trial.record import TrialRecord

RunTrial = Callable[[FaultSpec | None, int, int, frozenset[str], bool], TrialRecord]


class Around(Protocol):
    """A wrapper of one slot's trials: it is given the slot's own `run_trial` and the trial."""

    def __call__(
        self,
        inner: RunTrial,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord: ...


class ReferenceSlot:
    """One slot of the reference world: the built-in workflow, finishing after a random pause so
    trials complete out of order."""

    def __init__(self, rt: Runtime, index: int, ran: list[int]) -> None:
        self.rt = rt
        self.index = index
        self.ran = ran
        self.pause = random.Random(index)

    def run_trial(
        self,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord:
        time.sleep(self.pause.random() * 0.003)
        self.ran.append(self.index)
        return run_trial(self.rt, spec, workload_key, storm_key, disabled, capture)


class ReferenceSlots:
    """The reference target as an engine whose world offers `n` slots."""

    def __init__(self, manifest: Manifest, catalogue: Catalogue, n: int) -> None:
        self.ran: list[int] = []
        self._slots = [ReferenceSlot(Runtime(manifest, catalogue), i, self.ran) for i in range(n)]

    @property
    def slots(self) -> int:
        return len(self._slots)

    def slot(self, index: int) -> TrialEngine:
        return self._slots[index]

    def run_trial(
        self,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord:
        return self._slots[0].run_trial(spec, workload_key, storm_key, disabled, capture)

    def around(self, wrapper: Around) -> None:
        """Run every slot's trials through `wrapper`, which calls the slot's own when it will."""
        for slot in self._slots:
            slot.run_trial = functools.partial(wrapper, slot.run_trial)  # type: ignore[method-assign]


class Watched(ReferenceSlots):
    """The reference world that notes each intervention it starts and which faults ran at once."""

    def __init__(self, manifest: Manifest, plan: AssayPlan, n: int) -> None:
        super().__init__(manifest, plan.resolve_catalogue(), n)
        self.lock = threading.Lock()
        self.started: dict[str, int] = {}
        self.running: dict[str, int] = {}
        self.side_by_side = 0
        self.around(self._watched)

    def _watched(
        self,
        inner: RunTrial,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord:
        fault = "baseline" if spec is None else spec.id
        with self.lock:
            if spec is not None and not disabled:
                self.started[fault] = self.started.get(fault, 0) + 1
            self.running[fault] = self.running.get(fault, 0) + 1
            busy = [f for f, n in self.running.items() if n and f != "baseline"]
            self.side_by_side = max(self.side_by_side, len(busy))
        try:
            return inner(spec, workload_key, storm_key, disabled, capture)
        finally:
            with self.lock:
                self.running[fault] -= 1
