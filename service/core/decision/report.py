"""The assay report as typed, frozen values: what `merge` builds, the dossier predicate signs
and the pages present.

`to_dict` is the stored and signed JSON, key for key; `from_dict` reads it back, so
`from_dict(r.to_dict()) == r`. Keys that only some results carry (a counterfactual's pair figures,
a storm, invariants) are left out when absent rather than written as null, as they always were.
Opaque JSON the report only carries (a fault's spec, the plan, sampled trials) stays a mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from service.core.decision.gate import Decision, Reason
from service.core.evidence.builds import (
    EndpointBuilds,
    assay_view,
    fault_view,
    from_assay_view,
    from_fault_view,
)
from service.core.evidence.figures import (
    Diagnosis,
    InvariantResult,
    JSONObject,
    Rates,
    Signature,
    StormView,
    Summary,
    Transfer,
    as_int,
    causes,
    counts,
    obj,
    rates_or_none,
    transfer_or_none,
)
from service.core.evidence.pairs import Counterfactual


@dataclass(frozen=True)
class FaultResult:
    """One fault's result: its counts, signature, evidence of validity, diagnosis and samples."""

    id: str
    domain: str
    mode: str
    coverage_key: str
    spec: JSONObject
    planned: int
    exercised: int
    not_exercised: int
    target_errors: int
    baseline_errors: int
    counterfactual_errors: int
    error_kinds: Mapping[str, int]
    sandbox_refusals: int
    injector_refusals: int
    signature: Signature
    unfired: Rates | None
    baseline: Rates | None
    transfer: Transfer | None
    counterfactual: Counterfactual
    diagnosis: Diagnosis | None
    samples: tuple[JSONObject, ...]
    first_violation: JSONObject | None
    storm: StormView | None = None
    invariants: Mapping[str, InvariantResult] = field(default_factory=dict)
    # The first distinct messages of each target-error kind (what "TargetFailed 4" was).
    error_causes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Engine targets: whether the matched baselines reach the fault (`not_applicable` when the
    # workload cannot: never a hold), with the evidence.
    applicability: JSONObject | None = None
    # A sequential plan: why this fault's trials stopped ({"code", "message", "trials"}).
    stop: JSONObject | None = None
    # Agent runs, seconds, tokens and cost per arm of this fault (service/core/evidence/spend.py).
    spend: JSONObject | None = None
    # Every floor the gate read: point estimate, 95 % interval, which one it compared, met or not
    # (`FloorCheck.view`).
    floors: tuple[JSONObject, ...] = ()
    # Remote targets: runs per (endpoint, build reported or None), in every arm of this fault.
    builds: Mapping[tuple[str, str | None], int] = field(default_factory=dict)
    # A plan that shares baselines (`baseline: shared`): the baseline runs this fault's trials
    # used, `{"shared_by": tool, "workload": root}`: trial k used the tool's run k, whose
    # workload key is `derive(root, k)` (hex), the same run as every fault on the tool.
    baseline_run: JSONObject | None = None

    def to_dict(self) -> JSONObject:
        out: JSONObject = {
            "id": self.id,
            "domain": self.domain,
            "mode": self.mode,
            "coverage_key": self.coverage_key,
            "spec": self.spec,
            "planned": self.planned,
            "exercised": self.exercised,
            "not_exercised": self.not_exercised,
            "target_errors": self.target_errors,
            "baseline_errors": self.baseline_errors,
            "counterfactual_errors": self.counterfactual_errors,
            "error_kinds": dict(self.error_kinds),
            "sandbox_refusals": self.sandbox_refusals,
            "injector_refusals": self.injector_refusals,
            "signature": self.signature.to_dict(),
            "unfired": self.unfired.to_dict() if self.unfired else None,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "transfer": self.transfer.to_dict() if self.transfer else None,
            "counterfactual": self.counterfactual.to_dict(),
            "diagnosis": self.diagnosis.to_dict() if self.diagnosis else None,
            "samples": list(self.samples),
            "first_violation": self.first_violation,
        }
        if self.storm is not None:
            out["storm"] = self.storm.to_dict()
        if self.invariants:
            out["invariants"] = {k: v.to_dict() for k, v in self.invariants.items()}
        if self.error_causes:
            out["error_causes"] = {k: list(v) for k, v in self.error_causes.items()}
        if self.applicability is not None:
            out["applicability"] = self.applicability
        if self.stop is not None:
            out["stop"] = dict(self.stop)
        if self.spend is not None:
            out["spend"] = dict(self.spend)
        if self.floors:
            out["floors"] = [dict(f) for f in self.floors]
        if self.builds:
            out["builds"] = fault_view(self.builds)
        if self.baseline_run is not None:
            out["baseline_run"] = dict(self.baseline_run)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> FaultResult:
        diag, storm, fv = d.get("diagnosis"), d.get("storm"), d.get("first_violation")
        return cls(
            id=str(d["id"]),
            domain=str(d["domain"]),
            mode=str(d["mode"]),
            coverage_key=str(d["coverage_key"]),
            spec=dict(obj(d["spec"])),
            planned=as_int(d, "planned"),
            exercised=as_int(d, "exercised"),
            not_exercised=as_int(d, "not_exercised"),
            target_errors=as_int(d, "target_errors"),
            baseline_errors=int(cast(int, d.get("baseline_errors", 0))),
            counterfactual_errors=int(cast(int, d.get("counterfactual_errors", 0))),
            error_kinds=counts(d.get("error_kinds") or {}),
            sandbox_refusals=int(cast(int, d.get("sandbox_refusals", 0))),
            injector_refusals=int(cast(int, d.get("injector_refusals", 0))),
            signature=Signature.from_dict(obj(d["signature"])),
            unfired=rates_or_none(d.get("unfired")),
            baseline=rates_or_none(d.get("baseline")),
            transfer=transfer_or_none(d.get("transfer")),
            counterfactual=Counterfactual.from_dict(obj(d["counterfactual"])),
            diagnosis=None if diag is None else Diagnosis.from_dict(obj(diag)),
            samples=tuple(dict(obj(s)) for s in cast(list[object], d.get("samples") or [])),
            first_violation=None if fv is None else dict(obj(fv)),
            storm=None if storm is None else StormView.from_dict(obj(storm)),
            invariants={
                str(k): InvariantResult.from_dict(obj(v))
                for k, v in obj(d.get("invariants") or {}).items()
            },
            error_causes=causes(d.get("error_causes") or {}),
            applicability=None if d.get("applicability") is None else dict(obj(d["applicability"])),
            stop=None if d.get("stop") is None else dict(obj(d["stop"])),
            spend=None if d.get("spend") is None else dict(obj(d["spend"])),
            floors=tuple(dict(obj(f)) for f in cast(list[object], d.get("floors") or [])),
            builds=from_fault_view(obj(d.get("builds") or {})),
            baseline_run=None if d.get("baseline_run") is None else dict(obj(d["baseline_run"])),
        )


@dataclass(frozen=True)
class AssayReport:
    """A merged assay: the decision with every reason, the figures per domain, overall and per
    fault, coverage, and what the run was (manifest, catalogue, plan, seed)."""

    decision: Decision
    reasons: tuple[Reason, ...]
    by_domain: Mapping[str, Summary]
    overall: Summary
    faults: tuple[FaultResult, ...]
    visited: tuple[str, ...]
    not_visited: tuple[str, ...]
    catalogue_version: str
    manifest_digest: str
    component_hashes: Mapping[str, str]
    plan: JSONObject
    seed: int
    trials_executed: int
    target_errors_total: int
    target_errors_by_kind: Mapping[str, int]
    stopped: str | None
    interpretation: Mapping[str, str]
    target_error_causes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The plan's rule ("fixed" or "sequential"); written only for a sequential plan, so a fixed
    # plan's report (and the golden dossier) reads as it always did.
    rule: str = "fixed"
    # The rule and what the runs spent: {"rule", "total", "team", "gate", "arms"}, and
    # "past_stop" when trials ran past a stop (service/core/evidence/spend.py).
    spend: JSONObject | None = None
    # Remote targets: per endpoint, the declared build, the builds reported and the assurance
    # (service/core/evidence/builds.py); written only when there is one.
    builds: tuple[EndpointBuilds, ...] = ()
    # The sandbox layers in force around the tenant code the assay ran (service/sandbox/layers.py
    # `Posture.view`), one per distinct worker posture; written only when code ran.
    sandbox: tuple[JSONObject, ...] = ()

    def to_dict(self) -> JSONObject:
        out: JSONObject = {
            "decision": self.decision.value,
            "reasons": [r.view() for r in self.reasons],
            "by_domain": {d: s.to_dict() for d, s in self.by_domain.items()},
            "overall": self.overall.to_dict(),
            "faults": [f.to_dict() for f in self.faults],
            "coverage": {"visited": list(self.visited), "not_visited": list(self.not_visited)},
            "catalogue_version": self.catalogue_version,
            "manifest_digest": self.manifest_digest,
            "component_hashes": dict(self.component_hashes),
            "plan": self.plan,
            "seed": self.seed,
            "trials_executed": self.trials_executed,
            "target_errors": {
                "total": self.target_errors_total,
                "by_kind": dict(self.target_errors_by_kind),
                **(
                    {"causes": {k: list(v) for k, v in self.target_error_causes.items()}}
                    if self.target_error_causes
                    else {}
                ),
            },
            "stopped": self.stopped,
            "interpretation": dict(self.interpretation),
        }
        if self.rule != "fixed":
            out["rule"] = self.rule
        if self.spend is not None:
            out["spend"] = dict(self.spend)
        if self.builds:
            out["builds"] = assay_view(self.builds)
        if self.sandbox:
            out["sandbox"] = [dict(s) for s in self.sandbox]
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> AssayReport:
        coverage = obj(d.get("coverage") or {})
        errors = obj(d.get("target_errors") or {})
        stopped = d.get("stopped")
        return cls(
            decision=Decision(str(d["decision"])),
            reasons=tuple(Reason.from_view(obj(r)) for r in cast(list[object], d["reasons"])),
            by_domain={str(k): Summary.from_dict(obj(v)) for k, v in obj(d["by_domain"]).items()},
            overall=Summary.from_dict(obj(d["overall"])),
            faults=tuple(FaultResult.from_dict(obj(f)) for f in cast(list[object], d["faults"])),
            visited=tuple(cast(list[str], coverage.get("visited") or [])),
            not_visited=tuple(cast(list[str], coverage.get("not_visited") or [])),
            catalogue_version=str(d["catalogue_version"]),
            manifest_digest=str(d["manifest_digest"]),
            component_hashes={
                str(k): str(v) for k, v in obj(d.get("component_hashes") or {}).items()
            },
            plan=dict(obj(d.get("plan") or {})),
            seed=int(cast(int, d.get("seed", 0))),
            trials_executed=int(cast(int, d.get("trials_executed", 0))),
            target_errors_total=int(cast(int, errors.get("total", 0))),
            target_errors_by_kind=counts(errors.get("by_kind") or {}),
            target_error_causes=causes(errors.get("causes") or {}),
            stopped=None if stopped is None else str(stopped),
            interpretation={str(k): str(v) for k, v in obj(d.get("interpretation") or {}).items()},
            rule=str(d.get("rule", "fixed")),
            spend=None if d.get("spend") is None else dict(obj(d["spend"])),
            builds=from_assay_view(obj(d.get("builds") or {})),
            sandbox=tuple(dict(obj(s)) for s in cast(list[object], d.get("sandbox") or [])),
        )
