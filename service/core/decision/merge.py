"""Merging shard results into the typed report: signatures, pairs, diagnoses and the decision."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from service.core.decision.baselines import baseline_run, summed_once
from service.core.decision.floors import Earlier, floor_checks
from service.core.decision.gate import FaultEvidence, decide
from service.core.decision.report import AssayReport, FaultResult
from service.core.evidence.builds import endpoint_builds
from service.core.evidence.figures import (
    RATES,
    UPPER_BOUNDED,
    Diagnosis,
    InvariantResult,
    JSONObject,
    Rates,
    Signature,
    StormView,
    Summary,
    Transfer,
)
from service.core.evidence.pairs import (
    ControlPair,
    Counterfactual,
    PairFigures,
    Removal,
    Sensitivity,
    removal,
    whole_transfer,
)
from service.core.evidence.promise import declared_rate
from service.core.evidence.signature import newcombe, wilson
from service.core.evidence.spend import from_views
from service.core.evidence.stopping import Stop, rule_for
from service.core.evidence.tally import ArmCounts, ShardResult, StormTally, Tally, add_cause, layers
from service.core.faults.catalogue import FaultSpec
from service.core.faults.disturbance import Disturbance
from service.core.faults.plan import AssayPlan
from service.core.system.contract import WITNESS, invariant_table
from service.core.system.manifest import Envelope, Manifest, build_endpoints, invariants_of
from service.core.trial.oracle import FLAGS, Flag

INTERPRETATION = {
    "positive": "Under the tested configuration and represented faults, the declared invariants "
    "held with the observed recovery, proof and service profile.",
    "negative": "A negative result identifies where the architecture or control path failed.",
    "cannot_establish": "Neither result proves safety against unknown faults, malicious "
    "combinations, future drift, production incident rates, or a causal role "
    "for any language model component.",
}
_GRADED = ("intervention", "unfired", "baseline")
_SUMMED = ("intervention", "baseline")
_CONTROL_PAIRED = ("not_applicable", "untested", "invalid", "masked", "skipped")


def rates(arm: ArmCounts) -> Rates:
    d = max(arm.n, 1)
    return Rates(arm.n, {name: arm.count(name) / d for name in RATES})


def signature(arm: ArmCounts) -> Signature:
    counts = dict(zip(FLAGS, arm.flags, strict=True))
    counts["violation"] = arm.violations
    counts["effects"] = arm.effects
    intervals = {name: wilson(arm.count(name), arm.n) for name in FLAGS}
    return Signature(
        rates(arm), counts, intervals, {name: intervals[name][1] for name in UPPER_BOUNDED}
    )


def transfer(fault: ArmCounts, base: ArmCounts) -> Transfer | None:
    if base.n == 0 or fault.n == 0:
        return None
    t, lo, hi = newcombe(fault.violations, fault.n, base.violations, base.n)
    return Transfer(t, (lo, hi), fault.violations / fault.n, base.violations / base.n)


def _pair(spec: FaultSpec, cf: ArmCounts, iv: ArmCounts) -> tuple[float, float, float] | None:
    """The difference in the predicted violation without and with the removed controls."""
    if cf.n == 0 or iv.n == 0 or spec.predicted_transfer is None:
        return None
    flag = spec.predicted_transfer
    return newcombe(cf.count(flag), cf.n, iv.count(flag), iv.n)


def _control_pairs(
    spec: FaultSpec, tally: Tally, rm: Removal, plan: AssayPlan
) -> dict[str, ControlPair]:
    """Per nominated control, what its own pair showed, or why it has none."""
    iv = tally.arms["intervention"]
    controls: dict[str, ControlPair] = {}
    for control, how in rm.controls:
        entry = ControlPair(how if how != "switchable" else "untested")
        if how == "switchable" and plan.counterfactuals:
            single = tally.arm(rm.arm_of(control))
            pair = _pair(spec, single, iv)
            if pair is not None:
                d, lo, hi = pair
                # "carries": switching this control off alone lets the violation through.
                status = "carries" if lo > 0.0 else "no_effect"
                entry = ControlPair(status, single.n, d, (lo, hi))
        controls[control] = entry
    return controls


def counterfactual(
    spec: FaultSpec, tally: Tally, rm: Removal, plan: AssayPlan, manifest: Manifest
) -> Counterfactual:
    """The whole-set pair's verdict, and per nominated control what its own pair showed."""
    removed = tuple(sorted(rm.switchable))
    pt = spec.predicted_transfer
    base = Counterfactual(rm.status, removed, pt, _control_pairs(spec, tally, rm, plan))
    if rm.status != "run":
        return base
    if not plan.counterfactuals:
        return Counterfactual("skipped", removed, pt, base.controls)
    iv, cf = tally.arms["intervention"], tally.arms["counterfactual"]
    pair = _pair(spec, cf, iv)
    missed = tally.counterfactual_unfired + tally.counterfactual_errors
    runs = tally.counterfactual_runs
    if pair is None or pt is None or missed * 10 > runs:
        # No pair, or too many counterfactual runs that never met the fault (or failed): what
        # switching the control off does is not what these runs show.
        return Counterfactual("untested", removed, pt, base.controls, runs, missed)
    d, lo, hi = pair
    if lo > 0.0:
        verdict = "valid"
    elif len(rm.switchable) < len(rm.controls):
        # A nominated control without a pair of its own may be what contains the fault.
        verdict = "untested"
    elif iv.count(Flag.USEFUL_SERVICE) / iv.n < plan.envelope_for(manifest).floors.useful_service:
        # Not a green result that could not have been red: the system stopped before the
        # nominated control had to act, so its leverage is untested and the service floor holds.
        verdict = "masked"
    else:
        verdict = "invalid"
    figures = PairFigures(cf.n, cf.count(pt) / cf.n, iv.count(pt) / iv.n, d, (lo, hi), rates(cf))
    return Counterfactual(verdict, removed, pt, base.controls, runs, missed, figures)


def sensitivity(
    spec: FaultSpec, tally: Tally, cf: Counterfactual, envelope: Envelope
) -> Counterfactual:
    """The sensitivity pair: a naive agent derived from the tool contract, under the same fault in
    the same world. If the oracle does not see the predicted violation there, the assay could not
    have failed, and the evidence is invalid whatever the agent's own pairs say. Under
    `attribution: reported` the sensitivity pair alone decides the fault's validity."""
    naive = tally.arms.get("sensitivity")
    pt = spec.predicted_transfer
    if naive is None or naive.n == 0 or pt is None:
        return cf
    seen = naive.count(pt)
    status = "valid" if seen else "invalid"
    view = Sensitivity(status, naive.n, pt, seen, rates(naive))
    if status == "invalid":
        return _with(cf, "invalid", view, None)
    if envelope.attribution == "reported" and cf.status in _CONTROL_PAIRED:
        # Control pairs are reported, not required: the naive pair proved the assay can fail.
        return _with(cf, "valid", view, cf.status)
    return _with(cf, cf.status, view, None)


def _with(
    cf: Counterfactual, status: str, view: Sensitivity, pair_status: str | None
) -> Counterfactual:
    return Counterfactual(
        status,
        cf.removed,
        cf.predicted_transfer,
        cf.controls,
        cf.runs,
        cf.missed,
        cf.pair,
        view,
        pair_status,
    )


def _severities(manifest: Manifest) -> tuple[dict[str, str], frozenset[str]]:
    """Each invariant's severity, and the names of the team's own predicates."""
    if manifest.target.kind != "mcp":
        return {}, frozenset()
    inv = invariants_of(manifest)
    table: dict[str, str] = {name: sev for name, _expr, sev in invariant_table(inv)}
    table[WITNESS] = "block"
    # The witness check is reported by name like the team's predicates: its own reason.
    return table, frozenset([*(p.name for p in inv.predicates), WITNESS])


def invariants_view(tally: Tally, severities: dict[str, str]) -> dict[str, InvariantResult]:
    """Per invariant: its severity, how many graded trials it failed in, and where."""
    n = sum(tally.arms[a].n for a in _GRADED if a in tally.arms)
    out: dict[str, InvariantResult] = {}
    for name, sev in severities.items():
        by_arm = {a: tally.invariants.get(f"{a}:{name}", 0) for a in (*_GRADED, "sensitivity")}
        failed = sum(by_arm[a] for a in _GRADED)
        out[name] = InvariantResult(sev, failed, n, {a: k for a, k in by_arm.items() if k})
    return out


def diagnosis(spec: FaultSpec, arm: ArmCounts, cf: Counterfactual) -> Diagnosis | None:
    served = arm.count(Flag.USEFUL_SERVICE)
    if not (arm.violations or served < arm.n) or arm.n == 0:
        return None
    # Behaviour, not declaration: a control is missing unless its own pair showed it carries.
    missing = tuple(
        c.value
        for c in spec.nominated_control
        if (p := cf.controls.get(c.value)) is None or p.status != "carries"
    )
    return Diagnosis(
        f"{spec.boundary} ({spec.phase})",
        spec.signal_removed,
        missing,
        spec.remediation,
        arm.violations,
        arm.n - served,
    )


def storm_view(s: StormTally) -> StormView:
    n = s.trials
    return StormView(
        n,
        s.attempts / n,
        s.max_attempts,
        s.admitted,
        s.min_wait_ms,
        s.bare_peak,
        s.disciplined_peak,
        s.bare_done / n,
        s.disciplined_done / n,
    )


def _fault(
    spec: FaultSpec, t: Tally, cf: Counterfactual, plan: AssayPlan, inv: dict[str, InvariantResult]
) -> FaultResult:
    iv, unfired, base = t.arms["intervention"], t.arms["unfired"], t.arms["baseline"]
    return FaultResult(
        id=spec.id,
        domain=spec.domain.value,
        mode=spec.mode,
        coverage_key=spec.coverage_key(),
        spec=spec.model_dump(mode="json"),
        planned=t.planned,
        exercised=t.exercised,
        not_exercised=t.not_exercised,
        target_errors=t.target_errors,
        baseline_errors=t.baseline_errors,
        counterfactual_errors=t.counterfactual_errors,
        error_kinds=dict(sorted(t.error_kinds.items())),
        sandbox_refusals=t.sandbox_refusals,
        injector_refusals=t.injector_refusals,
        signature=signature(iv),
        unfired=rates(unfired) if unfired.n else None,
        baseline=rates(base) if plan.matched_baseline else None,
        transfer=transfer(iv, base),
        counterfactual=cf,
        diagnosis=diagnosis(spec, iv, cf),
        samples=tuple(t.samples),
        first_violation=t.first_violation,
        storm=storm_view(t.storm) if t.storm.trials else None,
        invariants=inv,
        error_causes={k: tuple(v) for k, v in sorted(t.error_causes.items())},
        applicability=applicability(spec, t),
        baseline_run=baseline_run(plan, spec),
    )


def _evidence(
    spec: FaultSpec,
    t: Tally,
    cf: Counterfactual,
    rm: Removal,
    reported: bool,
    team_failed: tuple[tuple[str, str, int, int], ...],
) -> FaultEvidence:
    iv = t.arms["intervention"]
    return FaultEvidence(
        spec.id,
        t.planned,
        t.exercised,
        dict(zip(FLAGS, iv.flags, strict=True)),
        cf.status,
        t.target_errors,
        t.sandbox_refusals,
        unfired=t.arms["unfired"].hard_counts(),
        baseline=t.arms["baseline"].hard_counts(),
        untested_controls=()
        if reported
        else tuple(
            (c, how)
            for c, how in rm.controls
            if how != "switchable" and not (how == "undeclared" and whole_transfer(spec, t, cf))
        ),
        error_kinds=dict(t.error_kinds),
        error_causes={k: v[0] for k, v in t.error_causes.items() if v},
        other_errors=t.baseline_errors + t.counterfactual_errors,
        invariants=team_failed,
        not_applicable=not_applicable(spec, t),
    )


def _summary(iv: ArmCounts, base: ArmCounts, plan: AssayPlan) -> Summary:
    return Summary(
        signature(iv), rates(base) if plan.matched_baseline else None, transfer(iv, base)
    )


def _fold(
    results: Iterable[ShardResult], stopped: str | None
) -> tuple[dict[str, Tally], int, str | None]:
    tallies: dict[str, Tally] = {}
    executed = 0
    for r in results:
        executed += r.trials
        if stopped is None and r.stop_reason is not None:
            stopped = r.stop_reason
        for fid, t in r.tallies.items():
            tallies.setdefault(fid, Tally()).merge(t)
    return tallies, executed, stopped


def _error_kinds(tallies: Iterable[Tally]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for t in tallies:
        for kind, n in t.error_kinds.items():
            kinds[kind] = kinds.get(kind, 0) + n
    return dict(sorted(kinds.items()))


def not_applicable(spec: FaultSpec, t: Tally) -> str | None:
    """Why the workload cannot reach `spec`: it never fired, and none of its matched baselines
    (the same task, nothing armed) reached its trigger either. None: it could (or nobody can
    say: the target reports no reach, or a baseline failed)."""
    if t.exercised or not t.baseline_reach or t.baseline_reached:
        return None
    need = "call it twice" if spec.disturbance is Disturbance.STALE_REPLAY else "reach it"
    return (
        f"{spec.id}: not applicable: the matched baseline did not {need} ({spec.target}) in "
        f"any of {t.baseline_reach} runs, and the fault never fired"
    )


def applicability(spec: FaultSpec, t: Tally) -> JSONObject | None:
    """What the matched baselines say about whether the workload reaches the fault (None for
    targets that do not report it)."""
    if not t.baseline_reach:
        return None
    why = not_applicable(spec, t)
    return {
        "status": "applicable" if why is None else "not_applicable",
        "baseline_runs": t.baseline_reach,
        "baseline_reached": t.baseline_reached,
        **({"evidence": why} if why is not None else {}),
    }


def _error_causes(tallies: Iterable[Tally]) -> dict[str, tuple[str, ...]]:
    into: dict[str, list[str]] = {}
    for t in tallies:
        for kind, messages in t.error_causes.items():
            for message in messages:
                add_cause(into, kind, message)
    return {k: tuple(v) for k, v in sorted(into.items())}


def merge(
    manifest: Manifest,
    plan: AssayPlan,
    results: Iterable[ShardResult],
    stopped: str | None = None,
    stops: Mapping[str, JSONObject] | None = None,
    spend: JSONObject | None = None,
    earlier: Mapping[str, Earlier] | None = None,
) -> AssayReport:
    """`stops`: a sequential plan's per-fault reason for stopping
    (service/core/evidence/stopping.py); `spend`: what the runs cost
    (service/core/evidence/spend.py `Meter.view`); `earlier`: per fault, what the release's
    earlier attempts graded of each floor (`release.earlier_records`)."""
    rule = plan.rule_for(manifest.target.kind)
    cat = plan.resolve_catalogue()
    faults = plan.faults()
    results = list(results)
    folded, executed, stopped = _fold(results, stopped)
    if spend is None and any(r.spend for r in results):
        # A worker's shards: their stored spend, summed.
        spend = from_views(r.spend for r in results).view(rule)
    if stops is None and rule == "sequential":
        stops = _stops(manifest, plan, folded, stopped)
    tallies = {f.id: folded.get(f.id) or Tally() for f in faults}
    tallies.update({fid: t for fid, t in folded.items() if fid not in tallies})
    severities, predicates = _severities(manifest)
    envelope = plan.envelope_for(manifest)
    reported = envelope.attribution == "reported"
    domains, declared = plan.domains(), build_endpoints(manifest)
    dom_arms = {d.value: {a: ArmCounts() for a in _SUMMED} for d in domains}
    all_arms = {a: ArmCounts() for a in _SUMMED}
    results_: list[FaultResult] = []
    evidence: list[FaultEvidence] = []
    for spec in faults:
        t = tallies[spec.id]
        for a in _SUMMED:
            dom_arms[spec.domain.value][a].merge(t.arms[a])
            all_arms[a].merge(t.arms[a])
        rm = removal(manifest, spec)
        cf = sensitivity(spec, t, counterfactual(spec, t, rm, plan, manifest), envelope)
        inv = invariants_view(t, severities) if severities else {}
        stop = None if stops is None else stops.get(spec.id)
        spent, before = _fault_spend(spend, spec.id), (earlier or {}).get(spec.id, {})
        checks = floor_checks(
            dict(zip(FLAGS, t.arms["intervention"].flags, strict=True)),
            t.arms["baseline"].hard_counts(),
            t.exercised,
            envelope,
            before,
            float(plan.error),
        )
        floors = tuple(c.view() for c in checks)
        fault, builds = _fault(spec, t, cf, plan, inv), endpoint_builds(declared, t.builds)
        results_.append(replace(fault, stop=stop, spend=spent, floors=floors, builds=t.builds))
        team_failed = tuple(
            (name, v.severity, v.failed, v.trials)
            for name, v in inv.items()
            if name in predicates and v.failed
        )
        cap = None if plan.paper else plan.trials
        fe = _evidence(spec, t, cf, rm, reported, team_failed)
        evidence.append(replace(fe, builds=builds, cap=cap, earlier=before))
    if plan.baseline == "shared" and not plan.paper:
        by_domain, all_arms["baseline"] = summed_once(faults, tallies)
        for d, arms in dom_arms.items():
            arms["baseline"] = by_domain.get(d, ArmCounts())
    # One exact reading of a clean record under every plan, at the strictest stated tolerance.
    said = declared_rate(plan, envelope)
    p0 = None if said is None else said[0]
    verdict = decide(evidence, envelope, stopped, error=float(plan.error), tolerance=p0)
    visited = {spec.coverage_key() for spec in faults if tallies[spec.id].exercised}
    return AssayReport(
        decision=verdict.decision,
        reasons=verdict.reasons,
        by_domain={
            d.value: _summary(
                dom_arms[d.value]["intervention"], dom_arms[d.value]["baseline"], plan
            )
            for d in domains
        },
        overall=_summary(all_arms["intervention"], all_arms["baseline"], plan),
        faults=tuple(results_),
        visited=tuple(sorted(visited)),
        not_visited=tuple(sorted(set(cat.coverage_keys()) - visited)),
        catalogue_version=cat.version,
        manifest_digest=manifest.digest(),
        component_hashes=manifest.component_hashes(),
        plan=plan.signed(),
        seed=plan.seed,
        trials_executed=executed,
        target_errors_total=sum(t.all_errors for t in tallies.values()),
        target_errors_by_kind=_error_kinds(tallies.values()),
        target_error_causes=_error_causes(tallies.values()),
        stopped=stopped,
        interpretation=INTERPRETATION,
        rule=rule,
        spend=None if spend is None else {k: v for k, v in spend.items() if k != "faults"},
        builds=endpoint_builds(declared, *(t.builds for t in tallies.values())),
        sandbox=layers(results),
    )


def _stops(
    manifest: Manifest, plan: AssayPlan, tallies: Mapping[str, Tally], stopped: str | None
) -> dict[str, JSONObject]:
    """Why each fault of a sequential plan stopped, read again from its tally: the rule is a
    function of the tally, so a worker's shard need not carry it (a shard cut short by a stop
    condition or a budget says so instead)."""
    out: dict[str, JSONObject] = {}
    for spec in plan.faults():
        t = tallies.get(spec.id)
        if t is None:
            continue
        stop = rule_for(manifest, plan, spec).step(t, t.planned)
        if stop is None:
            stop = Stop("stopped", stopped or "the fault's shard did not finish", t.planned)
        out[spec.id] = stop.view()
    return out


def _fault_spend(spend: JSONObject | None, fault: str) -> JSONObject | None:
    if spend is None:
        return None
    faults = spend.get("faults")
    if not isinstance(faults, Mapping):
        return None
    mine = faults.get(fault)
    return dict(mine) if isinstance(mine, Mapping) else None
