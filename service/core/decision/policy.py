"""The organisation's policy: the bar a manifest's `envelope` and a plan may raise, never lower
(docs/operations.md, "Organisation policy").

Operators hold a policy per tenant and per system; the one in force for a system is the two
`combine`d, each field at the stricter of the two. `tighten` checks a submission against it: a
field the submission sets looser than the policy is a `PolicyViolation` naming both fields, and a
field it leaves out takes the stricter of its default and the policy's value. What comes out is
the effective envelope and plan: what the assay runs, decides under and the dossier records. An
empty policy asks nothing, so it changes nothing.

The policy's digest is SHA-256 over the RFC 8785 JSON of its normal form (`OrgPolicy.document`),
as a manifest component's is; it is signed into the dossier and its change reopens the gate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator

from service.core.decision.assurance import accepted_by, rank
from service.core.errors import PolicyInvalid, PolicyViolation
from service.core.faults.catalogue import DOMAINS, Domain
from service.core.faults.plan import MAX_TRIALS, AssayPlan
from service.core.system.artifact import Assurance
from service.core.system.contract import StrictModel
from service.core.system.manifest import Envelope, Floors, sha256_canonical
from service.core.system.text import CONTROL_CLASS
from service.core.system.values import INTEGRAL, Number

Rule = Literal["fixed", "sequential"]
Rate = Annotated[Number, Field(ge=0.0, le=1.0)]
FLOORS: tuple[str, ...] = tuple(Floors.model_fields)
MAX_REQUIRED = 64
#: How long a waiver may last when no policy says (days), and the most a policy may allow.
DEFAULT_MAX_WAIVER_DAYS = 90
MAX_WAIVER_DAYS = 3650
_PART = f"[^/{CONTROL_CLASS}]+"
#: domain/boundary/phase/correlation/oracle, as `FaultSpec.coverage_key` writes it.
COVERAGE_KEY_PATTERN = f"^({'|'.join(d.value for d in DOMAINS)})(/{_PART}){{4}}$"
CoverageKey = Annotated[str, Field(pattern=COVERAGE_KEY_PATTERN, max_length=400)]


class PolicyFloors(StrictModel):
    """The lowest each floor may be; None: the manifest's (or its default) stands."""

    contained: Rate | None = None
    recovered: Rate | None = None
    verified: Rate | None = None
    useful_service: Rate | None = None


class OrgPolicy(StrictModel):
    """What an organisation requires of every assay of a tenant (or of one system). Every field
    is a requirement; left out, it requires nothing. `accept_assurance` alone accepts: left out,
    an allow for an artifact needs code the gate ran (`service.core.decision.assurance`)."""

    floors: PolicyFloors = PolicyFloors()
    # Floors compare the Wilson 95 % lower bound, not the point estimate.
    floor_on: Literal["lower_bound"] | None = None
    # The highest violation rate an envelope (and a plan) may claim to bound.
    max_violation_rate: Annotated[Number, Field(gt=0.0, lt=1.0)] | None = None
    # Control pairs gate: a manifest may not make them `reported`.
    attribution: Literal["required"] | None = None
    # The highest error a plan may run at.
    error: Annotated[Number, Field(gt=0.0, lt=0.5)] | None = None
    # The fewest trials a plan may cap each fault at (paper mode: in total).
    trials: Annotated[int, Field(strict=True, ge=1, le=MAX_TRIALS), INTEGRAL] | None = None
    # The plan rules an assay may run under.
    rules: Annotated[tuple[Rule, ...], Field(min_length=1, max_length=2)] | None = None
    # Fault families and coverage keys (domain/boundary/phase/correlation/oracle) every plan
    # must select.
    families: Annotated[tuple[Domain, ...], Field(max_length=len(DOMAINS))] = ()
    # The least share of a plan's faults each required family must hold, unless the plan runs
    # every fault the catalogue has in that family (left out: an equal share, 1 / the number
    # of required families): one fault of a family among many of another does not meet it.
    family_share: Annotated[Number, Field(gt=0.0, le=1.0)] | None = None
    coverage: Annotated[tuple[CoverageKey, ...], Field(max_length=MAX_REQUIRED)] = ()
    # The matched baseline and the counterfactual arms must run.
    matched_baseline: Literal[True] | None = None
    counterfactuals: Literal[True] | None = None
    # The smallest evidence sample the extra arms may run on (a plan's `null`, every trial, is
    # always enough).
    evidence_sample: Annotated[int, Field(strict=True, ge=1, le=MAX_TRIALS), INTEGRAL] | None = None
    # The one field that accepts rather than requires: the weakest assurance of a shipped artifact
    # an allow for it may rest on (`GET /v1/gate?artifact=`, `verify --artifact`). Left out, only
    # `executed` (code the gate ran); `declared` accepts code nothing the gate ran vouches for.
    accept_assurance: Literal["executed", "reported", "declared"] | None = None
    # The longest a waiver may last, in days from when it is given (left out:
    # DEFAULT_MAX_WAIVER_DAYS); a waiver asked to last longer is refused, never shortened.
    max_waiver_days: (
        Annotated[int, Field(strict=True, ge=1, le=MAX_WAIVER_DAYS), INTEGRAL] | None
    ) = None

    @field_validator("rules", "families", "coverage")
    @classmethod
    def _sorted(cls, value: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
        return None if value is None else tuple(sorted(set(value)))

    def document(self) -> dict[str, Any]:
        """The normal form: only what the policy requires, lists sorted. Two policies that
        require the same are the same document, with the same digest."""
        found: dict[str, Any] = self.model_dump(mode="json", exclude_none=True)
        for key in ("floors", "families", "coverage"):
            if not found.get(key):
                found.pop(key, None)
        return found

    def digest(self) -> str:
        return sha256_canonical(self.document())

    @property
    def empty(self) -> bool:
        return not self.document()


EMPTY = OrgPolicy()


def family_share(policy: OrgPolicy) -> float:
    """The least share of a plan's faults each required family must hold (`_required`)."""
    if policy.family_share is not None:
        return float(policy.family_share)
    return 1.0 / len(policy.families) if policy.families else 0.0


def waiver_days(policy: OrgPolicy) -> int:
    """The longest a waiver may last under `policy`, in days."""
    found = policy.max_waiver_days
    return DEFAULT_MAX_WAIVER_DAYS if found is None else int(found)


def parse_policy(data: object) -> OrgPolicy:
    """A decoded policy document, or PolicyInvalid naming the first bad field."""
    if not isinstance(data, dict):
        raise PolicyInvalid("must be a JSON object", field="policy")
    try:
        return OrgPolicy.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "policy"
        if err["type"] == "extra_forbidden":
            raise PolicyInvalid(f"unknown key (known: {_listed(KNOWN)})", field=field) from None
        message = str(err["msg"]).removeprefix("Value error, ")
        raise PolicyInvalid(message, field=field) from None


KNOWN = frozenset(OrgPolicy.model_fields)


# ------------------------------------------------------------------------ policy and policy


def combine(a: OrgPolicy, b: OrgPolicy) -> OrgPolicy:
    """Both policies at once: each field the stricter of the two. A tenant's and a system's
    combine into the one in force for the system; PolicyInvalid if no plan rule is left."""
    rules: tuple[Rule, ...] | None = a.rules if b.rules is None else b.rules
    if a.rules is not None and b.rules is not None:
        rules = tuple(r for r in a.rules if r in b.rules)
        if not rules:
            raise PolicyInvalid(
                f"allows the rules {_listed(b.rules)} and the other policy only "
                f"{_listed(a.rules)}: no rule is left to run",
                field="rules",
            )
    return OrgPolicy(
        floors=PolicyFloors(
            **{k: _most(getattr(a.floors, k), getattr(b.floors, k)) for k in FLOORS}
        ),
        floor_on=a.floor_on or b.floor_on,
        max_violation_rate=_least(a.max_violation_rate, b.max_violation_rate),
        attribution=a.attribution or b.attribution,
        error=_least(a.error, b.error),
        trials=_most(a.trials, b.trials),
        rules=rules,
        families=tuple(sorted({*a.families, *b.families})),
        family_share=_most(a.family_share, b.family_share),
        coverage=tuple(sorted({*a.coverage, *b.coverage})),
        matched_baseline=a.matched_baseline or b.matched_baseline,
        counterfactuals=a.counterfactuals or b.counterfactuals,
        evidence_sample=_most(a.evidence_sample, b.evidence_sample),
        accept_assurance=_stronger(a.accept_assurance, b.accept_assurance),
        max_waiver_days=_least(a.max_waiver_days, b.max_waiver_days),
    )


def loosened(new: OrgPolicy, old: OrgPolicy) -> str | None:
    """The first field (dotted) that `new` sets looser than `old`; None when `new` is at least as
    strict everywhere. An acceptance left out accepts only `executed`: accepting a weaker
    assurance than before, or than that, is looser."""
    if _accepts(new) > _accepts(old):
        return "accept_assurance"
    if waiver_days(new) > waiver_days(old):  # left out, the default: longer is looser
        return "max_waiver_days"
    try:
        both = _flat(combine(old, new).document())
    except PolicyInvalid:
        return "rules"
    mine = _flat(new.document())
    both.pop("accept_assurance", None)
    mine.pop("accept_assurance", None)
    for key in sorted(set(both) | set(mine)):
        if both.get(key) != mine.get(key):
            return key
    return None


def in_force_value(policy: OrgPolicy, field: str) -> Any:
    """The value `policy` gives a dotted field (`floors.recovered`); None when it sets none.
    `accept_assurance` and `max_waiver_days` read as what they mean when left out."""
    if field == "accept_assurance":
        return policy.accept_assurance or Assurance.EXECUTED.value
    if field == "max_waiver_days":
        return waiver_days(policy)
    return _flat(policy.document()).get(field)


def sets(policy: OrgPolicy, field: str) -> bool:
    """Whether `policy` names the dotted field itself (`rules` and the like: any of it)."""
    mine = _flat(policy.document())
    return field in mine or any(k.startswith(f"{field}.") for k in mine)


# ------------------------------------------------------------------- policy and a submission


@dataclass(frozen=True)
class Effective:
    """What the assay runs and decides under: the envelope and the plan, each at least as strict
    as the policy. `plan.envelope` holds the envelope when it differs from the manifest's."""

    envelope: Envelope
    plan: AssayPlan


def tighten(
    policy: OrgPolicy,
    envelope: Envelope,
    plan: AssayPlan,
    target_kind: str,
    *,
    refuse: bool = True,
) -> Effective:
    """The manifest's `envelope` and `plan` under `policy`.

    A field the submission set (pydantic's `model_fields_set`) looser than the policy raises
    PolicyViolation naming the submitted field and the policy's; a field it left out takes the
    stricter of its value and the policy's. `refuse=False` treats every field as left out (a
    re-run of a candidate admitted under another policy: its fields are raised, never refused).
    A plan that cannot be raised — one that drops a required family or coverage key, or runs a
    rule the policy does not allow in paper mode — is refused either way."""
    new_envelope = _envelope(policy, envelope, refuse)
    new_plan = _plan(policy, plan, target_kind, refuse)
    changed = new_envelope != envelope
    final = new_plan.model_copy(update={"envelope": new_envelope if changed else None})
    return Effective(new_envelope, final)


def _envelope(policy: OrgPolicy, envelope: Envelope, refuse: bool) -> Envelope:
    said_floors = envelope.floors.model_fields_set if refuse else set()
    said = envelope.model_fields_set if refuse else set()
    floors: dict[str, float] = {}
    for key in FLOORS:
        least = getattr(policy.floors, key)
        said_value = getattr(envelope.floors, key)
        if least is None:
            continue
        if said_value is None:  # an unset containment floor: the policy's is the tolerance
            floors[key] = float(least)
            continue
        value = float(said_value)
        if key in said_floors and value < least:
            raise PolicyViolation(
                f"the floor {value} is below the policy's minimum {least}",
                field=f"manifest.envelope.floors.{key}",
                policy=f"floors.{key}",
            )
        floors[key] = max(value, float(least))
    update: dict[str, Any] = {}
    if floors:
        update["floors"] = envelope.floors.model_copy(update=floors)
    if policy.floor_on is not None:
        _strict(
            "floor_on",
            said,
            envelope.floor_on,
            policy.floor_on,
            f"floors compared on the {envelope.floor_on} estimate; the policy compares them "
            f"on the {policy.floor_on}",
        )
        update["floor_on"] = policy.floor_on
    if policy.max_violation_rate is not None:
        most = float(policy.max_violation_rate)
        rate = envelope.max_violation_rate
        if "max_violation_rate" in said and (rate is None or rate > most):
            raise PolicyViolation(
                f"a violation rate of {'none' if rate is None else rate} is above the policy's "
                f"maximum {most}",
                field="manifest.envelope.max_violation_rate",
                policy="max_violation_rate",
            )
        update["max_violation_rate"] = most if rate is None else min(float(rate), most)
    if policy.attribution is not None:
        _strict(
            "attribution",
            said,
            envelope.attribution,
            policy.attribution,
            f"attribution '{envelope.attribution}' lets control pairs go ungated; the policy "
            f"requires '{policy.attribution}'",
        )
        update["attribution"] = policy.attribution
    return envelope.model_copy(update=update) if update else envelope


def _strict(key: str, said: set[str], have: str, want: str, why: str) -> None:
    """A field the policy names only in its strict value: a manifest that says another refuses."""
    if key in said and have != want:
        raise PolicyViolation(why, field=f"manifest.envelope.{key}", policy=key)


def _plan(policy: OrgPolicy, plan: AssayPlan, target_kind: str, refuse: bool) -> AssayPlan:
    said = plan.model_fields_set if refuse else set()
    update: dict[str, Any] = {}
    if policy.trials is not None:
        if "trials" in said and plan.trials < policy.trials:
            raise PolicyViolation(
                f"{plan.trials} trials are fewer than the policy's minimum {policy.trials}",
                field="plan.trials",
                policy="trials",
            )
        update["trials"] = max(plan.trials, policy.trials)
    if policy.error is not None:
        most = float(policy.error)
        if "error" in said and plan.error > most:
            raise PolicyViolation(
                f"an error of {plan.error} is above the policy's maximum {most}",
                field="plan.error",
                policy="error",
            )
        update["error"] = min(float(plan.error), most)
    if policy.max_violation_rate is not None and plan.max_violation_rate is not None:
        most = float(policy.max_violation_rate)
        if "max_violation_rate" in said and plan.max_violation_rate > most:
            raise PolicyViolation(
                f"a violation rate of {plan.max_violation_rate} is above the policy's maximum "
                f"{most}",
                field="plan.max_violation_rate",
                policy="max_violation_rate",
            )
        update["max_violation_rate"] = min(float(plan.max_violation_rate), most)
    for arm in ("matched_baseline", "counterfactuals"):
        if getattr(policy, arm) and not getattr(plan, arm):
            if arm in said:
                raise PolicyViolation(
                    f"the plan turns the {arm.replace('_', ' ')} off; the policy requires it",
                    field=f"plan.{arm}",
                    policy=arm,
                )
            update[arm] = True
    if policy.evidence_sample is not None and plan.evidence_sample is not None:
        if "evidence_sample" in said and plan.evidence_sample < policy.evidence_sample:
            raise PolicyViolation(
                f"an evidence sample of {plan.evidence_sample} is smaller than the policy's "
                f"minimum {policy.evidence_sample}",
                field="plan.evidence_sample",
                policy="evidence_sample",
            )
        update["evidence_sample"] = max(plan.evidence_sample, policy.evidence_sample)
    if policy.rules is not None:
        update.update(_rule(policy.rules, plan, target_kind, said))
    _required(policy, plan)
    return plan.model_copy(update=update) if update else plan


def _rule(
    rules: tuple[Rule, ...], plan: AssayPlan, target_kind: str, said: set[str]
) -> dict[str, Any]:
    runs = plan.rule_for(target_kind)
    if runs in rules:
        return {}
    if plan.paper:
        raise PolicyViolation(
            f"paper mode runs the fixed plan; the policy allows only {_listed(rules)}",
            field="plan.catalogue",
            policy="rules",
        )
    if "rule" in said:
        raise PolicyViolation(
            f"the {runs} rule is not among the policy's rules ({_listed(rules)})",
            field="plan.rule",
            policy="rules",
        )
    return {"rule": rules[0]}


def _required(policy: OrgPolicy, plan: AssayPlan) -> None:
    """Refuse a plan that selects no fault of a required family or coverage key: nothing in it
    can be raised to what the policy asks."""
    if not policy.families and not policy.coverage:
        return
    faults = plan.faults()
    field = "plan.modes" if plan.modes else "plan.families" if plan.families else "plan.catalogue"
    share = family_share(policy)
    catalogue = plan.resolve_catalogue().faults
    for family in policy.families:
        mine = sum(1 for f in faults if f.domain.value == family)
        if mine == 0:
            raise PolicyViolation(
                f"the plan selects no fault of the family '{family}' the policy requires",
                field=field,
                policy="families",
            )
        whole = sum(1 for f in catalogue if f.domain.value == family)
        if mine < whole and mine < share * len(faults) - 1e-9:
            raise PolicyViolation(
                f"the plan gives the family '{family}' {mine} of its {len(faults)} faults; the "
                f"policy requires each required family at least {share:.0%} of the plan's "
                f"faults, or all {whole} of the catalogue's '{family}' faults",
                field=field,
                policy="families",
            )
    keys = {f.coverage_key() for f in faults}
    for key in policy.coverage:
        if key not in keys:
            raise PolicyViolation(
                f"the plan selects no fault of the coverage key '{key}' the policy requires",
                field=field,
                policy="coverage",
            )


# ------------------------------------------------------------------------------ helpers


def _most(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def _least(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _accepts(policy: OrgPolicy) -> int:
    return rank(accepted_by({"accept_assurance": policy.accept_assurance}))


def _stronger(a: str | None, b: str | None) -> Any:
    """Two acceptances at once: the stronger assurance of those set (one left out defers)."""
    if a is None or b is None:
        return b if a is None else a
    return a if rank(Assurance(a)) <= rank(Assurance(b)) else b


def _flat(document: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in document.items():
        if isinstance(value, dict):
            found.update(_flat(value, f"{prefix}{key}."))
        else:
            found[f"{prefix}{key}"] = value
    return found


def _listed(values: Any) -> str:
    return ", ".join(sorted(str(v) for v in values))
