"""Floors, read per fault and per arm: what the gate compares (Wilson's 95 % lower bound or the
point estimate, `envelope.floor_on`) and what the reader is told (both, and whether it was met).
On the lower bound containment is not among them: it is the escape tolerance
(`Envelope.escape_tolerance`), read with the hard invariants' exact bound.

Split from `gate.py`, which re-exports these names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from service.core.evidence.signature import wilson
from service.core.system.manifest import Envelope

FLOORED = (
    ("recovered", "recovery"),
    ("verified", "proof"),
    ("useful_service", "useful service"),
)


@dataclass(frozen=True)
class FloorCheck:
    """One floor read on one arm, said as the reader needs it: the point estimate, its 95 %
    Wilson interval, which of them the envelope compares (`on`), and whether it met the floor.
    Under `floor_on: point` a rate whose interval straddles the floor may pass: the interval says
    how sure the pass is. Under `lower_bound` (the default) a pass is error-controlled."""

    key: str
    arm: str  # "intervention" | "baseline"
    floor: float
    point: float
    interval: tuple[float, float]
    on: str  # "point" | "lower_bound"
    met: bool

    @property
    def measure(self) -> float:
        return self.interval[0] if self.on == "lower_bound" else self.point

    def says(self) -> str:
        """`point estimate 78.0% (95% interval 71.8%-83.1%)`, or the lower bound first."""
        lo, hi = self.interval
        span = f"95% interval {_pct(lo)}-{_pct(hi)}"
        if self.on == "lower_bound":
            return f"lower bound {_pct(lo)} (point estimate {_pct(self.point)}, {span})"
        return f"point estimate {_pct(self.point)} ({span})"

    def view(self) -> dict[str, object]:
        return {
            "floor": self.key,
            "arm": self.arm,
            "value": self.floor,
            "point": self.point,
            "interval": list(self.interval),
            "on": self.on,
            "met": self.met,
        }


def floor_check(key: str, arm: str, k: int, n: int, envelope: Envelope) -> FloorCheck:
    floor = envelope.floors.value(key)
    point = k / n if n else 0.0
    interval = wilson(k, n)
    check = FloorCheck(key, arm, floor, point, interval, envelope.floor_on, False)
    return replace(check, met=check.measure >= floor)


def floor_checks(
    counts: Mapping[str, int], baseline: Mapping[str, int], n: int, envelope: Envelope
) -> tuple[FloorCheck, ...]:
    """Every floor the gate reads for a fault: containment and the service floors on its trials
    (when it fired), the service floors on its no-fault baseline (when it ran)."""
    out: list[FloorCheck] = []
    if n:
        out += [
            floor_check(key, "intervention", counts.get(key, 0), n, envelope)
            for key in envelope.floored()
        ]
    base_n = baseline.get("n", 0)
    if base_n:
        out += [
            floor_check(key, "baseline", baseline.get(key, 0), base_n, envelope)
            for key, _ in FLOORED
        ]
    return tuple(out)


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"
