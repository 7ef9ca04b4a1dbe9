"""How an assay is cut into shards and keyed: the stop conditions a shard enforces (`StopLimits`)
and where every executor reads them with the budgets (`Stops`), a shard's span (`ShardSpec`), the
plan's shards, the stream keys that make a trial the same trial wherever and however often it
runs, and what a running shard reports (`ShardActivity`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from service.core.errors import PlanInvalid
from service.core.evidence.spend import Meter, budgeted
from service.core.evidence.tally import Tally
from service.core.faults.catalogue import Catalogue, FaultSpec, baseline_group
from service.core.faults.plan import AssayPlan, StopConditions
from service.core.system.manifest import Manifest
from service.core.trial.rng import LCG, derive, shared_root, stream_key


class ShardActivity(TypedDict):
    """What a running shard's engine is doing, as its heartbeat stores it and the API, the pages
    and `submit --wait` show it: the team's agent runs done (a trial's arms each count:
    intervention, matched baseline, counterfactual pairs), the gate's own runs (the sensitivity
    pair's naive agent, which costs the team nothing; absent from progress stored before it was
    counted), its slots, how many are busy, and what the busy ones wait for (`lock`, `reset`,
    `agent`, `probe`, `grade`)."""

    runs_done: int
    gate_runs_done: NotRequired[int]
    slots: int
    slots_busy: int
    waiting: dict[str, int]


@dataclass(frozen=True)
class StopLimits:
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


class Stops:
    """Every stop the scheduler reads (`service.core.shards.counting`), in the serial run's
    order, so it stops where the serial run does at any concurrency: before a trial is counted,
    an abort (asked every `batch` trials) and a budget; after it, effects, unsafe escapes and
    target errors (`limits`) and the budgets; and before a trial starts, whether a budget admits
    it (`admits`). Pure: the caller keeps the counts and the order, and reads these under its
    own lock."""

    __slots__ = ("batch", "budget", "limits", "meter", "should_stop", "stop")

    def __init__(
        self,
        stop: StopConditions,
        limits: StopLimits | None,
        meter: Meter | None,
        should_stop: Callable[[], bool] | None,
        batch: int,
    ) -> None:
        self.stop = stop
        self.limits = limits
        self.meter = meter
        # Budgets are read only when the plan sets one (and the run is metered).
        self.budget = meter is not None and budgeted(stop)
        self.should_stop = should_stop
        self.batch = batch

    def opening(self) -> str | None:
        """Before any trial starts: an abort already asked for."""
        if self.should_stop is not None and self.should_stop():
            return "aborted"
        return None

    def before(self, done: int) -> str | None:
        """Before the trial counted after `done` others: an abort (asked once every `batch`
        trials, as the serial loop asks), then a budget already spent."""
        if self.should_stop is not None and done and done % self.batch == 0 and self.should_stop():
            return "aborted"
        if self.budget and self.meter is not None:
            return self.meter.refuses(self.stop)
        return None

    def after(self, effects: int, unsafe: int, target_errors: int) -> str | None:
        """After a trial is counted (the run's counts so far): a stop condition, then a budget
        it took over."""
        reason = None
        if self.limits is not None:
            reason = self.limits.tripped(effects, unsafe, target_errors)
        if reason is None and self.budget and self.meter is not None:
            reason = self.meter.exceeded(self.stop)
        return reason

    def admits(self, ahead: int) -> bool | str:
        """Whether a budget lets the next trial start, with `ahead` trials before it started or
        due and not counted yet: True; False, to wait for those (before any is counted there is
        nothing to estimate from, and a refusal may lift as they count); or, with none ahead,
        the refusal's reason: the serial loop stops here."""
        meter = self.meter
        if not self.budget or meter is None:
            return True
        if meter.waits(self.stop, ahead):
            return False
        no = meter.refuses(self.stop, ahead)
        if no is None:
            return True
        return no if ahead == 0 else False

    def settled(self, reason: str | None) -> str | None:
        """The run's stop reason once every slot has stopped (a budget's restated as spent)."""
        if reason is not None and self.meter is not None:
            return self.meter.settled(self.stop, reason)
        return reason


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

    def __reduce__(self) -> tuple[type[ShardSpec], tuple[int, str | None, int, int]]:
        # The compiled (mypyc) frozen class refuses pickle's default attribute restore; worker
        # processes receive shards by constructor arguments instead.
        return (ShardSpec, (self.index, self.fault_id, self.start, self.stop))


def plan_shards(
    manifest: Manifest, plan: AssayPlan, trials_per_shard: int = 250
) -> list[ShardSpec]:
    size = max(1, trials_per_shard)
    if plan.rule_for(manifest.target.kind) == "sequential":
        # A sequential fault stops on its own tally: it is one shard, whatever the shard size.
        size = plan.trials
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


def shared_group(plan: AssayPlan, fault_id: str | None) -> str | None:
    """The baseline group of a fault whose plan shares baselines (None: the fault draws its own
    workload, as every plan that does not say `shared` and paper mode do)."""
    if fault_id is None or plan.baseline != "shared":
        return None
    return baseline_group(plan.resolve_catalogue().by_id(fault_id))


def stream_roots(plan: AssayPlan, fault_id: str | None) -> tuple[int, int]:
    """Root keys of the workload and storm streams of a fault (or of paper mode's sequence).
    Sharing baselines, the workload is the fault's group's, so trial k of every fault on the
    tool draws the same task whatever else the plan holds; the storm stays the fault's."""
    if fault_id is None:
        return stream_key(plan.seed, "paper"), stream_key(plan.seed, "storm")
    group = shared_group(plan, fault_id)
    if group is not None:
        return shared_root(plan.seed, group), stream_key(plan.seed, "s", fault_id)
    return stream_key(plan.seed, "w", fault_id), stream_key(plan.seed, "s", fault_id)


def sample_of(plan: AssayPlan, fault_id: str | None, base: int) -> tuple[int, int]:
    """The evidence sample's key and the offset its draw adds to a fault's trial number. Sharing
    baselines, the sample is the group's, so every fault on the tool runs its extra arms on the
    same trials (those whose baseline is shared); else the plan's, offset by the fault's place."""
    group = shared_group(plan, fault_id)
    if group is not None:
        return stream_key(plan.seed, "evidence-sample", group), 0
    return stream_key(plan.seed, "evidence-sample"), base


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


def with_first_cause(reason: str, tallies: Iterable[Tally]) -> str:
    """A `target errors` stop reason with the first error's cause among the tallies (in the
    order given) added, so the stop says what failed; any other reason as it is."""
    if not reason.startswith("target errors"):
        return reason
    cause = next((m[0] for t in tallies for m in t.error_causes.values() if m), None)
    return reason if cause is None else f"{reason}; first: {cause}"
