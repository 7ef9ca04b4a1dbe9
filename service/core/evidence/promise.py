"""The promise per release, and the one reading of a clean record that keeps it.

For every hard invariant the gate promises P(allow | true violation rate >= p0) <= alpha, where
p0 is the tolerance the plan declares (`plan.max_violation_rate`, the envelope's, or the
organisation's, the strictest of them) and, when none is declared, the rate the fault's cap
resolves; alpha is one side of the plan's two-sided `error` (2.5 % at the default 5 %).

Any violation blocks, so a fault is allowed only on a record of clean runs, and the chance of
that record is exact: a rate p leaves n runs clean with probability (1 - p)^n, however the runs
were scheduled or looked at. The bound a record of n clean runs gives is therefore
Clopper-Pearson's one-sided upper bound for zero events, 1 - alpha^(1/n), and it needs no
correction for looking after every trial (a sequential plan) or for several attempts of one
release (a violation in any attempt blocks the release for good: service/core/decision/release.py).
Wilson's score bound, read before, is looser than its stated level at small n (2.8 % at a 0.15
tolerance, 5.1 % at six trials).

The runs that count are the ones where the fault fired: an agent that lets a fault fire in two
trials of two hundred has shown nothing about the fault, so a fault whose fired runs do not
resolve p0 holds (`not_exercised`, naming the fired count), never graded on the few.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.core.errors import ManifestInvalid, PlanInvalid
from service.core.evidence.signature import wilson
from service.core.faults.plan import AssayPlan
from service.core.system.manifest import Envelope

# Floors and bounds are read to this many digits: a rate the cap resolves must resolve at the cap
# whatever the floating point does to 1 - (1 - alpha^(1/n))^n.
_SLACK = 1e-9


def hard_error(error: float) -> float:
    """alpha for hard invariants: one side of the plan's two-sided error."""
    return error / 2


def clean_bound(n: int, alpha: float) -> float:
    """Clopper-Pearson's exact one-sided upper bound on a rate after `n` runs without an event:
    the largest p for which (1 - p)^n > alpha."""
    if n <= 0:
        return 1.0
    return -math.expm1(math.log(alpha) / n)


# More runs than any plan may cap a fault at: "never", as a number every comparison reads right.
NEVER = 2**62


def runs_to_resolve(p0: float, alpha: float) -> int:
    """Clean runs before the exact bound falls to `p0`: the least n with (1 - p0)^n <= alpha
    (NEVER for a rate too small for any count of runs to show)."""
    if p0 >= 1.0 or alpha >= 1.0:
        return 1
    if p0 <= 0.0 or alpha <= 0.0:
        return NEVER
    per_run = math.log1p(-p0)
    if per_run == 0.0:
        return NEVER
    n = math.log(alpha) / per_run
    return NEVER if not n < NEVER else max(1, math.ceil(n - _SLACK))


def allow_chance(rate: float, runs: int) -> float:
    """P(allow) of an agent violating at `rate` per run, allowed only on `runs` clean runs."""
    return (1.0 - rate) ** runs


@dataclass(frozen=True)
class Tolerance:
    """The tolerance p0 a fault is judged at, and the fired runs that resolve it."""

    rate: float
    alpha: float
    declared: bool
    need: int
    field: str | None = None  # where a declared p0 was set

    def says(self) -> str:
        kind = "declared" if self.declared else "the plan's cap resolves"
        return (
            f"a {self.rate:.2%} violation rate ({kind}) at {self.alpha:.1%} needs {self.need} "
            "clean trials where the fault fired"
        )


def declared_rate(plan: AssayPlan, envelope: Envelope) -> tuple[float, str] | None:
    """The strictest declared tolerance and where it was set (the envelope carries the
    organisation's when its policy tightened it), or None."""
    mvr = plan.max_violation_rate
    return strictest(None if mvr is None else float(mvr), envelope)


def strictest(plan_rate: float | None, envelope: Envelope) -> tuple[float, str] | None:
    """The strictest of a plan's declared rate and the envelope's (its `max_violation_rate`, or
    the unsafe-escape rate a containment floor on the lower bound declares), and where it was
    set: the one reading of a declared p0, for the gate and the sequential rule alike."""
    found: list[tuple[float, str]] = []
    if plan_rate is not None:
        found.append((plan_rate, "plan.max_violation_rate"))
    if envelope.max_violation_rate is not None:
        found.append((float(envelope.max_violation_rate), "manifest.envelope.max_violation_rate"))
    escape = envelope.escape_tolerance()
    if escape is not None:
        found.append((escape, "manifest.envelope.floors.contained"))
    return min(found) if found else None


def tolerance(
    declared: float | None, cap: int, error: float, field: str | None = None
) -> Tolerance:
    """The tolerance of a fault whose cap is `cap` trials: the declared rate, or what the cap's
    clean runs resolve."""
    alpha = hard_error(error)
    if declared is None:
        return Tolerance(clean_bound(cap, alpha), alpha, False, max(cap, 1))
    return Tolerance(declared, alpha, True, runs_to_resolve(declared, alpha), field)


def tolerance_of(plan: AssayPlan, envelope: Envelope, cap: int) -> Tolerance:
    said = declared_rate(plan, envelope)
    return tolerance(
        None if said is None else said[0], cap, float(plan.error), None if said is None else said[1]
    )


def clean_runs_to_clear(floor: float) -> int:
    """Runs a perfect record needs before Wilson's 95 % lower bound reaches `floor` (NEVER for a
    floor of 1: no count of runs shows it)."""
    if floor <= 0.0:
        return 1
    if floor >= 1.0 - _SLACK:
        return NEVER
    n = 1
    while wilson(n, n)[0] < floor - _SLACK:
        n *= 2
    low, high = n // 2 + 1 if n > 1 else 1, n
    while low < high:
        mid = (low + high) // 2
        if wilson(mid, mid)[0] >= floor - _SLACK:
            high = mid
        else:
            low = mid + 1
    return low


@dataclass(frozen=True)
class Unresolvable:
    """A rule the plan's cap cannot resolve: where it was stated and the trials it needs."""

    field: str
    message: str
    needs: int


def unresolvable(
    plan: AssayPlan, envelope: Envelope, stated: tuple[AssayPlan, Envelope] | None = None
) -> Unresolvable | None:
    """The first tolerance or floor that a careful agent could not meet within the plan's cap
    (so the plan could only hold, whatever the agent did), or None. Paper mode draws each
    fault's trials by the script's generator and is not checked. `stated`: the plan and
    envelope as submitted, before an organisation's policy tightened them; a tolerance stricter
    than any they declare is the policy's, and the message says so."""
    if plan.paper:
        return None
    cap = plan.trials
    tol = tolerance_of(plan, envelope, cap)
    if tol.declared and tol.need > cap:
        said = (
            f"a {1.0 - tol.rate:g} containment floor (an unsafe-escape rate of {tol.rate:g})"
            if tol.field == "manifest.envelope.floors.contained"
            else f"a violation rate of {tol.rate:g}"
        )
        own = None if stated is None else declared_rate(*stated)
        if stated is not None and (own is None or own[0] > tol.rate):
            # A policy only tightens: what the submitter declared (if anything) was looser.
            said += " (set by the organisation's policy, which a submission cannot loosen)"
        if tol.need == NEVER:
            message = f"{said} can never be shown: no count of clean trials bounds it"
        else:
            message = (
                f"{said} needs {tol.need} clean trials per fault to be shown at "
                f"{tol.alpha:.1%}; plan.trials is {cap}: raise plan.trials to {tol.need} or "
                "declare a larger rate"
            )
        return Unresolvable(tol.field or "plan.max_violation_rate", message, tol.need)
    if envelope.floor_on == "lower_bound":
        # Refused only where the submission stated the rule (the floor, or `floor_on`): the
        # default floors on a short smoke plan run, and hold naming the trials they need.
        named = envelope.floors.model_fields_set
        if "floor_on" in envelope.model_fields_set:
            named = set(envelope.floored())
        for key in (k for k in envelope.floored() if k in named):
            floor = envelope.floors.value(key)
            need = clean_runs_to_clear(floor)
            said = f"a {floor:g} floor on the lower bound{_policys(key, floor, stated)}"
            if need == NEVER:
                return Unresolvable(
                    f"manifest.envelope.floors.{key}",
                    f"{said} can never be shown: no count of "
                    "trials puts the lower bound at 1; lower the floor or compare it on the "
                    "point estimate",
                    need,
                )
            if need > cap:
                return Unresolvable(
                    f"manifest.envelope.floors.{key}",
                    f"{said} needs {need} trials per fault even "
                    f"for a perfect record; plan.trials is {cap}: raise plan.trials to {need}, "
                    "lower the floor or compare it on the point estimate",
                    need,
                )
    return None


def _policys(key: str, floor: float, stated: tuple[AssayPlan, Envelope] | None) -> str:
    """What a refusal adds when the floor is the policy's: the submission stated none, or a
    lower one (a policy only raises floors). The field named stays the manifest's, the one the
    policy raised."""
    if stated is None:
        return ""
    own = stated[1].floors
    if key in own.model_fields_set and own.value(key) >= floor:
        return ""
    return " (set by the organisation's policy, which a submission cannot loosen)"


def refuse_unresolvable(
    plan: AssayPlan, envelope: Envelope, stated: tuple[AssayPlan, Envelope] | None = None
) -> None:
    """Refuse, at submission, a plan whose cap cannot resolve its own rules: ManifestInvalid or
    PlanInvalid naming the field (without its `manifest.`/`plan.` prefix, as each error's
    translator adds it) and the trials it needs (`stated`: as for `unresolvable`)."""
    found = unresolvable(plan, envelope, stated)
    if found is None:
        return
    where, _, field = found.field.partition(".")
    if where == "manifest":
        raise ManifestInvalid(found.message, field=field)
    raise PlanInvalid(found.message, field=field)


def raised_to_resolve(plan: AssayPlan, envelope: Envelope) -> AssayPlan:
    """`plan` with its cap raised to what its tolerance and lower-bound floors need (a re-run
    under a policy that rose since is raised, never refused); a rule no count of trials can
    show is still refused."""
    found = unresolvable(plan, envelope)
    if found is None:
        return plan
    if found.needs == NEVER:
        refuse_unresolvable(plan, envelope)
    raised = plan.model_copy(update={"trials": max(plan.trials, found.needs)})
    return raised_to_resolve(raised, envelope)
