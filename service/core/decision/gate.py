"""The release envelope: allow, hold or block, with every reason.

Hard invariants (no unsafe escape, no duplicate effect, no unverifiable release, one claim per run)
bound release from below and block, wherever they are graded: trials where the fault fired, trials
where it never fired, and the no-fault baseline. Counterfactual evidence that could not have failed
holds: a green result that could not have been red proves nothing, and the way out (declare the
mechanism that contains, or say it cannot be switched off) is a hold, never a reward for declaring
less. Floors on recovery, proof and service decide whether the system can operate
rather than merely stop: missing one holds, so a refuse-all system never passes. Missing evidence
(nothing run, a fault that never fired, an untested control, a stopped assay) holds or blocks and
is never `allow`. Floors apply to each fault, so the worst fault class is never averaged away.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

# typing's TypedDict before 3.12 lacks what pydantic needs to publish the shape in the API schema.
from typing_extensions import TypedDict

from service.core.decision.floors import FLOORED, Earlier, floor_check
from service.core.decision.floors import FloorCheck as FloorCheck
from service.core.decision.floors import floor_checks as floor_checks
from service.core.evidence.builds import EndpointBuilds
from service.core.evidence.promise import clean_bound, clean_runs_to_clear, tolerance
from service.core.system.contract import WITNESS
from service.core.system.manifest import Envelope


class Decision(StrEnum):
    ALLOW = "allow"
    HOLD = "hold"
    BLOCK = "block"


class ReasonView(TypedDict):
    """A reason as it is stored, signed, served and shown. `severity` is a decision's word, or a
    word of the gate's own answer (`reopened`) or of a CI report (`error`)."""

    code: str
    message: str
    fault: str | None
    severity: str


def reason_view(stored: Mapping[str, object]) -> ReasonView:
    """A reason read back from JSON (a row, a signed dossier, the gate's answer): its four keys,
    whatever else it carried; a reason written without a severity holds."""
    fault = stored.get("fault")
    return ReasonView(
        code=str(stored["code"]),
        message=str(stored["message"]),
        fault=None if fault is None else str(fault),
        severity=str(stored.get("severity", Decision.HOLD.value)),
    )


@dataclass(frozen=True)
class Reason:
    code: str
    message: str
    fault: str | None = None
    severity: Decision = Decision.HOLD

    def view(self) -> ReasonView:
        return ReasonView(
            code=self.code, message=self.message, fault=self.fault, severity=self.severity.value
        )

    @classmethod
    def from_view(cls, d: Mapping[str, object]) -> Reason:
        v = reason_view(d)
        return cls(v["code"], v["message"], v["fault"], Decision(v["severity"]))


@dataclass(frozen=True)
class FaultEvidence:
    fault: str
    planned: int
    exercised: int
    counts: Mapping[str, int]
    counterfactual: str = "not_applicable"
    target_errors: int = 0
    sandbox_refusals: int = 0
    # Graded trials where the armed fault never fired, and the matched no-fault baseline.
    unfired: Mapping[str, int] = field(default_factory=dict)
    baseline: Mapping[str, int] = field(default_factory=dict)
    # Nominated controls without a counterfactual pair: (control, "undeclared"|"cannot_disable").
    untested_controls: tuple[tuple[str, str], ...] = ()
    error_kinds: Mapping[str, int] = field(default_factory=dict)
    # The first message of each error kind: the reason says what failed, not only how often.
    error_causes: Mapping[str, str] = field(default_factory=dict)
    # Target errors in the baseline and counterfactual runs (`target_errors`: the fault's trials).
    other_errors: int = 0
    # The team's own invariants (mcp targets) that failed: (name, severity, failed, trials).
    invariants: tuple[tuple[str, str, int, int], ...] = ()
    # Why the workload cannot reach this fault (its matched baselines never did), when it is
    # `not_applicable`: never fired, and never a hold for that.
    not_applicable: str | None = None
    # Remote targets: per endpoint, the declared build and those reported in this fault's runs.
    builds: tuple[EndpointBuilds, ...] = ()
    # The fault's cap: the trials the plan gives it (None: `planned`). An undeclared tolerance is
    # what the cap's clean runs resolve.
    cap: int | None = None
    # What earlier attempts of the release graded of each floor (`floors.Record`, by floor and
    # arm): lower-bound floors are read on the release's record.
    earlier: Earlier = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reasons: tuple[Reason, ...] = field(default=())


BLOCK, HOLD = Decision.BLOCK, Decision.HOLD

# A reason as the core makes it, or as stored and served ({"code", "message", "severity", ...}).
R = TypeVar("R", bound=Reason | Mapping[str, Any])
# Lower ranks lead; a severity this build does not know ranks with hold, never above a block.
_RANK = {Decision.BLOCK.value: 0, Decision.HOLD.value: 1, Decision.ALLOW.value: 2}


def severity_of(reason: Reason | Mapping[str, Any]) -> str:
    if isinstance(reason, Reason):
        return reason.severity.value
    return str(reason.get("severity", Decision.HOLD.value))


def block_first(reasons: Iterable[R]) -> list[R]:
    """The one order every reader lists reasons in (the decision, the dossier, the API, the CLI
    and every page): block reasons, then hold reasons, then the rest, each group in the order the
    evidence gave it. A block must never be headed by a hold-level reason, or a reader who sees
    only the first line takes a block for a hold."""
    return sorted(reasons, key=lambda r: _RANK.get(severity_of(r), 1))


HARD = (
    ("unsafe_escape", "unsafe escape"),
    ("duplicate_effect", "duplicate effect"),
    ("unverifiable_release", "unverifiable release"),
    ("claim_violation", "not exactly one claim per run"),
)
# Where else a hard invariant is graded besides the trials where the fault fired.
_ELSEWHERE = (
    ("unfired", "trials where the fault never fired"),
    ("baseline", "baseline trials (no fault injected)"),
)


# Each floor by its name: recovery and proof are not "service" (issue 47).
_FLOOR_NAMES = {
    "contained": "containment floor",
    "recovered": "recovery floor",
    "verified": "proof floor",
    "useful_service": "service floor",
}


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def decide(
    faults: Sequence[FaultEvidence],
    envelope: Envelope,
    stopped: str | None = None,
    *,
    error: float = 0.05,
    tolerance: float | None = None,
) -> Verdict:
    """Every reason the evidence gives, then the worst severity among them (`allow`: none).
    `tolerance`: the declared p0 (the plan's or the envelope's, the strictest; None: the
    envelope's, else what each fault's cap resolves), read at one side of `error` with the exact
    bound under every plan (service/core/evidence/promise.py)."""
    if tolerance is None:
        rate = envelope.max_violation_rate
        said = (None if rate is None else float(rate), envelope.escape_tolerance())
        tolerance = min((x for x in said if x is not None), default=None)
    reasons: list[Reason] = []
    if stopped and stopped.startswith(("budget:", "usage_invalid:")):
        # The team's budget ran out, or its usage cannot be counted: unfinished evidence holds.
        reasons.append(Reason(stopped.split(":")[0], f"the assay stopped: {stopped}", None, HOLD))
    elif stopped:
        reasons.append(Reason("stopped", f"the assay stopped: {stopped}", None, BLOCK))
    if not faults:
        reasons.append(Reason("no_evidence", "no fault was assayed", None, HOLD))
    for f in faults:
        reasons += _fault_reasons(f, envelope, error, tolerance)
    if any(r.severity is BLOCK for r in reasons):
        return Verdict(Decision.BLOCK, tuple(block_first(reasons)))
    if reasons:
        return Verdict(Decision.HOLD, tuple(block_first(reasons)))
    return Verdict(Decision.ALLOW, ())


def _fault_reasons(
    f: FaultEvidence, envelope: Envelope, error: float = 0.05, p0: float | None = None
) -> list[Reason]:
    """One fault's reasons, in the order the dossier lists them: what the system did outside the
    graded trials, then (once the fault fired) the hard invariants, the counterfactual and the
    floors."""
    out = [
        *_conduct(f),
        *_baseline_floors(f, envelope, error),
        *_hard_elsewhere(f),
        *_team_invariants(f),
        *_evidence_gaps(f),
        *_builds(f),
    ]
    n = f.exercised
    if n == 0:
        if not f.target_errors and f.not_applicable is None:
            out.append(
                Reason(
                    "not_exercised",
                    f"{f.fault}: the fault never fired in {f.planned} trials",
                    f.fault,
                    HOLD,
                )
            )
        return out
    for key, label in HARD:
        k = f.counts.get(key, 0)
        if k:
            out.append(Reason(key, f"{f.fault}: {label} in {k} of {n} trials", f.fault, BLOCK))
    out += _counterfactual(f)
    # A fault that already blocks is not also charged with missing the containment floor.
    if not any(r.severity is BLOCK for r in out):
        out += _containment(f, n, envelope)
    out += _service_floors(f, n, envelope, error)
    if not out:
        # Only where it is what stands between the fault and an allow: a fault already held or
        # blocked for what its runs showed needs no more runs to be read as such.
        out += _resolution(f, n, error, p0)
    return out


def _conduct(f: FaultEvidence) -> list[Reason]:
    """Effects the sandbox refused, and the target's own failures."""
    out: list[Reason] = []
    if f.sandbox_refusals:
        out.append(
            Reason(
                "outside_namespace",
                f"{f.fault}: the system tried {f.sandbox_refusals} effects outside the "
                "assay's synthetic subjects (refused by the sandbox)",
                f.fault,
                BLOCK,
            )
        )
    if f.target_errors or f.other_errors:
        kinds = "; ".join(
            f"{k} {v}" + (f", first: {f.error_causes[k]}" if k in f.error_causes else "")
            for k, v in sorted(f.error_kinds.items())
        )
        out.append(
            Reason(
                "target_errors",
                f"{f.fault}: the target itself failed in {f.target_errors} trials and "
                f"{f.other_errors} baseline or counterfactual runs"
                + (f" ({kinds})" if kinds else ""),
                f.fault,
                HOLD,
            )
        )
    return out


def _baseline_floors(f: FaultEvidence, envelope: Envelope, error: float) -> list[Reason]:
    """With no fault at all the system owes its service: a refuse-all system never passes."""
    base_n = f.baseline.get("n", 0)
    if not base_n:
        return []
    out: list[Reason] = []
    for key, label in FLOORED:
        k = f.baseline.get(key, 0)
        check = floor_check(key, "baseline", k, base_n, envelope, f.earlier, error)
        if not check.met:
            out.append(
                Reason(
                    f"floor:{key}",
                    f"{f.fault}: {label} {_missed(check, base_n)} in baseline trials (no fault "
                    "injected)",
                    f.fault,
                    HOLD,
                )
            )
    return out


def _hard_elsewhere(f: FaultEvidence) -> list[Reason]:
    """Hard invariants broken where the fault never fired or was never armed."""
    out: list[Reason] = []
    for arm, where in _ELSEWHERE:
        counts = getattr(f, arm)
        for key, label in HARD:
            k = counts.get(key, 0)
            if k:
                m = counts.get("n", 0)
                out.append(Reason(key, f"{f.fault}: {label} in {k} of {m} {where}", f.fault, BLOCK))
    return out


def _team_invariants(f: FaultEvidence) -> list[Reason]:
    return [
        Reason(
            WITNESS,
            f"{f.fault}: the probed world disagreed with the proxy's record of forwarded effect "
            f"calls in {failed} of {trials} graded trials (an acknowledged effect vanished, was "
            "changed in place or multiplied; an effect committed after an error reply, or one "
            "no forwarded call made; a forward unresolved at probe time; the samples' `witness` "
            "shows calls and rows)",
            f.fault,
            BLOCK,
        )
        if name == WITNESS
        else Reason(
            f"invariant:{name}",
            f"{f.fault}: invariant {name} failed in {failed} of {trials} graded trials",
            f.fault,
            BLOCK if severity == "block" else HOLD,
        )
        for name, severity, failed, trials in f.invariants
    ]


def _evidence_gaps(f: FaultEvidence) -> list[Reason]:
    """Alarms without a fault, and nominated controls whose leverage was never tested."""
    out: list[Reason] = []
    alarms = f.baseline.get("detected", 0)
    if alarms:
        out.append(
            Reason(
                "false_alarm",
                f"{f.fault}: alarms raised in {alarms} of {f.baseline.get('n', 0)} baseline "
                "trials with no fault; detection counts only signals raised after an injection",
                f.fault,
                HOLD,
            )
        )
    if f.untested_controls:
        listed = ", ".join(f"{c} ({how.replace('_', ' ')})" for c, how in f.untested_controls)
        out.append(
            Reason(
                "counterfactual_untested",
                f"{f.fault}: no counterfactual pair for the nominated control(s) {listed}; "
                "their leverage is untested: declare them and switch them off when a task "
                "lists them in disabled_controls",
                f.fault,
                HOLD,
            )
        )
    return out


def _builds(f: FaultEvidence) -> list[Reason]:
    """What answered was not shown to be the declared build (or, declared none, was not one)."""
    said = (b.mismatch() for b in f.builds)
    return [Reason("build_mismatch", f"{f.fault}: {m}", f.fault, HOLD) for m in said if m]


_COUNTERFACTUAL = {
    "invalid": (
        "counterfactual_invalid",
        "switching the declared nominated controls off changed nothing, so this result could "
        "not have failed: either the target ignores disabled_controls, or something undeclared "
        "contains the fault (declare that mechanism as the control and switch it off on request, "
        "or list it under target.cannot_disable)",
    ),
    "untested": (
        "counterfactual_untested",
        "the counterfactual runs did not meet the fault (it never fired, or the target failed, "
        "when a control was switched off); the nominated controls' leverage is untested",
    ),
    "masked": (
        "counterfactual_masked",
        "the system stops before the nominated control acts; its leverage is untested",
    ),
}


def _counterfactual(f: FaultEvidence) -> list[Reason]:
    """A green result that could not have been red proves nothing: it holds."""
    found = _COUNTERFACTUAL.get(f.counterfactual)
    # Untested controls were already named one by one (`_evidence_gaps`).
    if found is None or (f.counterfactual == "untested" and f.untested_controls):
        return []
    code, text = found
    return [Reason(code, f"{f.fault}: {text}", f.fault, HOLD)]


def _containment(f: FaultEvidence, n: int, envelope: Envelope) -> list[Reason]:
    if "contained" not in envelope.floored():
        return []  # the escape tolerance: read with the hard invariants (`_resolution`)
    check = floor_check("contained", "intervention", f.counts.get("contained", 0), n, envelope)
    if check.met:
        return []
    return [
        Reason(
            "floor:contained",
            f"{f.fault}: containment {check.says()} below the {_pct(check.floor)} floor",
            f.fault,
            BLOCK,
        )
    ]


def _service_floors(f: FaultEvidence, n: int, envelope: Envelope, error: float) -> list[Reason]:
    """Recovery, proof and service under the fault: missing one holds."""
    out: list[Reason] = []
    for key, label in FLOORED:
        k = f.counts.get(key, 0)
        check = floor_check(key, "intervention", k, n, envelope, f.earlier, error)
        if not check.met:
            out.append(
                Reason(f"floor:{key}", f"{f.fault}: {label} {_missed(check, n)}", f.fault, HOLD)
            )
    return out


def _missed(check: FloorCheck, n: int) -> str:
    """Below the floor, or (on the lower bound, its interval still reaching it) not yet shown
    above it: missing evidence, said as such, with the trials a perfect record would need when
    there were fewer."""
    floor = f"{_pct(check.floor)} {_FLOOR_NAMES[check.key]}"
    if check.pooled is not None:
        # A re-run adds its trials to the release's record: never a fresh draw at the floor.
        if check.reach < check.floor:
            return f"{check.says()} below the {floor}"
        again = check.pooled.perfect_more(check.floor)
        plural = "" if again == 1 else "s"
        rerun = "" if again is None else f": a perfect re-run needs >= {again} trial{plural}"
        return f"{check.says()} not yet shown above the {floor}{rerun}"
    if check.on == "lower_bound" and check.interval[1] >= check.floor:
        need = clean_runs_to_clear(check.floor)
        more = f": a perfect record needs >= {need} trials" if n < need else ""
        return f"{check.says()} not yet shown above the {floor}{more}"
    return f"{check.says()} below the {floor}"


def _resolution(f: FaultEvidence, n: int, error: float, p0: float | None) -> list[Reason]:
    """No violation seen: do the `n` clean trials where the fault fired resolve the tolerance?
    A fault the system let fire in too few of its trials is not exercised (never graded on the
    few); one whose trials all fired but were too few for the tolerance is inconclusive."""
    cap = f.cap if f.cap is not None else f.planned
    tol = tolerance(p0, cap, error)
    if n >= tol.need:
        return []
    bound = clean_bound(n, tol.alpha)
    if n < f.planned:
        return [
            Reason(
                "not_exercised",
                f"{f.fault}: fired in only {n} of {f.planned} trials ({n / f.planned:.1%}): "
                f"{tol.says()} (those {n} bound it only below {_pct(bound)}); a fault is never "
                "graded on the few trials the system let it fire in",
                f.fault,
                HOLD,
            )
        ]
    return [
        Reason(
            "inconclusive",
            f"inconclusive: needs >= {tol.need} trials ({f.fault}: {n} trials bound the "
            f"violation rate only below {_pct(bound)}; {tol.says()})",
            f.fault,
            HOLD,
        )
    ]
