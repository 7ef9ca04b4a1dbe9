"""The fault plan: which catalogue, which faults, how many trials, which seed."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from service.core.errors import FaultUnknown, PlanInvalid
from service.core.faults.catalogue import (
    DOMAINS,
    Catalogue,
    Domain,
    FaultSpec,
    catalogue_named,
)
from service.core.system.manifest import Envelope, Manifest
from service.core.system.values import INTEGRAL, Number

MAX_TRIALS = 10_000_000
# The plan is signed into the dossier as RFC 8785 JSON, which holds integers up to 2^53 - 1 only.
MAX_SEED = 2**53 - 1
# A plan names each family or mode at most once or twice; more is a mistake or an attack.
MAX_FAMILIES = 16
MAX_MODES = 256


_SIGNED_WHEN_SET = (
    ("rule", None),
    ("error", 0.05),
    ("max_violation_rate", None),
    ("envelope", None),
    ("baseline", "per_fault"),
)


class StopConditions(BaseModel):
    """Declared per assay; a tripped condition halts the remaining shards and blocks release."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # None means "the service default" (on); 0 stops at the first occurrence.
    max_effects: Annotated[int, Field(strict=True, ge=0), INTEGRAL] | None = None
    max_unsafe: Annotated[int, Field(strict=True, ge=0), INTEGRAL] | None = None
    max_target_errors: Annotated[int, Field(strict=True, ge=0), INTEGRAL] | None = None
    deadline_s: Annotated[Number, Field(gt=0, le=7 * 86_400)] | None = None
    # Budgets: what the assay may spend. Exceeding one stops it with the reason `budget` (a hold:
    # the evidence is unfinished, never an `allow`). Runs count the team's agent runs of every
    # arm (not the sensitivity pair's naive agent, the gate's own); tokens and cost are what the
    # agent reports (a claim's `usage`, or its framework's).
    max_runs: Annotated[int, Field(strict=True, ge=1), INTEGRAL] | None = None
    max_seconds: Annotated[Number, Field(gt=0, le=7 * 86_400)] | None = None
    max_tokens: Annotated[int, Field(strict=True, ge=1), INTEGRAL] | None = None
    max_cost: Annotated[Number, Field(gt=0)] | None = None


class AssayPlan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # "paper": the reference script's ten modes, drawn per trial by its generator; `trials` is
    # the total. "full": every catalogue fault; `trials` is per fault. Or a custom catalogue.
    catalogue: Literal["paper", "full"] | Catalogue = "full"
    families: Annotated[tuple[str, ...], Field(max_length=MAX_FAMILIES)] = ()
    modes: Annotated[tuple[str, ...], Field(max_length=MAX_MODES)] = ()
    trials: Annotated[int, Field(strict=True, ge=1, le=MAX_TRIALS), INTEGRAL] = 200
    seed: Annotated[int, Field(strict=True, ge=0, le=MAX_SEED), INTEGRAL] = 188
    matched_baseline: bool = True
    # "per_fault": each fault's trial k draws its own workload and runs its own matched baseline
    # (what a plan that does not say means, so a stored plan and its dossier keep their meaning).
    # "shared": the faults on one tool draw trial k's workload from one stream (the plan's seed,
    # the tool, k), so they run the same task, and that task's no-fault baseline runs once for
    # all of them (service/core/shards/baselines.py); each fault's transfer is still read
    # against it and a violation in it counts against every fault that used it.
    baseline: Literal["per_fault", "shared"] = "per_fault"
    counterfactuals: bool = True
    # The matched baseline and counterfactual arms run on a seeded sample of about this many
    # trials per fault (every trial when a fault has fewer); None runs them on every trial. A
    # sample of 1,000 bounds an absent violation below 0.37 % and a rate's 95 % Wilson interval to
    # +/- 3.1 points, ample for the transfers the pairs must show (docs/evidence.md).
    evidence_sample: Annotated[int, Field(strict=True, ge=1)] | None = 1_000
    stop: StopConditions = StopConditions()
    # "sequential": each fault stops once its decision cannot change at `error` (anytime-valid
    # confidence sequences; service/core/evidence/stopping.py), with `trials` as its cap.
    # "fixed": every fault runs `trials`. None: sequential for mcp and framework targets, fixed
    # otherwise (`rule_for`); paper mode is always fixed, so its figures stay the script's.
    rule: Literal["sequential", "fixed"] | None = None
    error: Annotated[Number, Field(gt=0.0, lt=0.5)] = 0.05
    # The violation rate below which an unseen violation no longer changes a fault's decision
    # (None: the envelope's, else what the fixed plan's `trials` would resolve).
    max_violation_rate: Annotated[Number, Field(gt=0.0, lt=1.0)] | None = None
    # The envelope the assay decides under when the organisation's policy tightened the
    # manifest's (service/core/decision/policy.py `tighten`); None: the manifest's own. Set by the
    # service, never by a submission (the API's plan shape has no such field).
    envelope: Envelope | None = None

    def envelope_for(self, manifest: Manifest) -> Envelope:
        """The envelope this assay of `manifest` decides under."""
        return self.envelope if self.envelope is not None else manifest.envelope

    def signed(self) -> dict[str, Any]:
        """The plan as a dossier signs it. Keys added with sequential plans, budgets and the
        organisation's policy are written only when set, so a plan that sets none signs the same
        bytes as before they existed (the golden dossier); a custom catalogue by its version."""
        found: dict[str, Any] = self.model_dump(mode="json")
        for key, default in _SIGNED_WHEN_SET:
            if found.get(key) == default:
                del found[key]
        for key in ("max_runs", "max_seconds", "max_tokens", "max_cost"):
            if found["stop"].get(key) is None:
                del found["stop"][key]
        if isinstance(self.catalogue, Catalogue):
            found["catalogue"] = {"version": self.catalogue.version}
        return found

    def rule_for(self, target_kind: str) -> Literal["sequential", "fixed"]:
        """The rule this plan runs for a target of `target_kind`."""
        if self.paper:
            if self.rule == "sequential":
                raise PlanInvalid(
                    "paper mode runs the fixed plan: its figures are the script's", field="rule"
                )
            return "fixed"
        if self.rule is not None:
            return self.rule
        return "sequential" if target_kind == "mcp" else "fixed"

    def sample_threshold(self) -> int | None:
        """Trials whose sample draw falls below this run the extra arms; None: every trial."""
        if self.evidence_sample is None:
            return None
        per_fault = self.trials / len(self.faults()) if self.paper else self.trials
        if per_fault <= self.evidence_sample:
            return None
        return int(self.evidence_sample / per_fault * 2**64)

    @property
    def paper(self) -> bool:
        return self.catalogue == "paper"

    def resolve_catalogue(self) -> Catalogue:
        if isinstance(self.catalogue, Catalogue):
            return self.catalogue
        return catalogue_named(self.catalogue)

    def domains(self) -> tuple[Domain, ...]:
        if not self.families:
            return DOMAINS
        known = {d.value for d in DOMAINS}
        for fam in self.families:
            if fam not in known:
                raise FaultUnknown(
                    f"unknown fault family '{fam}' (known: {', '.join(sorted(known))})",
                    field="families",
                )
        return tuple(d for d in DOMAINS if d.value in self.families)

    def faults(self) -> tuple[FaultSpec, ...]:
        """The selected faults, in catalogue order."""
        cat = self.resolve_catalogue()
        domains = set(self.domains())
        if self.paper and self.modes:
            raise PlanInvalid(
                "modes cannot be chosen in paper mode: the script draws them", field="modes"
            )
        if self.paper and self.baseline == "shared":
            raise PlanInvalid(
                "paper mode runs the script's own baselines: they cannot be shared",
                field="baseline",
            )
        selected = [f for f in cat.faults if f.domain in domains]
        if self.modes:
            for m in self.modes:
                if not any(f.id == m or f.mode == m for f in cat.faults):
                    raise FaultUnknown(
                        f"unknown fault mode '{m}' in catalogue {cat.version}", field="modes"
                    )
            selected = [f for f in selected if f.id in self.modes or f.mode in self.modes]
        if not selected:
            raise PlanInvalid("the plan selects no fault", field="modes")
        return tuple(selected)


def parse_plan(data: object) -> AssayPlan:
    if data is None:
        return AssayPlan()
    if not isinstance(data, dict):
        raise PlanInvalid("must be a JSON object", field="plan")
    plan = validate_plan(data)
    plan.faults()  # unknown families and modes fail here, before anything is stored
    plan.rule_for("reference")  # and a sequential paper plan
    return plan


def validate_plan(data: dict[str, object]) -> AssayPlan:
    """`data` as a plan, or PlanInvalid naming the first bad field and its rule."""
    try:
        return AssayPlan.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "plan"
        if err["type"] == "extra_forbidden":
            raise PlanInvalid("unknown key in plan", field=field) from None
        raise PlanInvalid(err["msg"], field=field) from None
