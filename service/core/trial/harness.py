"""Runs one trial: build the world from its workload, arm the fault, run the target, grade.

A trial is fully determined by (manifest, fault, workload key, disabled controls), so any trial of
any run can be re-executed alone (`replay`) and gives the same trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Final

from service.core.errors import TargetUnsupported
from service.core.faults.catalogue import Catalogue, FaultSpec, Recoverability
from service.core.faults.disturbance import Disturbance
from service.core.faults.injector import Injector
from service.core.system.manifest import Manifest, RetryPolicy
from service.core.trial.copperfin import copperfin
from service.core.trial.engine import TrialEngine
from service.core.trial.oracle import grade
from service.core.trial.record import StormObservation, TrialRecord
from service.core.trial.rng import Stream, derive
from service.core.trial.sandbox import RunCrashed, Task, Tools
from service.core.trial.storm import comparison_policies, simulate
from service.core.trial.target import Target
from service.core.trial.world import Workload, World

MAX_RESTARTS: Final = 3
_COMPLETE: Final = Recoverability.COMPLETE
_STORM: Final = Disturbance.RATE_LIMIT_STORM


class Runtime:
    """What every trial of one assay shares: the configured target and its settings."""

    __slots__ = (
        "catalogue",
        "deadline_ms",
        "engine",
        "guard",
        "honours_keys",
        "manifest",
        "namespace",
        "target",
    )

    def __init__(
        self,
        manifest: Manifest,
        catalogue: Catalogue,
        target: Target | TrialEngine | None = None,
        guard: Callable[[FaultSpec], str | None] | None = None,
        namespace: str | None = None,
        honours_keys: bool = True,
    ) -> None:
        self.engine: TrialEngine | None = None
        # False only for a deliberately broken sandbox whose ledger ignores idempotency keys.
        self.honours_keys = honours_keys
        if isinstance(target, TrialEngine):
            self.engine, target = target, _no_target
        if target is None:
            if manifest.target.kind != "reference":
                raise TargetUnsupported(
                    f"a {manifest.target.kind} target needs its adapter; the core runs only "
                    "the reference target",
                    field="target.kind",
                )
            target = copperfin(manifest)
        self.manifest = manifest
        self.catalogue = catalogue
        self.target = target
        self.deadline_ms = manifest.orchestration.deadline_ms
        self.guard = guard
        self.namespace = namespace


def _no_target(task: Task, tools: Tools) -> None:
    raise TargetUnsupported("this target runs whole trials", field="target.kind")


class _Runs:
    """The runs of one trial's target: a crashed run is restarted (up to MAX_RESTARTS), a forked
    run (`tools._fork`) starts another; each run's number is on `tools.run` while it runs."""

    __slots__ = ("error", "finished", "runs", "target", "task", "tools")

    def __init__(self, target: Target, task: Task, tools: Tools) -> None:
        self.target = target
        self.task = task
        self.tools = tools
        self.error: str | None = None
        self.runs = 0
        self.finished: set[int] = set()

    def once(self) -> bool:
        """One run of the target; True when it crashed and the harness must restart it."""
        self.runs += 1
        tools = self.tools
        run, outer = self.runs, tools.run
        tools.run = run
        try:
            self.target(self.task, tools)
            self.finished.add(run)
            return False
        except RunCrashed:
            return True
        except Exception as exc:  # the target's own failure: recorded, and damage still graded
            if self.error is None:
                self.error = f"{type(exc).__name__}: {exc}"
            return False
        finally:
            tools.run = outer

    def invoke(self) -> None:
        for _ in range(MAX_RESTARTS + 1):
            if not self.once():
                return


def run_trial(
    rt: Runtime,
    spec: FaultSpec | None,
    workload_key: int,
    storm_key: int,
    disabled: frozenset[str] = frozenset(),
    capture: bool = False,
) -> TrialRecord:
    if rt.engine is not None:
        return rt.engine.run_trial(spec, workload_key, storm_key, disabled, capture)
    w = Workload(Stream(workload_key))
    world = World(w, rt.honours_keys)
    if rt.namespace is not None:
        world.subject_namespace = rt.namespace
    inj = Injector(spec, rt.catalogue, rt.guard)
    trace: list[dict[str, Any]] | None = [] if capture else None
    tools = Tools(world, inj, w.latency_ms, w.decoy_order, trace)
    task = Task("run-1", w.order, w.tenant, w.customer, w.amount, w.grant, w.actor, disabled)
    target = rt.target
    a = inj.fault  # the spec's native copy: its fields are read without pydantic
    storming = a is not None and a.disturbance is _STORM
    if storming:
        assert spec is not None
        tools.storm_others = _fleet(rt, spec, workload_key, storm_key, disabled)
    runs = _Runs(target, task, tools)
    tools._fork = runs.invoke
    try:
        runs.invoke()
    finally:
        # `tools` holds the runs and the runs hold `tools`: unlinked here, a trial's objects are
        # freed by reference counting as soon as it is graded, not left for the cyclic collector
        # (closures here once cost about a sixth of an assay's time in garbage collection).
        tools._fork = None
    error = runs.error
    expected = a.expected if a is not None else _COMPLETE
    outcome = grade(world, task, expected, rt.deadline_ms, w.start, runs.finished)
    exercised = a is None or inj.exercised_armed(a)
    storm = None
    if storming and exercised:
        assert spec is not None
        storm = _observe_storm(tools, spec, storm_key)
    rec = TrialRecord(outcome, exercised, inj.receipts, error, storm, trace, w, world)
    rec.refusals = inj.refusals
    if tools.builds:
        rec.builds = tuple(sorted(set(tools.builds), key=_build_key))
    return rec


def _build_key(seen: tuple[str, str | None]) -> tuple[str, str]:
    return (seen[0], seen[1] or "")


def _fleet(
    rt: Runtime, spec: FaultSpec, workload_key: int, storm_key: int, disabled: frozenset[str]
) -> list[list[int]]:
    """The waits of the storm's other fleet copies, run before the graded one."""
    return [
        _other_copy(rt, spec, workload_key, disabled, f"run-{derive(storm_key, i) % 10**9}")
        for i in range(STORM_COPIES)
    ]


def _observe_storm(tools: Tools, spec: FaultSpec, storm_key: int) -> StormObservation | None:
    """What the graded copy did under the storm, beside the reference fleet bare and disciplined."""
    if tools._storm is None:
        return None
    attempts, admitted, min_wait = tools._storm.observed()
    bare_peak, disc_peak, bare_done, disc_done = _storm_reference(spec, storm_key)
    return StormObservation(
        attempts, admitted, min_wait, bare_peak, disc_peak, bare_done, disc_done
    )


# Other members of a storm's fleet watched beside the graded one. Their run ids are drawn per
# trial, so a fleet split into a few lockstep cohorts by anything in its task meets a copy of its
# own cohort (and is refused) in most trials: with c cohorts, (1 - 1/c) ** 3 of them get through.
STORM_COPIES: Final = 3


def _other_copy(
    rt: Runtime, spec: FaultSpec, workload_key: int, disabled: frozenset[str], run_id: str
) -> list[int]:
    """Another member of the storm's fleet, in a world of its own, refused at every attempt:
    its waits tell whether the fleet retries in lockstep. Only its back-off is kept."""
    w = Workload(Stream(workload_key))
    world = World(w, rt.honours_keys)
    if rt.namespace is not None:
        world.subject_namespace = rt.namespace
    tools = Tools(world, Injector(spec, rt.catalogue, rt.guard), w.latency_ms, w.decoy_order)
    task = Task(run_id, w.order, w.tenant, w.customer, w.amount, w.grant, w.actor, disabled)
    # Its failures are the graded copy's to show, not this one's.
    with contextlib.suppress(Exception, RunCrashed):
        rt.target(task, tools)
    return tools._storm.waits if tools._storm is not None else []


# The reference fleet the storm report compares against: the same back-off without jitter or a
# budget, and with both. Figures for the reader; the grade comes from what the agent did.
_REFERENCE_RETRY: Final = RetryPolicy(max_attempts=6, backoff_ms=200)


def _storm_reference(spec: FaultSpec, storm_key: int) -> tuple[int, int, int, int]:
    """Peak concurrent retries and agents completed: reference fleet bare, then disciplined."""
    p = spec.params
    agents = int(p["agents"])
    bare, disciplined = comparison_policies(_REFERENCE_RETRY, agents)
    args = (
        agents,
        int(p["capacity_per_tick"]),
        int(p["tick_ms"]),
        int(p["overload_factor"]),
        int(p["max_backoff_ms"]),
    )
    b = simulate(bare, Stream(storm_key), *args)
    d = simulate(disciplined, Stream(storm_key), *args)
    return (b.peak_retries, d.peak_retries, b.completed, d.completed)
