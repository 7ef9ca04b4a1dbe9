"""Counterfactual pairs: which nominated controls a fault's pairs switch off, or why none."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import cast

from service.core.evidence.figures import (
    JSONObject,
    Rates,
    as_float,
    as_int,
    as_interval,
    obj,
    opt_int,
)
from service.core.evidence.tally import Tally
from service.core.faults.catalogue import FaultSpec
from service.core.system.manifest import Manifest


@dataclass(frozen=True)
class Removal:
    """The counterfactual pairs a fault runs: each switchable nominated control alone, then all
    of them together; and why any nominated control has no pair."""

    status: str  # "not_applicable", "untested" (no switchable nominated control) or "run"
    # Per nominated control: "switchable", "undeclared" or "cannot_disable".
    controls: tuple[tuple[str, str], ...] = ()
    switchable: frozenset[str] = frozenset()

    def pairs(self) -> tuple[tuple[str, frozenset[str]], ...]:
        """(arm name, controls removed) for every pair to run."""
        return self._pairs

    # Built once: every sampled trial of the fault asks for them.
    @cached_property
    def _pairs(self) -> tuple[tuple[str, frozenset[str]], ...]:
        if self.status != "run":
            return ()
        whole = (("counterfactual", self.switchable),)
        if len(self.switchable) == 1:
            return whole
        singles = tuple((f"counterfactual:{c}", frozenset({c})) for c in sorted(self.switchable))
        return singles + whole

    def arm_of(self, control: str) -> str:
        return "counterfactual" if len(self.switchable) == 1 else f"counterfactual:{control}"


def removal(manifest: Manifest, spec: FaultSpec) -> Removal:
    """Which controls a fault's counterfactual pairs switch off, or why they cannot."""
    if not spec.nominated_control:
        return Removal("not_applicable")
    declared = {c.value for c in manifest.controls.enabled()}
    cannot = {c.value for c in manifest.target.cannot_disable}
    controls: list[tuple[str, str]] = []
    for c in spec.nominated_control:
        if c.value not in declared:
            controls.append((c.value, "undeclared"))
        elif c.value in cannot:
            controls.append((c.value, "cannot_disable"))
        else:
            controls.append((c.value, "switchable"))
    switchable = frozenset(c for c, how in controls if how == "switchable")
    return Removal("run" if switchable else "untested", tuple(controls), switchable)


@dataclass(frozen=True)
class ControlPair:
    """What one nominated control's own pair showed (`carries`, `no_effect`), or why it has
    none (`untested`, `undeclared`, `cannot_disable`)."""

    status: str
    trials: int | None = None
    difference: float | None = None
    interval: tuple[float, float] | None = None

    def to_dict(self) -> JSONObject:
        if self.interval is None:
            return {"status": self.status}
        return {
            "status": self.status,
            "trials": self.trials,
            "difference": self.difference,
            "interval": list(self.interval),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> ControlPair:
        if "interval" not in d:
            return cls(str(d["status"]))
        return cls(
            str(d["status"]),
            as_int(d, "trials"),
            as_float(d, "difference"),
            as_interval(d["interval"]),
        )


@dataclass(frozen=True)
class Sensitivity:
    """The naive agent's pair: whether the oracle saw the predicted violation there."""

    status: str
    trials: int
    predicted_transfer: str
    seen: int
    signature: Rates

    def to_dict(self) -> JSONObject:
        return {
            "status": self.status,
            "trials": self.trials,
            "predicted_transfer": self.predicted_transfer,
            "seen": self.seen,
            "signature": self.signature.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Sensitivity:
        return cls(
            str(d["status"]),
            as_int(d, "trials"),
            str(d["predicted_transfer"]),
            as_int(d, "seen"),
            Rates.from_dict(obj(d["signature"])),
        )


@dataclass(frozen=True)
class PairFigures:
    """The whole-set pair's figures: the predicted violation without and with the controls."""

    trials: int
    rate_without_control: float
    rate_with_control: float
    difference: float
    interval: tuple[float, float]
    signature_without_control: Rates

    def to_dict(self) -> JSONObject:
        return {
            "trials": self.trials,
            "rate_without_control": self.rate_without_control,
            "rate_with_control": self.rate_with_control,
            "difference": self.difference,
            "interval": list(self.interval),
            "signature_without_control": self.signature_without_control.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> PairFigures:
        return cls(
            as_int(d, "trials"),
            as_float(d, "rate_without_control"),
            as_float(d, "rate_with_control"),
            as_float(d, "difference"),
            as_interval(d["interval"]),
            Rates.from_dict(obj(d["signature_without_control"])),
        )


@dataclass(frozen=True)
class Counterfactual:
    """Whether the fault's result could have failed: `valid`, `invalid`, `masked`, `untested`,
    `skipped` or `not_applicable`, with the pairs that show it."""

    status: str
    removed: tuple[str, ...]
    predicted_transfer: str | None
    controls: Mapping[str, ControlPair]
    # Counterfactual runs attempted and those that missed the fault; set once the pairs ran.
    runs: int | None = None
    missed: int | None = None
    pair: PairFigures | None = None
    sensitivity: Sensitivity | None = None
    # Under `attribution: reported`: the control pairs' own status, reported beside `valid`.
    pair_status: str | None = None

    def to_dict(self) -> JSONObject:
        out: JSONObject = {
            "status": self.status,
            "removed": list(self.removed),
            "predicted_transfer": self.predicted_transfer,
            "controls": {c: p.to_dict() for c, p in self.controls.items()},
        }
        if self.runs is not None:
            out["runs"] = self.runs
            out["missed"] = self.missed
        if self.pair is not None:
            out.update(self.pair.to_dict())
        if self.sensitivity is not None:
            out["sensitivity"] = self.sensitivity.to_dict()
        if self.pair_status is not None:
            out["pair_status"] = self.pair_status
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Counterfactual:
        pt = d.get("predicted_transfer")
        sens = d.get("sensitivity")
        ps = d.get("pair_status")
        return cls(
            str(d["status"]),
            tuple(str(c) for c in cast(list[str], d.get("removed") or [])),
            None if pt is None else str(pt),
            {str(c): ControlPair.from_dict(obj(p)) for c, p in obj(d["controls"]).items()},
            opt_int(d, "runs"),
            opt_int(d, "missed"),
            PairFigures.from_dict(d) if "rate_without_control" in d else None,
            None if sens is None else Sensitivity.from_dict(obj(sens)),
            None if ps is None else str(ps),
        )


def whole_transfer(spec: FaultSpec, t: Tally, cf: Counterfactual) -> bool:
    """Whether the declared nominated controls' own pair accounts for the whole predicted
    transfer: with them switched off the predicted violation came through in as many runs as
    the naive agent of the sensitivity pair shows under the same fault (every run, for targets
    without one). Then a nominated control the system truly lacks (undeclared) contains nothing
    that is not already explained, and its missing pair is no hold. A control the system has
    but does not declare cannot hide here: it would hold back part of the transfer."""
    pt = spec.predicted_transfer
    off = t.arms.get("counterfactual")
    if pt is None or cf.status != "valid" or off is None or off.n == 0:
        return False
    naive = t.arms.get("sensitivity")
    reach = naive.count(pt) / naive.n if naive is not None and naive.n else 1.0
    return reach > 0 and off.count(pt) / off.n >= reach
