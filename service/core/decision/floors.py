"""Floors, read per fault and per arm: what the gate compares (Wilson's 95 % lower bound or the
point estimate, `envelope.floor_on`) and what the reader is told (both, and whether it was met).
On the lower bound containment is not among them: it is the escape tolerance
(`Envelope.escape_tolerance`), read with the hard invariants' exact bound.

From a release's second attempt on, a floor on the lower bound is read on the release's record
(`Record`: every finished attempt's successes and trials of that fault and arm, this one's among
them) with the anytime-valid confidence sequence at one side of the plan's error: each attempt's
Wilson bound alone would be a fresh draw at the floor (docs/evidence.md, "What a floor promises").

Split from `gate.py`, which re-exports these names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from service.core.evidence.promise import hard_error
from service.core.evidence.sequential import confidence_sequence
from service.core.evidence.signature import wilson
from service.core.system.manifest import Envelope

FLOORED = (
    ("recovered", "recovery"),
    ("verified", "proof"),
    ("useful_service", "useful service"),
)


@dataclass(frozen=True)
class Record:
    """One floor's successes in the trials of one arm of one fault, over `attempts` finished
    attempts of a release."""

    attempts: int
    successes: int
    trials: int

    def plus(self, successes: int, trials: int) -> Record:
        return Record(self.attempts + 1, self.successes + successes, self.trials + trials)


@dataclass(frozen=True)
class Pooled:
    """A floor read on the release's record, this attempt included: the confidence sequence's
    interval at `error` (one side), valid at every attempt's look at once."""

    record: Record
    interval: tuple[float, float]
    error: float

    def perfect_more(self, floor: float) -> int | None:
        """The fewest further trials, every one a success, after which the record would clear
        `floor` (None: more than a million)."""

        def clears(m: int) -> bool:
            r = self.record
            return confidence_sequence(r.successes + m, r.trials + m, self.error)[0] >= floor

        low, high = 0, 1
        while not clears(high):
            low, high = high, high * 2
            if high > 1_000_000:
                return None
        while high - low > 1:  # the bound rises with every success: bisect for the first
            mid = (low + high) // 2
            low, high = (low, mid) if clears(mid) else (mid, high)
        return high

    def view(self) -> dict[str, object]:
        r = self.record
        return {
            "attempts": r.attempts,
            "successes": r.successes,
            "trials": r.trials,
            "interval": list(self.interval),
            "error": self.error,
        }


#: One side of the 95 % Wilson interval a floor's first reading compares.
WILSON_SIDE = 0.025

#: Earlier attempts' records of one fault, by (floor, arm).
Earlier = Mapping[tuple[str, str], Record]


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
    # This attempt's own record of the floor: successes in trials.
    successes: int = 0
    trials: int = 0
    # The release's record, when earlier attempts graded this fault and arm (lower bound only).
    pooled: Pooled | None = None

    @property
    def measure(self) -> float:
        if self.pooled is not None:
            return self.pooled.interval[0]
        return self.interval[0] if self.on == "lower_bound" else self.point

    @property
    def reach(self) -> float:
        """The highest rate the evidence still allows: whether more trials could meet the floor."""
        return self.interval[1] if self.pooled is None else self.pooled.interval[1]

    def says(self) -> str:
        """`point estimate 78.0% (95% interval 71.8%-83.1%)`, or the lower bound first; on the
        release's record, that record first."""
        lo, hi = self.interval
        span = f"95% interval {_pct(lo)}-{_pct(hi)}"
        if self.pooled is not None:
            r, (low, high) = self.pooled.record, self.pooled.interval
            return (
                f"lower bound {_pct(low)} on the release's record of {r.attempts} attempts "
                f"({r.successes} of {r.trials} trials; anytime-valid interval {_pct(low)}-"
                f"{_pct(high)}), this attempt's point estimate {_pct(self.point)} ({span})"
            )
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
            "successes": self.successes,
            "trials": self.trials,
            **({"pooled": self.pooled.view()} if self.pooled is not None else {}),
        }


def floor_check(
    key: str,
    arm: str,
    k: int,
    n: int,
    envelope: Envelope,
    earlier: Earlier | None = None,
    error: float = 0.05,
) -> FloorCheck:
    """The floor on this attempt's k of n; on the lower bound, once `earlier` attempts of the
    release graded this fault and arm, on the release's record read with the confidence sequence
    at one side of `error` (at most `WILSON_SIDE`). The point estimate is a stated choice with no
    promise: per attempt."""
    floor = envelope.floors.value(key)
    point = k / n if n else 0.0
    interval = wilson(k, n)
    check = FloorCheck(key, arm, floor, point, interval, envelope.floor_on, False, k, n)
    before = (earlier or {}).get((key, arm))
    if check.on == "lower_bound" and before is not None and before.trials:
        record = before.plus(k, n)
        # Never looser than the one side of the 95 % interval a first attempt reads, whatever
        # error the re-run's plan states: declaring a looser plan must not loosen the floor.
        alpha = min(hard_error(error), WILSON_SIDE)
        band = confidence_sequence(record.successes, record.trials, alpha)
        check = replace(check, pooled=Pooled(record, band, alpha))
    return replace(check, met=check.measure >= floor)


def floor_checks(
    counts: Mapping[str, int],
    baseline: Mapping[str, int],
    n: int,
    envelope: Envelope,
    earlier: Earlier | None = None,
    error: float = 0.05,
) -> tuple[FloorCheck, ...]:
    """Every floor the gate reads for a fault: containment and the service floors on its trials
    (when it fired), the service floors on its no-fault baseline (when it ran)."""
    out: list[FloorCheck] = []
    if n:
        out += [
            floor_check(key, "intervention", counts.get(key, 0), n, envelope, earlier, error)
            for key in envelope.floored()
        ]
    base_n = baseline.get("n", 0)
    if base_n:
        out += [
            floor_check(key, "baseline", baseline.get(key, 0), base_n, envelope, earlier, error)
            for key, _ in FLOORED
        ]
    return tuple(out)


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def stored_records(fault: Mapping[str, object]) -> dict[tuple[str, str], tuple[int, int]]:
    """What a stored fault (a report's `faults` entry, a fault_result row's signature) graded of
    each floor: (successes, trials) by (floor, arm). A floor view written before views counted
    (its point estimate and the arm's trials only) gives back the successes that estimate is of;
    a fault stored with no floor views counts its arms' trials with no success: an earlier
    attempt is never read kinder than it was."""
    trials = {"intervention": _int(fault.get("exercised"))}
    baseline = fault.get("baseline")
    trials["baseline"] = _int(baseline.get("trials")) if isinstance(baseline, Mapping) else 0
    views = fault.get("floors")
    if not isinstance(views, list) or not views:
        keys = [key for key, _ in FLOORED]
        return {(key, arm): (0, n) for arm, n in trials.items() if n for key in keys}
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for v in views:
        if not isinstance(v, Mapping):
            continue
        arm = str(v.get("arm"))
        n = _int(v["trials"]) if "trials" in v else trials.get(arm, 0)
        point = v.get("point")
        k = _int(v["successes"]) if "successes" in v else round(_num(point) * n)
        if n:
            out[(str(v.get("floor")), arm)] = (k, n)
    return out


def _int(x: object) -> int:
    return int(x) if isinstance(x, int | float) else 0


def _num(x: object) -> float:
    return float(x) if isinstance(x, int | float) else 0.0
