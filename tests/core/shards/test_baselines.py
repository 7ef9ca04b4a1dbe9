"""A no-fault baseline shared by the faults on one tool (`plan.baseline: shared`): trial k of each
runs the same task, its baseline runs once and is read by every fault whose trial k runs, its
violations count against each of them, and the per-fault results are the same at any concurrency
and however the faults are split over plans."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from service.core.errors import PlanInvalid
from service.core.evidence.spend import Meter
from service.core.evidence.stopping import watch_for
from service.core.evidence.tally import Tally
from service.core.faults.catalogue import Catalogue, FaultSpec
from service.core.faults.plan import AssayPlan, StopConditions
from service.core.shards import arms
from service.core.shards.assay import StopLimits, plan_shards, replay_trial, run_assay, run_shard
from service.core.shards.baselines import SharedBaselines
from service.core.shards.held import run_held
from service.core.shards.shard import stream_roots
from service.core.system.manifest import Manifest
from service.core.trial.harness import Runtime
from service.core.trial.oracle import FLAG_INDEX, FLAGS, Flag, Outcome
from service.core.trial.record import TrialRecord
from service.core.trial.rng import Stream, derive, stream_key
from service.core.trial.world import Workload, World
from tests.core.shards.test_slots import ReferenceSlots
from tests.core.shards.test_stops import Crashing

# Four faults on the refund API, one on the action contract.
REFUND = ("timeout_after_commit", "timeout_before_send", "reject_before_write", "malformed_output")
MODES = (*REFUND, "subject_swap")
SLOTS = 8


def shared(**kw: Any) -> AssayPlan:
    return AssayPlan(**{"modes": MODES, "trials": 8, "seed": 11, "baseline": "shared", **kw})


class Watched(ReferenceSlots):
    """The reference world on slots, noting every run: (fault or None, workload key)."""

    def __init__(self, manifest: Manifest, catalogue: Catalogue, n: int = SLOTS) -> None:
        super().__init__(manifest, catalogue, n)
        self.runs: list[tuple[str | None, int]] = []
        lock = threading.Lock()
        for slot in self._slots:
            inner = slot.run_trial

            def noted(
                spec: FaultSpec | None,
                workload_key: int,
                storm_key: int,
                disabled: frozenset[str],
                capture: bool,
                inner: Any = inner,
            ) -> TrialRecord:
                with lock:
                    self.runs.append((None if spec is None else spec.id, workload_key))
                rec = inner(spec, workload_key, storm_key, disabled, capture)
                return self.shape(rec, spec, workload_key)

            slot.run_trial = noted  # type: ignore[method-assign]

    def shape(self, rec: TrialRecord, spec: FaultSpec | None, workload_key: int) -> TrialRecord:
        return rec

    def baselines(self) -> Counter[int]:
        return Counter(w for fault, w in self.runs if fault is None)


class ViolatesOnBaselines(Watched):
    """An agent whose runs without a fault (only those) release a refund it cannot back, on the
    trials whose workload key is odd: graded like any run, it must block every fault that read
    such a baseline."""

    def shape(self, rec: TrialRecord, spec: FaultSpec | None, workload_key: int) -> TrialRecord:
        if spec is None and workload_key % 2:
            flags = list(rec.outcome.flags)
            flags[FLAG_INDEX[Flag.UNVERIFIABLE_RELEASE.value]] = True
            rec.outcome = Outcome(tuple(flags), rec.outcome.effects, rec.outcome.verdict)
        return rec


def _report(manifest: Manifest, plan: AssayPlan, engine: Watched, slots: int) -> dict[str, Any]:
    return run_assay(manifest, plan, target=engine, concurrency=slots, clock=lambda: 0).to_dict()


def test_faults_on_one_tool_run_one_baseline_per_trial_and_each_reads_it(typed: Manifest) -> None:
    plan = shared(rule="fixed")
    engine = Watched(typed, plan.resolve_catalogue(), 1)
    report = _report(typed, plan, engine, 1)
    # One baseline per (tool, trial): 8 for the refund API's four faults, 8 for the contract's.
    assert sum(engine.baselines().values()) == 16
    assert set(engine.baselines().values()) == {1}
    for fault in report["faults"]:
        assert fault["baseline"]["trials"] == 8, fault["id"]
    # What the team pays counts each run once: the saving is in `team`, not hidden in a fault.
    spend = report["spend"]
    assert spend["arms"]["baseline"]["runs"] == 16
    assert spend["team"]["runs"] == len(engine.runs) - spend["gate"]["runs"]


def test_every_fault_on_the_tool_runs_trial_k_on_the_task_its_shared_baseline_ran(
    typed: Manifest,
) -> None:
    plan = shared(rule="fixed")
    engine = Watched(typed, plan.resolve_catalogue(), 1)
    _report(typed, plan, engine, 1)
    refund = {w for f, w in engine.runs if f in REFUND}
    assert refund == {w for f, w in engine.runs if f == "timeout_after_commit"}
    assert refund <= set(engine.baselines())  # each fault's task is a baseline's task
    # The other tool's faults draw their own tasks.
    assert not refund & {w for f, w in engine.runs if f == "subject_swap"}


def test_a_fault_record_names_the_baseline_runs_its_trials_used(typed: Manifest) -> None:
    plan = shared(rule="fixed")
    report = _report(typed, plan, Watched(typed, plan.resolve_catalogue(), 1), 1)
    by_id = {f["id"]: f for f in report["faults"]}
    runs = {f: by_id[f]["baseline_run"] for f in REFUND}
    assert len({(r["shared_by"], r["workload"]) for r in runs.values()}) == 1
    root = int(runs["timeout_after_commit"]["workload"], 16)
    assert derive(root, 3) == derive(stream_roots(plan, "timeout_before_send")[0], 3)
    assert by_id["subject_swap"]["baseline_run"]["shared_by"] == "action contract"
    # A plan that does not share names none: each trial ran its own.
    alone = run_assay(typed, AssayPlan(modes=MODES, trials=4, seed=11)).to_dict()
    assert all("baseline_run" not in f for f in alone["faults"])


@pytest.mark.parametrize("rule", ["fixed", "sequential"])
def test_an_agent_that_violates_only_on_baseline_runs_is_blocked_for_every_fault_sharing_them(
    typed: Manifest, rule: str
) -> None:
    plan = shared(rule=rule, trials=12)
    engine = ViolatesOnBaselines(typed, plan.resolve_catalogue(), 1)
    report = _report(typed, plan, engine, 1)
    assert report["decision"] == "block"
    blocked = {r["fault"] for r in report["reasons"] if r["severity"] == "block"}
    assert blocked == set(MODES), report["reasons"]
    for fault in report["faults"]:
        assert fault["baseline"]["unverifiable_release"] > 0, fault["id"]
        if rule == "sequential":
            assert fault["stop"]["code"] == "violation", fault["stop"]


@pytest.mark.parametrize("rule", ["fixed", "sequential"])
def test_per_fault_results_are_the_same_at_1_4_and_8_slots_with_baselines_shared(
    typed: Manifest, rule: str
) -> None:
    plan = shared(rule=rule)
    reports, baselines = [], []
    for slots in (1, 4, SLOTS):
        engine = Watched(typed, plan.resolve_catalogue())
        reports.append(_report(typed, plan, engine, slots))
        baselines.append(engine.baselines())
    assert reports[0]["faults"] == reports[1]["faults"] == reports[2]["faults"]
    assert reports[0] == reports[1] == reports[2]
    # Each shared baseline ran once at every concurrency.
    assert baselines[0] == baselines[1] == baselines[2]
    assert set(baselines[2].values()) == {1}


@pytest.mark.parametrize("rule", ["fixed", "sequential"])
def test_splitting_or_merging_the_faults_over_plans_changes_no_faults_result(
    typed: Manifest, rule: str
) -> None:
    """A fault's trials are the tool's, whatever else the plan holds: assayed with the others or
    alone, each fault shows the same record (but for its trials' place in the plan's numbering)
    and the same reasons."""
    together = run_assay(typed, shared(rule=rule), clock=lambda: 0).to_dict()
    for fault in together["faults"]:
        alone = run_assay(typed, shared(rule=rule, modes=(fault["id"],)), clock=lambda: 0)
        [mine] = alone.to_dict()["faults"]
        assert _unnumbered(mine) == _unnumbered(fault), fault["id"]
        theirs = [r for r in together["reasons"] if r.get("fault") == fault["id"]]
        assert [r for r in alone.to_dict()["reasons"] if r.get("fault")] == theirs


def _unnumbered(fault: dict[str, Any]) -> dict[str, Any]:
    out = dict(fault)
    for key in ("samples",):
        out[key] = [{k: v for k, v in s.items() if k != "trial"} for s in fault[key]]
    if out.get("first_violation"):
        out["first_violation"] = {k: v for k, v in out["first_violation"].items() if k != "trial"}
    return out


def test_under_a_sequential_plan_a_tools_baseline_runs_while_any_of_its_faults_still_runs(
    baseline: Manifest,
) -> None:
    """The controls-off workflow duplicates a refund at the first timeout after commit (that
    fault stops at once); the tool's other faults run on, and the baseline with them."""
    plan = shared(rule="sequential", modes=REFUND, trials=10)
    engine = Watched(baseline, plan.resolve_catalogue(), 1)
    report = _report(baseline, plan, engine, 1)
    stops = {f["id"]: f["stop"] for f in report["faults"]}
    longest = max(s["trials"] for s in stops.values())
    assert min(s["trials"] for s in stops.values()) < longest
    assert sum(engine.baselines().values()) == longest


def test_replaying_a_shared_trial_re_executes_that_trial_on_the_tools_task(typed: Manifest) -> None:
    plan = shared(rule="fixed")
    order = [f.id for f in plan.faults()]  # catalogue order

    def number(fault: str, k: int) -> int:
        return order.index(fault) * plan.trials + k

    first = replay_trial(typed, plan, number("timeout_after_commit", 3))
    second = replay_trial(typed, plan, number("timeout_before_send", 3))
    other = replay_trial(typed, plan, number("subject_swap", 3))
    assert (first["fault"], second["fault"]) == ("timeout_after_commit", "timeout_before_send")
    assert first["workload"] == second["workload"] != other["workload"]
    assert replay_trial(typed, plan, number("timeout_after_commit", 3)) == first


def test_a_plan_that_does_not_say_keeps_its_own_baselines_and_signs_as_before() -> None:
    plain = AssayPlan(modes=MODES, trials=8, seed=11)
    assert plain.baseline == "per_fault" and "baseline" not in plain.signed()
    fault = "timeout_before_send"
    assert stream_roots(plain, fault)[0] == stream_key(11, "w", fault)  # as before sharing
    assert shared().signed()["baseline"] == "shared"


def test_paper_mode_refuses_to_share_its_baselines() -> None:
    with pytest.raises(PlanInvalid) as raised:
        AssayPlan(catalogue="paper", baseline="shared").faults()
    assert raised.value.field == "baseline"


@pytest.mark.parametrize("rule", ["fixed", "sequential"])
def test_a_workers_held_shards_share_their_tools_baselines_and_each_gives_its_tallies_alone(
    typed: Manifest, rule: str
) -> None:
    """Shards held by one worker share the baselines of their tool; each shard's tallies are
    what it gives run alone (which runs its own baselines): only what the team pays differs."""
    plan = shared(rule=rule)
    shards = plan_shards(typed, plan, 4)
    alone = [
        run_shard(typed, plan, s, watch=watch_for(typed, plan, s.fault_id)).to_dict()
        for s in shards
    ]
    engine = Watched(typed, plan.resolve_catalogue())
    done = run_held(
        typed,
        plan,
        [(s, watch_for(typed, plan, s.fault_id)) for s in shards],
        engine,
        4,
        meter=Meter(lambda: 0.0),
    )
    assert [r.to_dict() for r, _m in done] == alone
    assert set(engine.baselines().values()) == {1}


def test_a_shared_baseline_says_for_each_fault_on_the_tool_whether_its_calls_reach_it(
    typed: Manifest,
) -> None:
    """A baseline run matched to one fault is read by another: whether the workload reaches the
    other is read from the run's calls for that fault (an engine's `reaches`), never copied."""
    cat = AssayPlan().resolve_catalogue()
    first, second = cat.by_id("timeout_after_commit"), cat.by_id("timeout_before_send")
    rt = Runtime(typed, cat, Reaching(first.id))
    runs = SharedBaselines()
    tallies = [Tally(), Tally()]
    for spec, tally in zip((first, second), tallies, strict=True):
        arms.baseline(rt, spec, tally, 7, 9, None, runs, 0)
    assert len(runs) == 1
    assert [(t.baseline_reach, t.baseline_reached) for t in tallies] == [(1, 1), (1, 0)]


class Reaching:
    """An engine whose baseline runs reach only the fault `only` (as the MCP engine reads it
    from a run's calls), and is told which fault a baseline is matched to."""

    def __init__(self, only: str) -> None:
        self.only = only
        self.matched: list[str] = []

    def match(self, workload_key: int, spec: FaultSpec) -> None:
        self.matched.append(spec.id)

    def run_trial(
        self,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord:
        w = Workload(Stream(workload_key))
        outcome = Outcome((False,) * len(FLAGS), 0, "ok")
        rec = TrialRecord(outcome, True, [], None, None, None, w, World(w))
        rec.reachable = self.matched[-1] == self.only
        rec.reaches = lambda other: other.id == self.only
        return rec


@pytest.mark.parametrize("rule", ["fixed", "sequential"])
@pytest.mark.parametrize("budget", [17, 50, 71])
def test_a_budget_stop_falls_at_the_same_trial_at_1_4_and_8_slots_with_baselines_shared(
    typed: Manifest, rule: str, budget: int
) -> None:
    """The shared runs count against the budget once, where the serial run counts them: the
    stop, every fault's record and what the team paid are the same at any concurrency."""
    plan = shared(rule=rule, stop=StopConditions(max_runs=budget))
    reports = []
    for slots in (1, 4, SLOTS):
        report = _report(typed, plan, Watched(typed, plan.resolve_catalogue()), slots)
        report["spend"].pop("past_stop", None)  # paid past the stop at concurrency: not evidence
        reports.append(report)
    assert reports[0]["stopped"] is not None and reports[0]["stopped"].startswith("budget")
    assert reports[0] == reports[1] == reports[2]
    assert reports[0]["spend"]["team"]["runs"] <= budget


@pytest.mark.parametrize("rule", ["fixed", "sequential"])
def test_a_target_error_stop_falls_at_the_same_trial_at_1_4_and_8_slots_with_baselines_shared(
    typed: Manifest, rule: str
) -> None:
    """A shared baseline's target error counts for every fault that reads it, wherever it ran,
    so the stop falls at the serial run's trial."""
    plan = shared(rule=rule)
    reports = []
    for slots in (1, 4, SLOTS):
        report = run_assay(
            typed,
            plan,
            target=Crashing(typed, plan),
            limits=StopLimits(max_target_errors=6),
            concurrency=slots,
            clock=lambda: 0,
        ).to_dict()
        report["spend"].pop("past_stop", None)
        reports.append(report)
    assert reports[0]["stopped"] is not None and "target errors" in reports[0]["stopped"]
    assert reports[0] == reports[1] == reports[2]
