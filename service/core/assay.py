"""An assay: shards of trials, their tallies, and the report they merge into.

A shard is (fault, trial range) — or, in paper mode, a range of the script's global trial
sequence. Tallies are plain counts, so merging is addition: any split into shards, run in any
order on any number of workers, merges to exactly the figures of one sequential run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from service.core.catalogue import Catalogue, FaultSpec
from service.core.copperfin import Target
from service.core.errors import PlanInvalid
from service.core.gate import FaultEvidence, decide
from service.core.harness import Runtime, TrialRecord, run_trial
from service.core.manifest import Manifest
from service.core.oracle import FLAGS
from service.core.plan import AssayPlan
from service.core.rng import LCG, derive, stream_key
from service.core.signature import newcombe, wilson

ARMS = ("intervention", "baseline", "counterfactual")
# Per arm: n, one count per oracle flag, hard-invariant violations, effects.
_N, _VIOLATION, _EFFECTS = 0, 1 + len(FLAGS), 2 + len(FLAGS)
_ARM_LEN = 3 + len(FLAGS)
_F = {name: 1 + i for i, name in enumerate(FLAGS)}
_UNSAFE, _UNVERIFIABLE = _F["unsafe_escape"], _F["unverifiable_release"]
SAMPLES = 3
REFERENCE_RATES = (
    "detected",
    "contained",
    "recovered",
    "verified",
    "useful_service",
    "unsafe_escape",
    "duplicate_effect",
    "unverifiable_release",
    "service_loss",
)
INTERPRETATION = {
    "positive": "Under the tested configuration and represented faults, the declared invariants "
    "held with the observed recovery, proof and service profile.",
    "negative": "A negative result identifies where the architecture or control path failed.",
    "cannot_establish": "Neither result proves safety against unknown faults, malicious "
    "combinations, future drift, production incident rates, or a causal role "
    "for any language model component.",
}


@dataclass(frozen=True)
class Limits:
    """Stop conditions a shard enforces, as what remains of the assay's budget."""

    max_effects: int | None = None
    max_unsafe: int | None = None
    max_target_errors: int | None = None
    deadline: float | None = None
    clock: Callable[[], float] | None = None

    def tripped(self, effects: int, unsafe: int, target_errors: int = 0) -> str | None:
        if self.max_effects is not None and effects > self.max_effects:
            return f"effects above the cap ({effects} > {self.max_effects})"
        if self.max_unsafe is not None and unsafe > self.max_unsafe:
            return f"unsafe escapes above the limit ({unsafe} > {self.max_unsafe})"
        if self.max_target_errors is not None and target_errors > self.max_target_errors:
            return f"target errors above the limit ({target_errors} > {self.max_target_errors})"
        if self.deadline is not None and self.clock is not None and self.clock() > self.deadline:
            return "wall-clock deadline passed"
        return None


@dataclass(frozen=True)
class ShardSpec:
    index: int
    fault_id: str | None
    start: int
    stop: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "fault_id": self.fault_id,
            "start": self.start,
            "stop": self.stop,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShardSpec:
        return cls(int(d["index"]), d.get("fault_id"), int(d["start"]), int(d["stop"]))


class Tally:
    """Everything one fault's trials contribute, as mergeable counts."""

    __slots__ = (
        "arms",
        "exercised",
        "first_violation",
        "injector_refusals",
        "not_exercised",
        "planned",
        "samples",
        "sandbox_refusals",
        "storm",
        "target_errors",
    )

    def __init__(self) -> None:
        self.planned = 0
        self.exercised = 0
        self.not_exercised = 0
        self.target_errors = 0
        self.arms: dict[str, list[int]] = {a: [0] * _ARM_LEN for a in ARMS}
        # trials, sum and max configured peak, max peak bare, max peak disciplined,
        # completed bare, completed disciplined
        self.storm = [0, 0, 0, 0, 0, 0, 0]
        self.first_violation: dict[str, Any] | None = None
        self.samples: list[dict[str, Any]] = []
        # Effects the sandbox refused (outside the credential's subject namespace) and
        # injections the injector refused (outside the credential's scope or window).
        self.sandbox_refusals = 0
        self.injector_refusals = 0

    def add_outcome(self, arm: str, rec: TrialRecord) -> None:
        counts = self.arms[arm]
        counts[_N] += 1
        i = 1
        for flag in rec.outcome.flags:
            if flag:
                counts[i] += 1
            i += 1
        if rec.outcome.flags[5] or rec.outcome.flags[8]:
            counts[_VIOLATION] += 1
        counts[_EFFECTS] += rec.outcome.effects

    def merge(self, other: Tally) -> None:
        self.planned += other.planned
        self.exercised += other.exercised
        self.not_exercised += other.not_exercised
        self.target_errors += other.target_errors
        self.sandbox_refusals += other.sandbox_refusals
        self.injector_refusals += other.injector_refusals
        for a in ARMS:
            mine, theirs = self.arms[a], other.arms[a]
            for i in range(_ARM_LEN):
                mine[i] += theirs[i]
        s, o = self.storm, other.storm
        self.storm = [
            s[0] + o[0],
            s[1] + o[1],
            max(s[2], o[2]),
            max(s[3], o[3]),
            max(s[4], o[4]),
            s[5] + o[5],
            s[6] + o[6],
        ]
        fv = [x for x in (self.first_violation, other.first_violation) if x is not None]
        self.first_violation = min(fv, key=lambda x: int(x["trial"])) if fv else None
        self.samples = sorted(self.samples + other.samples, key=lambda x: int(x["trial"]))[:SAMPLES]

    def to_dict(self) -> dict[str, Any]:
        return {
            "planned": self.planned,
            "exercised": self.exercised,
            "not_exercised": self.not_exercised,
            "target_errors": self.target_errors,
            "arms": {a: list(v) for a, v in self.arms.items()},
            "storm": list(self.storm),
            "first_violation": self.first_violation,
            "samples": list(self.samples),
            "sandbox_refusals": self.sandbox_refusals,
            "injector_refusals": self.injector_refusals,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tally:
        t = cls()
        t.planned, t.exercised = int(d["planned"]), int(d["exercised"])
        t.not_exercised, t.target_errors = int(d["not_exercised"]), int(d["target_errors"])
        t.arms = {a: [int(x) for x in d["arms"][a]] for a in ARMS}
        t.storm = [int(x) for x in d["storm"]]
        t.first_violation = d.get("first_violation")
        t.samples = list(d.get("samples", []))
        t.sandbox_refusals = int(d.get("sandbox_refusals", 0))
        t.injector_refusals = int(d.get("injector_refusals", 0))
        return t


@dataclass
class ShardResult:
    index: int
    tallies: dict[str, Tally]
    trials: int
    stopped: bool = False
    # Why the shard stopped early: an abort, or a stop condition that tripped.
    stop_reason: str | None = None
    effects: int = 0
    unsafe: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "trials": self.trials,
            "stopped": self.stopped,
            "stop_reason": self.stop_reason,
            "effects": self.effects,
            "unsafe": self.unsafe,
            "tallies": {k: v.to_dict() for k, v in sorted(self.tallies.items())},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShardResult:
        return cls(
            int(d["index"]),
            {k: Tally.from_dict(v) for k, v in d["tallies"].items()},
            int(d["trials"]),
            bool(d.get("stopped", False)),
            d.get("stop_reason"),
            int(d.get("effects", 0)),
            int(d.get("unsafe", 0)),
        )


def plan_shards(
    manifest: Manifest, plan: AssayPlan, trials_per_shard: int = 250
) -> list[ShardSpec]:
    del manifest  # shards depend on the plan alone; the signature keeps callers uniform
    size = max(1, trials_per_shard)
    shards: list[ShardSpec] = []
    if plan.paper:
        plan.faults()
        for start in range(0, plan.trials, size):
            shards.append(ShardSpec(len(shards), None, start, min(plan.trials, start + size)))
        return shards
    for spec in plan.faults():
        for start in range(0, plan.trials, size):
            shards.append(ShardSpec(len(shards), spec.id, start, min(plan.trials, start + size)))
    return shards


def stream_roots(plan: AssayPlan, fault_id: str | None) -> tuple[int, int]:
    """Root keys of the workload and storm streams of a fault (or of paper mode's sequence)."""
    if fault_id is None:
        return stream_key(plan.seed, "paper"), stream_key(plan.seed, "storm")
    return stream_key(plan.seed, "w", fault_id), stream_key(plan.seed, "s", fault_id)


def trial_keys(plan: AssayPlan, fault_id: str | None, k: int) -> tuple[int, int]:
    """The workload and storm stream keys of one trial."""
    wroot, sroot = stream_roots(plan, fault_id)
    return derive(wroot, k), derive(sroot, k)


def trial_at(plan: AssayPlan, cat: Catalogue, index: int) -> tuple[FaultSpec, str | None, int]:
    """The fault, shard fault id and in-fault index of a global trial number."""
    faults = plan.faults()
    total = plan.trials if plan.paper else plan.trials * len(faults)
    if not 0 <= index < total:
        raise PlanInvalid(f"trial must be in [0, {total})", field="trial")
    if plan.paper:
        domains = plan.domains()
        lcg = LCG(plan.seed)
        lcg.skip(index)
        spec = lcg.choice(cat.in_domain(domains[index % len(domains)]))
        return spec, None, index
    spec = faults[index // plan.trials]
    return spec, spec.id, index % plan.trials


def _removal(manifest: Manifest, spec: FaultSpec) -> tuple[str, frozenset[str]]:
    """Which controls a fault's counterfactual run removes, or why it has none."""
    if not spec.nominated_control:
        return "not_applicable", frozenset()
    enabled = {c.value for c in manifest.controls.enabled()}
    on = frozenset(c.value for c in spec.nominated_control if c.value in enabled)
    if not on:
        return "not_applicable", frozenset()
    if any(c.value in on for c in manifest.target.cannot_disable):
        return "untested", on
    return "run", on


def run_shard(
    manifest: Manifest,
    plan: AssayPlan,
    shard: ShardSpec,
    should_stop: Callable[[], bool] | None = None,
    target: Target | None = None,
    batch: int = 50,
    limits: Limits | None = None,
    guard: Callable[[FaultSpec], str | None] | None = None,
    namespace: str | None = None,
) -> ShardResult:
    cat = plan.resolve_catalogue()
    rt = Runtime(manifest, cat, target, guard, namespace)
    faults = plan.faults()
    tallies: dict[str, Tally] = {}
    removals = {f.id: _removal(manifest, f) for f in faults}
    if shard.fault_id is not None:
        spec = cat.by_id(shard.fault_id)
        pos = next(i for i, f in enumerate(faults) if f.id == spec.id)
        base = pos * plan.trials

        def pick(k: int) -> FaultSpec:
            return spec
    else:
        base = 0
        domains = plan.domains()
        by_domain = [cat.in_domain(d) for d in domains]
        lcg = LCG(plan.seed)
        lcg.skip(shard.start)
        nd = len(domains)

        def pick(k: int) -> FaultSpec:
            return lcg.choice(by_domain[k % nd])

    wroot, sroot = stream_roots(plan, shard.fault_id)
    done = effects = unsafe = target_errors = 0
    reason: str | None = None
    for k in range(shard.start, shard.stop):
        if should_stop is not None and done % batch == 0 and should_stop():
            reason = "aborted"
            break
        spec = pick(k)
        wkey, skey = derive(wroot, k), derive(sroot, k)
        tally = tallies.get(spec.id)
        if tally is None:
            tally = tallies[spec.id] = Tally()
        e, u, te = _one(rt, plan, spec, tally, base + k, wkey, skey, removals[spec.id])
        effects += e
        unsafe += u
        target_errors += te
        done += 1
        if limits is not None:
            reason = limits.tripped(effects, unsafe, target_errors)
            if reason is not None:
                break
    return ShardResult(shard.index, tallies, done, reason is not None, reason, effects, unsafe)


def _one(
    rt: Runtime,
    plan: AssayPlan,
    spec: FaultSpec,
    tally: Tally,
    trial: int,
    wkey: int,
    skey: int,
    removal: tuple[str, frozenset[str]],
) -> tuple[int, int, int]:
    """Run one trial's arms into the tally; return effects, unsafe escapes and target errors."""
    tally.planned += 1
    rec = run_trial(rt, spec, wkey, skey)
    tally.sandbox_refusals += len(rec.world.refusals)
    tally.injector_refusals += len(rec.refusals)
    effects = rec.outcome.effects
    if rec.target_error:
        # The target itself failed: evidence of nothing, never graded, never contained.
        tally.target_errors += 1
        return effects, 0, 1
    if not rec.exercised:
        # A fault that never fired proves nothing about containment: counted apart, never graded.
        tally.not_exercised += 1
        return effects, 0, 0
    tally.exercised += 1
    tally.add_outcome("intervention", rec)
    if rec.storm is not None:
        configured, bare, disciplined, bare_done, disc_done = rec.storm
        s = tally.storm
        s[0] += 1
        s[1] += configured
        s[2] = max(s[2], configured)
        s[3] = max(s[3], bare)
        s[4] = max(s[4], disciplined)
        s[5] += bare_done
        s[6] += disc_done
    if plan.matched_baseline:
        base = run_trial(rt, None, wkey, skey)
        effects += base.outcome.effects
        if not base.target_error:
            tally.add_outcome("baseline", base)
    status, removed = removal
    if plan.counterfactuals and status == "run":
        cf = run_trial(rt, spec, wkey, skey, removed)
        effects += cf.outcome.effects
        if cf.exercised and not cf.target_error:
            tally.add_outcome("counterfactual", cf)
    flags = rec.outcome.flags
    violating = flags[5] or flags[8]
    if len(tally.samples) < SAMPLES or (violating and tally.first_violation is None):
        sample = _sample(rec, trial)
        if len(tally.samples) < SAMPLES:
            tally.samples.append(sample)
        if violating and tally.first_violation is None:
            tally.first_violation = sample
    return effects, int(flags[5]), 0


def _sample(rec: TrialRecord, trial: int) -> dict[str, Any]:
    world = rec.world
    return {
        "trial": trial,
        "injections": [r.view() for r in rec.receipts],
        "ledger": [e.view() for e in world.ledger],
        "evidence": [r.view() for r in world.evidence],
        "claim": world.claims[-1].view() if world.claims else None,
        "outcome": rec.outcome.view(),
    }


# -- the report ----------------------------------------------------------------------------------


def _rates(arm: list[int]) -> dict[str, Any]:
    n = arm[_N]
    d = max(n, 1)
    out: dict[str, Any] = {"trials": n}
    for name in (*REFERENCE_RATES, "wrong_subject"):
        out[name] = arm[_F[name]] / d
    return out


def _signature(arm: list[int]) -> dict[str, Any]:
    n = arm[_N]
    out = _rates(arm)
    out["counts"] = {name: arm[_F[name]] for name in FLAGS}
    out["counts"]["violation"] = arm[_VIOLATION]
    out["counts"]["effects"] = arm[_EFFECTS]
    out["intervals"] = {name: list(wilson(arm[_F[name]], n)) for name in FLAGS}
    out["upper_bounds"] = {
        name: wilson(arm[_F[name]], n)[1]
        for name in ("unsafe_escape", "duplicate_effect", "unverifiable_release", "wrong_subject")
    }
    return out


def _transfer(fault: list[int], base: list[int]) -> dict[str, Any] | None:
    if base[_N] == 0 or fault[_N] == 0:
        return None
    t, lo, hi = newcombe(fault[_VIOLATION], fault[_N], base[_VIOLATION], base[_N])
    return {
        "violation": t,
        "interval": [lo, hi],
        "with_fault": fault[_VIOLATION] / fault[_N],
        "without_fault": base[_VIOLATION] / base[_N],
    }


def _counterfactual(
    spec: FaultSpec,
    tally: Tally,
    status: str,
    removed: frozenset[str],
    plan: AssayPlan,
    manifest: Manifest,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "status": status,
        "removed": sorted(removed),
        "predicted_transfer": spec.predicted_transfer,
    }
    if status != "run":
        return out
    cf, iv = tally.arms["counterfactual"], tally.arms["intervention"]
    if not plan.counterfactuals:
        out["status"] = "skipped"
        return out
    if cf[_N] == 0 or iv[_N] == 0 or spec.predicted_transfer is None:
        out["status"] = "untested"
        return out
    idx = _F[spec.predicted_transfer]
    d, lo, hi = newcombe(cf[idx], cf[_N], iv[idx], iv[_N])
    if lo > 0.0:
        verdict = "valid"
    elif iv[_F["useful_service"]] / iv[_N] < manifest.envelope.floors.useful_service:
        # Not a green result that could not have been red: the system stopped before the
        # nominated control had to act, so its leverage is untested and the service floor holds.
        verdict = "masked"
    else:
        verdict = "invalid"
    out.update(
        {
            "status": verdict,
            "trials": cf[_N],
            "rate_without_control": cf[idx] / cf[_N],
            "rate_with_control": iv[idx] / iv[_N],
            "difference": d,
            "interval": [lo, hi],
            "signature_without_control": _rates(cf),
        }
    )
    return out


def _diagnosis(spec: FaultSpec, manifest: Manifest, arm: list[int]) -> dict[str, Any] | None:
    negative = arm[_VIOLATION] or arm[_F["useful_service"]] < arm[_N]
    if not negative or arm[_N] == 0:
        return None
    enabled = {c.value for c in manifest.controls.enabled()}
    missing = [c.value for c in spec.nominated_control if c.value not in enabled]
    return {
        "first_boundary": f"{spec.boundary} ({spec.phase})",
        "earliest_signal": spec.signal_removed,
        "missing_control": missing,
        "remediation": spec.remediation,
        "violations": arm[_VIOLATION],
        "service_lost": arm[_N] - arm[_F["useful_service"]],
    }


class AssayReport:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    @property
    def decision(self) -> str:
        return str(self.data["decision"])

    def to_dict(self) -> dict[str, Any]:
        return self.data


def merge(
    manifest: Manifest, plan: AssayPlan, results: Iterable[ShardResult], stopped: str | None = None
) -> AssayReport:
    cat = plan.resolve_catalogue()
    faults = plan.faults()
    tallies: dict[str, Tally] = {f.id: Tally() for f in faults}
    executed = 0
    for r in results:
        executed += r.trials
        if stopped is None and r.stop_reason is not None:
            stopped = r.stop_reason
        for fid, t in r.tallies.items():
            tallies.setdefault(fid, Tally()).merge(t)
    out_faults: list[dict[str, Any]] = []
    evidence: list[FaultEvidence] = []
    domains = plan.domains()
    dom_arms = {d.value: {a: [0] * _ARM_LEN for a in ("intervention", "baseline")} for d in domains}
    all_arms = {a: [0] * _ARM_LEN for a in ("intervention", "baseline")}
    visited: set[str] = set()
    for spec in faults:
        t = tallies[spec.id]
        iv = t.arms["intervention"]
        for a in ("intervention", "baseline"):
            for i in range(_ARM_LEN):
                dom_arms[spec.domain.value][a][i] += t.arms[a][i]
                all_arms[a][i] += t.arms[a][i]
        status, removed = _removal(manifest, spec)
        cf = _counterfactual(spec, t, status, removed, plan, manifest)
        if t.exercised:
            visited.add(spec.coverage_key())
        entry: dict[str, Any] = {
            "id": spec.id,
            "domain": spec.domain.value,
            "mode": spec.mode,
            "coverage_key": spec.coverage_key(),
            "spec": spec.model_dump(mode="json"),
            "planned": t.planned,
            "exercised": t.exercised,
            "not_exercised": t.not_exercised,
            "target_errors": t.target_errors,
            "sandbox_refusals": t.sandbox_refusals,
            "injector_refusals": t.injector_refusals,
            "signature": _signature(iv),
            "baseline": _rates(t.arms["baseline"]) if plan.matched_baseline else None,
            "transfer": _transfer(iv, t.arms["baseline"]),
            "counterfactual": cf,
            "diagnosis": _diagnosis(spec, manifest, iv),
            "samples": t.samples,
            "first_violation": t.first_violation,
        }
        if t.storm[0]:
            s = t.storm
            entry["storm"] = {
                "trials": s[0],
                "peak_concurrent_retries": {
                    "configured_mean": s[1] / s[0],
                    "configured_max": s[2],
                    "without_jitter_or_budget_max": s[3],
                    "with_jitter_and_budget_max": s[4],
                },
                "agents_completed_mean": {
                    "without_jitter_or_budget": s[5] / s[0],
                    "with_jitter_and_budget": s[6] / s[0],
                },
            }
        out_faults.append(entry)
        evidence.append(
            FaultEvidence(
                spec.id,
                t.planned,
                t.exercised,
                {name: iv[_F[name]] for name in FLAGS},
                cf["status"],
                t.target_errors,
                t.sandbox_refusals,
            )
        )
    verdict = decide(evidence, manifest.envelope, stopped)
    by_domain: dict[str, Any] = {}
    for d in domains:
        arms = dom_arms[d.value]
        sig = _signature(arms["intervention"])
        sig["baseline"] = _rates(arms["baseline"]) if plan.matched_baseline else None
        sig["transfer"] = _transfer(arms["intervention"], arms["baseline"])
        by_domain[d.value] = sig
    overall = _signature(all_arms["intervention"])
    overall["baseline"] = _rates(all_arms["baseline"]) if plan.matched_baseline else None
    overall["transfer"] = _transfer(all_arms["intervention"], all_arms["baseline"])
    all_keys = set(cat.coverage_keys())
    plan_dump = plan.model_dump(mode="json")
    if isinstance(plan.catalogue, Catalogue):
        plan_dump["catalogue"] = {"version": cat.version}
    data = {
        "decision": verdict.decision.value,
        "reasons": [r.view() for r in verdict.reasons],
        "by_domain": by_domain,
        "overall": overall,
        "faults": out_faults,
        "coverage": {"visited": sorted(visited), "not_visited": sorted(all_keys - visited)},
        "catalogue_version": cat.version,
        "manifest_digest": manifest.digest(),
        "component_hashes": manifest.component_hashes(),
        "plan": plan_dump,
        "seed": plan.seed,
        "trials_executed": executed,
        "stopped": stopped,
        "interpretation": INTERPRETATION,
    }
    return AssayReport(data)


def run_assay(
    manifest: Manifest,
    plan: AssayPlan,
    target: Target | None = None,
    progress: Callable[[int, int], None] | None = None,
    trials_per_shard: int = 500,
) -> AssayReport:
    shards = plan_shards(manifest, plan, trials_per_shard)
    total = sum(s.stop - s.start for s in shards)
    results: list[ShardResult] = []
    done = 0
    for shard in shards:
        results.append(run_shard(manifest, plan, shard, target=target))
        done += shard.stop - shard.start
        if progress is not None:
            progress(done, total)
    return merge(manifest, plan, results)


def replay_trial(
    manifest: Manifest, plan: AssayPlan, index: int, target: Target | None = None
) -> dict[str, Any]:
    """Re-execute one trial of a run and return its full trace."""
    cat = plan.resolve_catalogue()
    spec, fault_id, k = trial_at(plan, cat, index)
    wkey, skey = trial_keys(plan, fault_id, k)
    rt = Runtime(manifest, cat, target)
    rec = run_trial(rt, spec, wkey, skey, capture=True)
    sample = _sample(rec, index)
    return {
        "trial": index,
        "fault": spec.id,
        "coverage_key": spec.coverage_key(),
        "exercised": rec.exercised,
        "target_error": rec.target_error,
        "workload": rec.workload.view(),
        "calls": rec.trace,
        "world": rec.world.view(),
        **{key: sample[key] for key in ("injections", "ledger", "evidence", "claim", "outcome")},
    }
