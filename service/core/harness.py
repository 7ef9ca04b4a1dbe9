"""Runs one trial: build the world from its workload, arm the fault, run the target, grade.

A trial is fully determined by (manifest, fault, workload key, disabled controls), so any trial of
any run can be re-executed alone (`replay`) and gives the same trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.core.catalogue import Catalogue, Disturbance, FaultSpec, Recoverability
from service.core.copperfin import Target, copperfin
from service.core.errors import TargetUnsupported
from service.core.injector import InjectionReceipt, Injector
from service.core.manifest import Manifest
from service.core.oracle import Outcome, grade
from service.core.rng import Stream
from service.core.sandbox import RunCrashed, Task, Tools
from service.core.storm import comparison_policies, simulate
from service.core.world import Workload, World

MAX_RESTARTS = 3
_COMPLETE = Recoverability.COMPLETE
_STORM = Disturbance.RATE_LIMIT_STORM


class Runtime:
    """What every trial of one assay shares: the configured target and its settings."""

    __slots__ = ("catalogue", "deadline_ms", "guard", "manifest", "namespace", "target")

    def __init__(
        self,
        manifest: Manifest,
        catalogue: Catalogue,
        target: Target | None = None,
        guard: Callable[[FaultSpec], str | None] | None = None,
        namespace: str | None = None,
    ) -> None:
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


class TrialRecord:
    __slots__ = (
        "exercised",
        "outcome",
        "receipts",
        "refusals",
        "storm",
        "target_error",
        "trace",
        "workload",
        "world",
    )

    def __init__(
        self,
        outcome: Outcome,
        exercised: bool,
        receipts: list[InjectionReceipt],
        target_error: str | None,
        storm: tuple[int, int, int, int, int] | None,
        trace: list[dict[str, Any]] | None,
        workload: Workload,
        world: World,
    ) -> None:
        self.outcome = outcome
        self.exercised = exercised
        self.receipts = receipts
        self.target_error = target_error
        self.storm = storm
        self.trace = trace
        self.workload = workload
        self.world = world
        self.refusals: list[str] = []


def run_trial(
    rt: Runtime,
    spec: FaultSpec | None,
    workload_key: int,
    storm_key: int,
    disabled: frozenset[str] = frozenset(),
    capture: bool = False,
) -> TrialRecord:
    w = Workload(Stream(workload_key))
    world = World(w)
    if rt.namespace is not None:
        world.subject_namespace = rt.namespace
    inj = Injector(spec, rt.catalogue, rt.guard)
    trace: list[dict[str, Any]] | None = [] if capture else None
    tools = Tools(
        world, inj, w.latency_ms, w.decoy_order, rt.manifest.retry, Stream(storm_key), trace
    )
    task = Task("run-1", w.order, w.tenant, w.customer, w.amount, "G-" + w.order, w.actor, disabled)
    target = rt.target
    error: str | None = None

    def invoke() -> None:
        nonlocal error
        for _ in range(MAX_RESTARTS + 1):
            try:
                target(task, tools)
                return
            except RunCrashed:
                continue
            except Exception as exc:  # the target's own failure is evidence, never a pass
                error = f"{type(exc).__name__}: {exc}"
                return

    tools._fork = invoke
    invoke()
    expected = spec.expected_recoverability if spec is not None else _COMPLETE
    outcome = grade(world, task, expected, rt.deadline_ms, w.start)
    exercised = spec is None or inj.exercised(spec)
    storm = None
    if spec is not None and spec.disturbance is _STORM and exercised:
        storm = _storm_comparison(rt, spec, storm_key, tools)
    rec = TrialRecord(outcome, exercised, inj.receipts, error, storm, trace, w, world)
    rec.refusals = inj.refusals
    return rec


def _storm_comparison(
    rt: Runtime, spec: FaultSpec, storm_key: int, tools: Tools
) -> tuple[int, int, int, int, int]:
    """Peak concurrent retries: configured, without jitter or budget, with both."""
    p = spec.params
    agents = int(p["agents"])
    bare, disciplined = comparison_policies(rt.manifest.retry, agents)
    args = (
        agents,
        int(p["capacity_per_tick"]),
        int(p["tick_ms"]),
        int(p["overload_factor"]),
        int(p["max_backoff_ms"]),
    )
    b = simulate(bare, Stream(storm_key), *args)
    d = simulate(disciplined, Stream(storm_key), *args)
    configured = tools._storm.peak_retries if tools._storm is not None else 0
    return (configured, b.peak_retries, d.peak_retries, b.completed, d.completed)
