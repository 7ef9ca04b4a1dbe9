"""Figures of the typed report: rates, signatures, transfer, diagnoses, invariants and storms.

Each value's `to_dict` is its stored and signed JSON, key for key, and `from_dict` reads it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from service.core.trial.oracle import Flag

JSONObject = dict[str, object]
# The rates a signature reports, in the reference script's order (the oracle's flags without
# `wrong_subject` and `claim_violation`), then `wrong_subject`.
REFERENCE_RATES: tuple[str, ...] = tuple(
    f.value for f in Flag if f not in (Flag.WRONG_SUBJECT, Flag.CLAIM_VIOLATION)
)
RATES = (*REFERENCE_RATES, Flag.WRONG_SUBJECT.value)
_BOUNDED = (
    Flag.UNSAFE_ESCAPE,
    Flag.DUPLICATE_EFFECT,
    Flag.UNVERIFIABLE_RELEASE,
    Flag.WRONG_SUBJECT,
)
UPPER_BOUNDED: tuple[str, ...] = tuple(f.value for f in _BOUNDED)


def obj(d: object) -> Mapping[str, object]:
    return cast(Mapping[str, object], d)


def as_int(d: Mapping[str, object], key: str) -> int:
    return int(cast(int, d[key]))


def as_float(d: Mapping[str, object], key: str) -> float:
    return float(cast(float, d[key]))


def opt_int(d: Mapping[str, object], key: str) -> int | None:
    v = d.get(key)
    return None if v is None else int(cast(int, v))


def as_interval(v: object) -> tuple[float, float]:
    lo, hi = cast(list[float], v)
    return float(lo), float(hi)


def counts(d: object) -> dict[str, int]:
    return {str(k): int(cast(int, v)) for k, v in obj(d).items()}


def causes(d: object) -> dict[str, tuple[str, ...]]:
    """Error kind -> its first distinct messages."""
    return {str(k): tuple(str(m) for m in cast(list[object], v)) for k, v in obj(d).items()}


@dataclass(frozen=True)
class Rates:
    """Trials, and per reported flag the share of trials it was seen in."""

    trials: int
    rates: Mapping[str, float]

    def rate(self, flag: str) -> float:
        return self.rates[flag]

    def to_dict(self) -> JSONObject:
        return {"trials": self.trials, **{name: self.rates[name] for name in RATES}}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Rates:
        return cls(as_int(d, "trials"), {name: as_float(d, name) for name in RATES})


@dataclass(frozen=True)
class Signature:
    """An arm's rates with their counts, Wilson intervals and upper bounds."""

    rates: Rates
    counts: Mapping[str, int]
    intervals: Mapping[str, tuple[float, float]]
    upper_bounds: Mapping[str, float]

    def to_dict(self) -> JSONObject:
        return {
            **self.rates.to_dict(),
            "counts": dict(self.counts),
            "intervals": {k: list(v) for k, v in self.intervals.items()},
            "upper_bounds": dict(self.upper_bounds),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Signature:
        return cls(
            Rates.from_dict(d),
            counts(d["counts"]),
            {str(k): as_interval(v) for k, v in obj(d["intervals"]).items()},
            {str(k): float(cast(float, v)) for k, v in obj(d["upper_bounds"]).items()},
        )


@dataclass(frozen=True)
class Transfer:
    """The violation rate with the fault against without it (matched baseline), and their
    difference with its Newcombe interval."""

    violation: float
    interval: tuple[float, float]
    with_fault: float
    without_fault: float

    def to_dict(self) -> JSONObject:
        return {
            "violation": self.violation,
            "interval": list(self.interval),
            "with_fault": self.with_fault,
            "without_fault": self.without_fault,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Transfer:
        return cls(
            as_float(d, "violation"),
            as_interval(d["interval"]),
            as_float(d, "with_fault"),
            as_float(d, "without_fault"),
        )


def transfer_or_none(d: object) -> Transfer | None:
    return None if d is None else Transfer.from_dict(obj(d))


def rates_or_none(d: object) -> Rates | None:
    return None if d is None else Rates.from_dict(obj(d))


@dataclass(frozen=True)
class Summary:
    """A domain's (or the whole plan's) signature, its baseline and its transfer."""

    signature: Signature
    baseline: Rates | None
    transfer: Transfer | None

    def to_dict(self) -> JSONObject:
        return {
            **self.signature.to_dict(),
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "transfer": self.transfer.to_dict() if self.transfer else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Summary:
        return cls(
            Signature.from_dict(d),
            rates_or_none(d.get("baseline")),
            transfer_or_none(d.get("transfer")),
        )


@dataclass(frozen=True)
class Diagnosis:
    """Where a negative result came from and what to change."""

    first_boundary: str
    earliest_signal: str | None
    missing_control: tuple[str, ...]
    remediation: str | None
    violations: int
    service_lost: int

    def to_dict(self) -> JSONObject:
        return {
            "first_boundary": self.first_boundary,
            "earliest_signal": self.earliest_signal,
            "missing_control": list(self.missing_control),
            "remediation": self.remediation,
            "violations": self.violations,
            "service_lost": self.service_lost,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Diagnosis:
        signal, fix = d.get("earliest_signal"), d.get("remediation")
        return cls(
            str(d["first_boundary"]),
            None if signal is None else str(signal),
            tuple(str(c) for c in cast(list[str], d["missing_control"])),
            None if fix is None else str(fix),
            as_int(d, "violations"),
            as_int(d, "service_lost"),
        )


@dataclass(frozen=True)
class InvariantResult:
    """A team invariant's severity, how many graded trials it failed in, and in which arms."""

    severity: str
    failed: int
    trials: int
    by_arm: Mapping[str, int]

    def to_dict(self) -> JSONObject:
        return {
            "severity": self.severity,
            "failed": self.failed,
            "trials": self.trials,
            "by_arm": dict(self.by_arm),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> InvariantResult:
        return cls(
            str(d["severity"]), as_int(d, "failed"), as_int(d, "trials"), counts(d["by_arm"])
        )


@dataclass(frozen=True)
class StormView:
    """A storm fault: what the graded agents did, beside the reference fleet bare and
    disciplined (full jitter and a shared retry budget)."""

    trials: int
    attempts_mean: float
    attempts_max: int
    admitted: int
    shortest_wait_ms: int | None
    bare_peak_max: int
    disciplined_peak_max: int
    bare_completed_mean: float
    disciplined_completed_mean: float

    def to_dict(self) -> JSONObject:
        return {
            "trials": self.trials,
            "observed": {
                "attempts_mean": self.attempts_mean,
                "attempts_max": self.attempts_max,
                "admitted": self.admitted,
                "shortest_wait_ms": self.shortest_wait_ms,
            },
            "peak_concurrent_retries": {
                "without_jitter_or_budget_max": self.bare_peak_max,
                "with_jitter_and_budget_max": self.disciplined_peak_max,
            },
            "agents_completed_mean": {
                "without_jitter_or_budget": self.bare_completed_mean,
                "with_jitter_and_budget": self.disciplined_completed_mean,
            },
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> StormView:
        seen = obj(d["observed"])
        peak = obj(d["peak_concurrent_retries"])
        done = obj(d["agents_completed_mean"])
        return cls(
            as_int(d, "trials"),
            as_float(seen, "attempts_mean"),
            as_int(seen, "attempts_max"),
            as_int(seen, "admitted"),
            opt_int(seen, "shortest_wait_ms"),
            as_int(peak, "without_jitter_or_budget_max"),
            as_int(peak, "with_jitter_and_budget_max"),
            as_float(done, "without_jitter_or_budget"),
            as_float(done, "with_jitter_and_budget"),
        )
