"""An assay: shards of trials, their tallies, and the report they merge into.

A shard is (fault, trial range) — or, in paper mode, a range of the script's global trial
sequence. Tallies are plain counts, so merging is addition: any split into shards, run in any
order on any number of workers, merges to exactly the figures of one sequential run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from service.core.catalogue import Catalogue, FaultSpec
from service.core.engine import TrialEngine
from service.core.errors import PlanInvalid
from service.core.gate import FaultEvidence, decide
from service.core.harness import Runtime, Storm, TrialRecord, run_trial
from service.core.manifest import Manifest
from service.core.oracle import FLAGS, VIOLATIONS, Outcome
from service.core.plan import AssayPlan
from service.core.rng import LCG, derive, stream_key
from service.core.signature import newcombe, wilson
from service.core.target import Target

# The arms every fault keeps. Counterfactual pairs for single controls add arms named
# "counterfactual:<control>" on demand.
ARMS = ("intervention", "baseline", "unfired", "counterfactual")
# Per arm: n, one count per oracle flag, hard-invariant violations, effects.
_N, _VIOLATION, _EFFECTS = 0, 1 + len(FLAGS), 2 + len(FLAGS)
_ARM_LEN = 3 + len(FLAGS)
_F = {name: 1 + i for i, name in enumerate(FLAGS)}
_UNSAFE = FLAGS.index("unsafe_escape")
# Storm counters and how they merge.
_STORM_SUM = ("trials", "attempts", "admitted", "bare_done", "disciplined_done")
_STORM_MAX = ("max_attempts", "bare_peak", "disciplined_peak")
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
    """Stop conditions a shard enforces; `used_*` is what earlier shards already spent."""

    max_effects: int | None = None
    max_unsafe: int | None = None
    max_target_errors: int | None = None
    deadline: float | None = None
    clock: Callable[[], float] | None = None
    used_effects: int = 0
    used_unsafe: int = 0
    used_target_errors: int = 0

    def tripped(self, effects: int, unsafe: int, target_errors: int = 0) -> str | None:
        effects += self.used_effects
        unsafe += self.used_unsafe
        target_errors += self.used_target_errors
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


_V1, _V2, _V3 = VIOLATIONS


def _violating(flags: tuple[bool, ...]) -> bool:
    # Three indexed reads: this runs for every arm of every trial.
    return flags[_V1] or flags[_V2] or flags[_V3]


class Tally:
    """Everything one fault's trials contribute, as mergeable counts."""

    __slots__ = (
        "arms",
        "baseline_errors",
        "counterfactual_errors",
        "counterfactual_runs",
        "counterfactual_unfired",
        "error_kinds",
        "exercised",
        "first_violation",
        "injector_refusals",
        "invariants",
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
        self.baseline_errors = 0
        # Counterfactual runs: attempted, failed by the target, and where the fault never fired.
        self.counterfactual_runs = 0
        self.counterfactual_errors = 0
        self.counterfactual_unfired = 0
        # Target-error causes by kind (the adapter's error type), across every arm.
        self.error_kinds: dict[str, int] = {}
        self.arms: dict[str, list[int]] = {a: [0] * _ARM_LEN for a in ARMS}
        self.storm: dict[str, int] = {}
        self.first_violation: dict[str, Any] | None = None
        self.samples: list[dict[str, Any]] = []
        # Effects the sandbox refused (outside the credential's subject namespace) and
        # injections the injector refused (outside the credential's scope or window).
        self.sandbox_refusals = 0
        self.injector_refusals = 0
        # Engine targets: failed invariants, counted per "<arm>:<invariant>".
        self.invariants: dict[str, int] = {}

    @property
    def all_errors(self) -> int:
        """Target errors in every run: the fault's trials, its baselines and its pairs."""
        return self.target_errors + self.baseline_errors + self.counterfactual_errors

    def arm(self, name: str) -> list[int]:
        counts = self.arms.get(name)
        if counts is None:
            counts = self.arms[name] = [0] * _ARM_LEN
        return counts

    def add_outcome(self, arm: str, rec: TrialRecord) -> None:
        self.add_flags(arm, rec.outcome)
        for name in rec.invariants:
            key = f"{arm}:{name}"
            self.invariants[key] = self.invariants.get(key, 0) + 1

    def add_flags(self, arm: str, outcome: Outcome) -> None:
        counts = self.arms.get(arm)
        if counts is None:
            counts = self.arms[arm] = [0] * _ARM_LEN
        counts[_N] += 1
        flags = outcome.flags
        for i, flag in enumerate(flags, 1):
            if flag:
                counts[i] += 1
        if flags[_V1] or flags[_V2] or flags[_V3]:
            counts[_VIOLATION] += 1
        counts[_EFFECTS] += outcome.effects

    def error(self, message: str) -> None:
        kind = message.split(":", 1)[0]
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    def add_storm(self, storm: Storm) -> None:
        attempts, admitted, min_wait, bare_peak, disc_peak, bare_done, disc_done = storm
        observed = {
            "trials": 1,
            "attempts": attempts,
            "admitted": int(admitted is not None),
            "bare_done": bare_done,
            "disciplined_done": disc_done,
            "max_attempts": attempts,
            "bare_peak": bare_peak,
            "disciplined_peak": disc_peak,
        }
        if min_wait is not None:
            observed["min_wait_ms"] = min_wait
        self._merge_storm(observed)

    def _merge_storm(self, other: dict[str, int]) -> None:
        s = self.storm
        for k in _STORM_SUM:
            if k in other:
                s[k] = s.get(k, 0) + other[k]
        for k in _STORM_MAX:
            if k in other:
                s[k] = max(s.get(k, 0), other[k])
        if "min_wait_ms" in other:
            s["min_wait_ms"] = min(s.get("min_wait_ms", other["min_wait_ms"]), other["min_wait_ms"])

    def merge(self, other: Tally) -> None:
        self.planned += other.planned
        self.exercised += other.exercised
        self.not_exercised += other.not_exercised
        self.target_errors += other.target_errors
        self.baseline_errors += other.baseline_errors
        self.counterfactual_runs += other.counterfactual_runs
        self.counterfactual_errors += other.counterfactual_errors
        self.counterfactual_unfired += other.counterfactual_unfired
        self.sandbox_refusals += other.sandbox_refusals
        self.injector_refusals += other.injector_refusals
        for kind, n in other.error_kinds.items():
            self.error_kinds[kind] = self.error_kinds.get(kind, 0) + n
        for key, n in other.invariants.items():
            self.invariants[key] = self.invariants.get(key, 0) + n
        for a, theirs in other.arms.items():
            mine = self.arm(a)
            for i in range(_ARM_LEN):
                mine[i] += theirs[i]
        self._merge_storm(other.storm)
        fv = [x for x in (self.first_violation, other.first_violation) if x is not None]
        self.first_violation = min(fv, key=lambda x: int(x["trial"])) if fv else None
        self.samples = sorted(self.samples + other.samples, key=lambda x: int(x["trial"]))[:SAMPLES]

    def to_dict(self) -> dict[str, Any]:
        return {
            "planned": self.planned,
            "exercised": self.exercised,
            "not_exercised": self.not_exercised,
            "target_errors": self.target_errors,
            "baseline_errors": self.baseline_errors,
            "counterfactual_runs": self.counterfactual_runs,
            "counterfactual_errors": self.counterfactual_errors,
            "counterfactual_unfired": self.counterfactual_unfired,
            "error_kinds": dict(sorted(self.error_kinds.items())),
            "arms": {a: list(v) for a, v in sorted(self.arms.items())},
            "storm": dict(sorted(self.storm.items())),
            "first_violation": self.first_violation,
            "samples": list(self.samples),
            "sandbox_refusals": self.sandbox_refusals,
            "injector_refusals": self.injector_refusals,
            **({"invariants": dict(sorted(self.invariants.items()))} if self.invariants else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tally:
        t = cls()
        t.planned, t.exercised = int(d["planned"]), int(d["exercised"])
        t.not_exercised, t.target_errors = int(d["not_exercised"]), int(d["target_errors"])
        t.baseline_errors = int(d.get("baseline_errors", 0))
        t.counterfactual_runs = int(d.get("counterfactual_runs", 0))
        t.counterfactual_errors = int(d.get("counterfactual_errors", 0))
        t.counterfactual_unfired = int(d.get("counterfactual_unfired", 0))
        t.error_kinds = {str(k): int(v) for k, v in d.get("error_kinds", {}).items()}
        for a, v in d["arms"].items():
            counts = [int(x) for x in v]
            if len(counts) == _ARM_LEN - 1:
                # Stored before `claim_violation` existed: it never fired there.
                counts.insert(_F["claim_violation"], 0)
            t.arms[a] = counts
        storm = d.get("storm", {})
        t.storm = {str(k): int(v) for k, v in storm.items()} if isinstance(storm, dict) else {}
        t.first_violation = d.get("first_violation")
        t.samples = list(d.get("samples", []))
        t.sandbox_refusals = int(d.get("sandbox_refusals", 0))
        t.injector_refusals = int(d.get("injector_refusals", 0))
        t.invariants = {str(k): int(v) for k, v in d.get("invariants", {}).items()}
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


def run_shard(
    manifest: Manifest,
    plan: AssayPlan,
    shard: ShardSpec,
    should_stop: Callable[[], bool] | None = None,
    target: Target | TrialEngine | None = None,
    batch: int = 50,
    limits: Limits | None = None,
    guard: Callable[[FaultSpec], str | None] | None = None,
    namespace: str | None = None,
) -> ShardResult:
    cat = plan.resolve_catalogue()
    rt = Runtime(manifest, cat, target, guard, namespace)
    faults = plan.faults()
    tallies: dict[str, Tally] = {}
    removals = {f.id: removal(manifest, f) for f in faults}
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
    threshold = plan.sample_threshold()
    sample_key = stream_key(plan.seed, "evidence-sample")
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
        extra = threshold is None or derive(sample_key, base + k) < threshold
        e, u, te = _one(rt, plan, spec, tally, base + k, wkey, skey, removals[spec.id], extra)
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
    rm: Removal,
    extra: bool = True,
) -> tuple[int, int, int]:
    """Run one trial's arms into the tally; return effects, unsafe escapes and target errors.

    Every trial is graded from the world. A target error hides nothing: when the world shows a
    violation the trial counts as graded evidence (damage beats error); only a clean world makes it
    a bare target error. A fault that never fired is still graded (never fired is not clean), and
    the matched baseline always runs (on every trial of the plan's evidence sample: `extra`).
    """
    tally.planned += 1
    rec = run_trial(rt, spec, wkey, skey)
    tally.sandbox_refusals += len(rec.world.refusals)
    tally.injector_refusals += len(rec.refusals)
    effects = rec.outcome.effects
    flags = rec.outcome.flags
    damaged = _violating(flags)
    errors = 0
    if rec.target_error is not None:
        tally.target_errors += 1
        tally.error(rec.target_error)
        errors = 1
    graded = rec.target_error is None or damaged
    if not rec.exercised:
        tally.not_exercised += 1
        if graded:
            tally.add_outcome("unfired", rec)
    elif graded:
        tally.exercised += 1
        tally.add_outcome("intervention", rec)
        if rec.sensitivity is not None:
            tally.add_flags("sensitivity", rec.sensitivity)
        if rec.storm is not None:
            tally.add_storm(rec.storm)
    if extra and plan.matched_baseline:
        base = run_trial(rt, None, wkey, skey)
        effects += base.outcome.effects
        if base.target_error is not None:
            tally.baseline_errors += 1
            tally.error(base.target_error)
            errors += 1
        if base.target_error is None or _violating(base.outcome.flags):
            tally.add_outcome("baseline", base)
    if extra and plan.counterfactuals and rec.exercised and graded:
        for arm, removed in rm.pairs():
            cf = run_trial(rt, spec, wkey, skey, removed)
            effects += cf.outcome.effects
            tally.counterfactual_runs += 1
            if cf.target_error is not None:
                tally.counterfactual_errors += 1
                tally.error(cf.target_error)
                errors += 1
            if not cf.exercised:
                # A pair that never meets the fault cannot show what the control does.
                tally.counterfactual_unfired += 1
            elif cf.target_error is None or _violating(cf.outcome.flags):
                tally.add_outcome(arm, cf)
    if graded and (len(tally.samples) < SAMPLES or (damaged and tally.first_violation is None)):
        sample = _sample(rec, trial)
        if len(tally.samples) < SAMPLES:
            tally.samples.append(sample)
        if damaged and tally.first_violation is None:
            tally.first_violation = sample
    return effects, int(graded and flags[_UNSAFE]), errors


def _sample(rec: TrialRecord, trial: int) -> dict[str, Any]:
    if rec.sample is not None:
        return {"trial": trial, **rec.sample, "outcome": rec.outcome.view()}
    world = rec.world
    return {
        "trial": trial,
        "injections": [r.view() for r in rec.receipts],
        "ledger": [e.view() for e in world.ledger],
        "evidence": [r.view() for r in world.evidence],
        "claim": world.claims[-1].view() if world.claims else None,
        "claims": [c.view() for c in world.claims],
        "target_error": rec.target_error,
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


def _pair(spec: FaultSpec, cf: list[int], iv: list[int]) -> tuple[float, float, float] | None:
    """The difference in the predicted violation without and with the removed controls."""
    if cf[_N] == 0 or iv[_N] == 0 or spec.predicted_transfer is None:
        return None
    idx = _F[spec.predicted_transfer]
    return newcombe(cf[idx], cf[_N], iv[idx], iv[_N])


def _counterfactual(
    spec: FaultSpec, tally: Tally, rm: Removal, plan: AssayPlan, manifest: Manifest
) -> dict[str, Any]:
    """The whole-set pair's verdict, and per nominated control what its own pair showed."""
    iv = tally.arms["intervention"]
    controls: dict[str, dict[str, Any]] = {}
    for control, how in rm.controls:
        entry: dict[str, Any] = {"status": how if how != "switchable" else "untested"}
        if how == "switchable" and plan.counterfactuals:
            single = tally.arm(rm.arm_of(control))
            pair = _pair(spec, single, iv)
            if pair is not None:
                d, lo, hi = pair
                # "carries": switching this control off alone lets the violation through.
                entry = {
                    "status": "carries" if lo > 0.0 else "no_effect",
                    "trials": single[_N],
                    "difference": d,
                    "interval": [lo, hi],
                }
        controls[control] = entry
    out: dict[str, Any] = {
        "status": rm.status,
        "removed": sorted(rm.switchable),
        "predicted_transfer": spec.predicted_transfer,
        "controls": controls,
    }
    if rm.status != "run":
        return out
    if not plan.counterfactuals:
        out["status"] = "skipped"
        return out
    cf = tally.arms["counterfactual"]
    pair = _pair(spec, cf, iv)
    missed = tally.counterfactual_unfired + tally.counterfactual_errors
    out["runs"] = tally.counterfactual_runs
    out["missed"] = missed
    if pair is None or spec.predicted_transfer is None or missed * 10 > tally.counterfactual_runs:
        # No pair, or too many counterfactual runs that never met the fault (or failed): what
        # switching the control off does is not what these runs show.
        out["status"] = "untested"
        return out
    d, lo, hi = pair
    idx = _F[spec.predicted_transfer]
    if lo > 0.0:
        verdict = "valid"
    elif len(rm.switchable) < len(rm.controls):
        # A nominated control without a pair of its own may be what contains the fault.
        verdict = "untested"
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


def _sensitivity(
    spec: FaultSpec, tally: Tally, cf: dict[str, Any], manifest: Manifest
) -> dict[str, Any]:
    """The sensitivity pair: a naive agent derived from the tool contract, under the same fault in
    the same world. If the oracle does not see the predicted violation there, the assay could not
    have failed, and the evidence is invalid whatever the agent's own pairs say. Under
    `attribution: reported` the sensitivity pair alone decides the fault's validity."""
    naive = tally.arms.get("sensitivity")
    if naive is None or naive[_N] == 0 or spec.predicted_transfer is None:
        return cf
    seen = naive[_F[spec.predicted_transfer]]
    status = "valid" if seen else "invalid"
    out = dict(cf)
    out["sensitivity"] = {
        "status": status,
        "trials": naive[_N],
        "predicted_transfer": spec.predicted_transfer,
        "seen": seen,
        "signature": _rates(naive),
    }
    if status == "invalid":
        out["status"] = "invalid"
    elif manifest.envelope.attribution == "reported" and cf["status"] in (
        "not_applicable",
        "untested",
        "invalid",
        "masked",
        "skipped",
    ):
        # Control pairs are reported, not required: the naive pair proved the assay can fail.
        out["pair_status"] = cf["status"]
        out["status"] = "valid"
    return out


def _severities(manifest: Manifest) -> tuple[dict[str, str], frozenset[str]]:
    """Each invariant's severity, and the names of the team's own predicates."""
    if manifest.target.kind != "mcp":
        return {}, frozenset()
    from service.core.contract import invariant_table, invariants_of

    inv = invariants_of(manifest)
    table: dict[str, str] = {name: sev for name, _expr, sev in invariant_table(inv)}
    return table, frozenset(p.name for p in inv.predicates)


def _invariants_view(tally: Tally, severities: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per invariant: its severity, how many graded trials it failed in, and where."""
    if not severities:
        return {}
    graded = ("intervention", "unfired", "baseline")
    n = sum(tally.arms[a][_N] for a in graded if a in tally.arms)
    out: dict[str, dict[str, Any]] = {}
    for name, sev in severities.items():
        by_arm = {a: tally.invariants.get(f"{a}:{name}", 0) for a in (*graded, "sensitivity")}
        out[name] = {
            "severity": sev,
            "failed": sum(by_arm[a] for a in graded),
            "trials": n,
            "by_arm": {a: k for a, k in by_arm.items() if k},
        }
    return out


def _diagnosis(
    spec: FaultSpec, arm: list[int], counterfactual: dict[str, Any]
) -> dict[str, Any] | None:
    negative = arm[_VIOLATION] or arm[_F["useful_service"]] < arm[_N]
    if not negative or arm[_N] == 0:
        return None
    # Behaviour, not declaration: a control is missing unless its own pair showed it carries.
    controls = counterfactual.get("controls", {})
    missing = [
        c.value
        for c in spec.nominated_control
        if controls.get(c.value, {}).get("status") != "carries"
    ]
    return {
        "first_boundary": f"{spec.boundary} ({spec.phase})",
        "earliest_signal": spec.signal_removed,
        "missing_control": missing,
        "remediation": spec.remediation,
        "violations": arm[_VIOLATION],
        "service_lost": arm[_N] - arm[_F["useful_service"]],
    }


def _storm_view(s: dict[str, int]) -> dict[str, Any]:
    n = s["trials"]
    return {
        "trials": n,
        "observed": {
            "attempts_mean": s.get("attempts", 0) / n,
            "attempts_max": s.get("max_attempts", 0),
            "admitted": s.get("admitted", 0),
            "shortest_wait_ms": s.get("min_wait_ms"),
        },
        "peak_concurrent_retries": {
            "without_jitter_or_budget_max": s.get("bare_peak", 0),
            "with_jitter_and_budget_max": s.get("disciplined_peak", 0),
        },
        "agents_completed_mean": {
            "without_jitter_or_budget": s.get("bare_done", 0) / n,
            "with_jitter_and_budget": s.get("disciplined_done", 0) / n,
        },
    }


def _error_kinds(tallies: Iterable[Tally]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for t in tallies:
        for kind, n in t.error_kinds.items():
            kinds[kind] = kinds.get(kind, 0) + n
    return dict(sorted(kinds.items()))


def _hard_counts(arm: list[int]) -> dict[str, int]:
    out = {name: arm[_F[name]] for name in FLAGS}
    out["n"] = arm[_N]
    return out


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
    severities, predicates = _severities(manifest)
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
        rm = removal(manifest, spec)
        cf = _sensitivity(spec, t, _counterfactual(spec, t, rm, plan, manifest), manifest)
        reported = manifest.envelope.attribution == "reported"
        if t.exercised:
            visited.add(spec.coverage_key())
        unfired = t.arms["unfired"]
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
            "baseline_errors": t.baseline_errors,
            "counterfactual_errors": t.counterfactual_errors,
            "error_kinds": dict(sorted(t.error_kinds.items())),
            "sandbox_refusals": t.sandbox_refusals,
            "injector_refusals": t.injector_refusals,
            "signature": _signature(iv),
            "unfired": _rates(unfired) if unfired[_N] else None,
            "baseline": _rates(t.arms["baseline"]) if plan.matched_baseline else None,
            "transfer": _transfer(iv, t.arms["baseline"]),
            "counterfactual": cf,
            "diagnosis": _diagnosis(spec, iv, cf),
            "samples": t.samples,
            "first_violation": t.first_violation,
        }
        if t.storm.get("trials"):
            entry["storm"] = _storm_view(t.storm)
        invariants = _invariants_view(t, severities)
        if invariants:
            entry["invariants"] = invariants
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
                unfired=_hard_counts(unfired),
                baseline=_hard_counts(t.arms["baseline"]),
                untested_controls=()
                if reported
                else tuple((c, how) for c, how in rm.controls if how != "switchable"),
                error_kinds=dict(t.error_kinds),
                other_errors=t.baseline_errors + t.counterfactual_errors,
                invariants=tuple(
                    (name, v["severity"], v["failed"], v["trials"])
                    for name, v in invariants.items()
                    if name in predicates and v["failed"]
                ),
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
        "target_errors": {
            "total": sum(t.all_errors for t in tallies.values()),
            "by_kind": _error_kinds(tallies.values()),
        },
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
    limits: Limits | None = None,
) -> AssayReport:
    """Run every shard in turn; a tripped stop condition ends the assay (and blocks it)."""
    shards = plan_shards(manifest, plan, trials_per_shard)
    total = sum(s.stop - s.start for s in shards)
    # Shard results are folded as they come: memory stays flat however many trials run.
    folded = ShardResult(-1, {}, 0)
    done = 0
    stopped: str | None = None
    for shard in shards:
        result = run_shard(manifest, plan, shard, target=target, limits=limits)
        folded.trials += result.trials
        for fid, tally in result.tallies.items():
            mine = folded.tallies.get(fid)
            if mine is None:
                folded.tallies[fid] = tally
            else:
                mine.merge(tally)
        done += shard.stop - shard.start
        if progress is not None:
            progress(done, total)
        if result.stop_reason is not None:
            stopped = result.stop_reason
            break
        if limits is not None:
            errors = sum(t.all_errors for t in result.tallies.values())
            limits = replace(
                limits,
                used_effects=limits.used_effects + result.effects,
                used_unsafe=limits.used_unsafe + result.unsafe,
                used_target_errors=limits.used_target_errors + errors,
            )
    return merge(manifest, plan, [folded], stopped)


def replay_trial(
    manifest: Manifest, plan: AssayPlan, index: int, target: Target | TrialEngine | None = None
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
        "calls": rec.trace if rec.sample is None else rec.sample.get("calls"),
        "world": rec.world.view(),
        **{key: sample[key] for key in ("injections", "ledger", "evidence", "claim", "outcome")},
    }
