"""The injector: arms FaultSpecs at their boundaries and fires them, leaving a receipt each time.

The tool clients in `sandbox` ask the injector at every boundary whether a fault is armed there;
the boundary's handler applies the disturbance and only then tells the injector it fired, which
records the injection receipt (spec, boundary, phase, call). A transient fault fires once; a
persistent one every time. A composed fault arms its `then` steps, in order, only after it fired.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from service.core.faults.catalogue import Catalogue, FaultSpec, Persistence

# Read once: attribute access on an Enum class is slow on the hot path.
_TRANSIENT: Final = Persistence.TRANSIENT


class InjectionReceipt:
    __slots__ = ("at", "boundary", "call", "fault", "mode", "phase")

    def __init__(
        self, fault: str, mode: str, boundary: str, phase: str, call: str, at: int
    ) -> None:
        self.fault = fault
        self.mode = mode
        self.boundary = boundary
        self.phase = phase
        self.call = call
        self.at = at

    def view(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "mode": self.mode,
            "boundary": self.boundary,
            "phase": self.phase,
            "call": self.call,
            "at": self.at,
        }


class Injector:
    __slots__ = ("armed", "calls", "catalogue", "fired", "guard", "pending", "receipts", "refusals")

    def __init__(
        self,
        spec: FaultSpec | None,
        catalogue: Catalogue | None = None,
        guard: Callable[[FaultSpec], str | None] | None = None,
    ) -> None:
        self.armed: dict[str, list[FaultSpec]] = {}
        self.receipts: list[InjectionReceipt] = []
        self.fired: set[str] = set()
        self.calls = 0
        self.catalogue = catalogue
        # Checked before every injection: the injector's own credential must still allow it.
        self.guard = guard
        self.refusals: list[str] = []
        # Steps of an ordered composition, armed one at a time after their predecessor fires.
        self.pending: list[FaultSpec] = []
        if spec is not None:
            self._arm(spec)

    def _arm(self, spec: FaultSpec) -> None:
        self.armed.setdefault(spec.boundary, []).append(spec)

    def take(self, boundary: str, kind: str | None = None) -> FaultSpec | None:
        """The fault armed at this call, if any. Nothing is recorded until `fire`.

        The boundary's handler applies the disturbance and calls `fire` only once it took
        effect, so a receipt always stands for a disturbance that happened.
        """
        specs = self.armed.get(boundary)
        if not specs:
            return None
        for spec in specs:
            want = spec.params.get("kind")
            if want is not None and want != kind:
                continue
            if self.guard is not None:
                refused = self.guard(spec)
                if refused is not None:
                    self.refusals.append(refused)
                    self._disarm(spec)
                    return None
            return spec
        return None

    def fire(self, spec: FaultSpec, call: str, now: int) -> None:
        """Record that the disturbance took effect: a receipt, then composition steps."""
        self.calls += 1
        # A spec's fields are pydantic attributes (a dictionary lookup each): read once.
        fault, boundary = spec.id, spec.boundary
        self.receipts.append(InjectionReceipt(fault, spec.mode, boundary, spec.phase, call, now))
        first = fault not in self.fired
        if first:
            self.fired.add(fault)
        if spec.persistence is _TRANSIENT:
            specs = self.armed.get(boundary)
            if specs is not None and spec in specs:
                self._unarm(boundary, specs, spec)
        if first:
            then = spec.then
            if then and self.catalogue is not None:
                self.pending.extend(self.catalogue.by_id(i) for i in then)
                self._arm(self.pending.pop(0))
            elif self.pending:
                self._arm(self.pending.pop(0))

    def _disarm(self, spec: FaultSpec) -> None:
        specs = self.armed.get(spec.boundary)
        if specs is None or spec not in specs:
            return
        self._unarm(spec.boundary, specs, spec)

    def _unarm(self, boundary: str, specs: list[FaultSpec], spec: FaultSpec) -> None:
        if len(specs) == 1:
            del self.armed[boundary]
        else:
            specs.remove(spec)

    def exercised(self, spec: FaultSpec) -> bool:
        """Whether the fault fired, with every step of its composition."""
        if spec.id not in self.fired:
            return False
        if spec.then and self.catalogue is not None:
            return all(step in self.fired for step in spec.then)
        return True
