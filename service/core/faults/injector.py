"""The injector: arms FaultSpecs at their boundaries and fires them, leaving a receipt each time.

The tool clients in `sandbox` ask the injector at every boundary whether a fault is armed there;
the boundary's handler applies the disturbance and only then tells the injector it fired, which
records the injection receipt (spec, boundary, phase, call). A transient fault fires once; a
persistent one every time. A composed fault arms its `then` steps, in order, only after it fired.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from service.core.faults.catalogue import Catalogue, FaultSpec, Persistence, Recoverability
from service.core.faults.disturbance import Disturbance

# Read once: attribute access on an Enum class is slow on the hot path.
_TRANSIENT: Final = Persistence.TRANSIENT


class Armed:
    """A fault spec's fields that a trial reads, copied once into native attributes (`spec`
    is the spec itself, for the rest).

    A spec is a pydantic model: compiled, each read of one of its fields is a generic attribute
    lookup (about 50 ns), and a paper trial read about 36 of them between the injector, the
    sandbox and the harness. A spec is frozen, so its copy stays true."""

    __slots__ = (
        "boundary",
        "disturbance",
        "expected",
        "id",
        "mode",
        "params",
        "persistence",
        "phase",
        "spec",
        "then",
    )

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec
        self.id = spec.id
        self.mode = spec.mode
        self.boundary = spec.boundary
        self.phase = spec.phase
        self.disturbance: Disturbance = spec.disturbance
        self.params = spec.params
        self.persistence: Persistence = spec.persistence
        self.expected: Recoverability = spec.expected_recoverability
        self.then = spec.then

    def __eq__(self, other: object) -> bool:
        # Copies of one spec, or of equal specs, are the same armed fault (as the specs were
        # when the injector held them): a copy made again after the cache was dropped still
        # finds its armed fault to disarm.
        if not isinstance(other, Armed):
            return NotImplemented
        return self.spec is other.spec or self.spec == other.spec


# Each spec's copy, by the spec's identity. An entry holds its spec, so no id is reused while it
# is cached; the cache is dropped whole once it holds this many (a worker's assays build new
# catalogues; an assay reads a few dozen specs).
_ARMED: Final[dict[int, Armed]] = {}
_ARMED_MAX: Final = 4_096


def armed(spec: FaultSpec) -> Armed:
    """The spec's copy (made on its first use)."""
    a = _ARMED.get(id(spec))
    if a is None:
        if len(_ARMED) >= _ARMED_MAX:
            _ARMED.clear()
        a = _ARMED[id(spec)] = Armed(spec)
    return a


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
    __slots__ = (
        "armed",
        "calls",
        "catalogue",
        "fault",
        "fired",
        "guard",
        "pending",
        "receipts",
        "refusals",
    )

    def __init__(
        self,
        spec: FaultSpec | None,
        catalogue: Catalogue | None = None,
        guard: Callable[[FaultSpec], str | None] | None = None,
    ) -> None:
        self.armed: dict[str, list[Armed]] = {}
        self.receipts: list[InjectionReceipt] = []
        self.fired: set[str] = set()
        self.calls = 0
        self.catalogue = catalogue
        # Checked before every injection: the injector's own credential must still allow it.
        self.guard = guard
        self.refusals: list[str] = []
        # Steps of an ordered composition, armed one at a time after their predecessor fires.
        self.pending: list[Armed] = []
        # The fault this injector was made for, as its native copy (the harness reads it).
        self.fault = armed(spec) if spec is not None else None
        if self.fault is not None:
            self._arm(self.fault)

    def _arm(self, a: Armed) -> None:
        self.armed.setdefault(a.boundary, []).append(a)

    def take(self, boundary: str, kind: str | None = None) -> FaultSpec | None:
        """The fault armed at this call, if any. Nothing is recorded until `fire`.

        The boundary's handler applies the disturbance and calls `fire` only once it took
        effect, so a receipt always stands for a disturbance that happened.
        """
        a = self.take_armed(boundary, kind)
        return a.spec if a is not None else None

    def take_armed(self, boundary: str, kind: str | None = None) -> Armed | None:
        """`take`, answering with the spec's native copy (the sandbox's handlers read it)."""
        specs = self.armed.get(boundary)
        if not specs:
            return None
        for a in specs:
            want = a.params.get("kind")
            if want is not None and want != kind:
                continue
            if self.guard is not None:
                refused = self.guard(a.spec)
                if refused is not None:
                    self.refusals.append(refused)
                    self._disarm(a)
                    return None
            return a
        return None

    def fire(self, spec: FaultSpec, call: str, now: int) -> None:
        """Record that the disturbance took effect: a receipt, then composition steps."""
        self.fire_armed(armed(spec), call, now)

    def fire_armed(self, a: Armed, call: str, now: int) -> None:
        """`fire`, given the spec's native copy."""
        self.calls += 1
        fault, boundary = a.id, a.boundary
        self.receipts.append(InjectionReceipt(fault, a.mode, boundary, a.phase, call, now))
        first = fault not in self.fired
        if first:
            self.fired.add(fault)
        if a.persistence is _TRANSIENT:
            specs = self.armed.get(boundary)
            if specs is not None and a in specs:
                self._unarm(boundary, specs, a)
        if first:
            then = a.then
            if then and self.catalogue is not None:
                self.pending.extend(armed(self.catalogue.by_id(i)) for i in then)
                self._arm(self.pending.pop(0))
            elif self.pending:
                self._arm(self.pending.pop(0))

    def _disarm(self, a: Armed) -> None:
        specs = self.armed.get(a.boundary)
        if specs is None or a not in specs:
            return
        self._unarm(a.boundary, specs, a)

    def _unarm(self, boundary: str, specs: list[Armed], a: Armed) -> None:
        if len(specs) == 1:
            del self.armed[boundary]
        else:
            specs.remove(a)

    def exercised(self, spec: FaultSpec) -> bool:
        """Whether the fault fired, with every step of its composition."""
        return self.exercised_armed(armed(spec))

    def exercised_armed(self, a: Armed) -> bool:
        """`exercised`, given the spec's native copy."""
        if a.id not in self.fired:
            return False
        if a.then and self.catalogue is not None:
            return all(step in self.fired for step in a.then)
        return True
