"""One slot of an `mcp` target's engine: an isolated copy of the team's world and what runs trials
in it (its event loop, upstream sessions, proxy and runner), and a whole trial there: reset, probe,
arm the fault, run the agent, probe again, grade (service.mcp.engine holds the slots)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import httpx2
import uvloop

from service.core.evidence.spend import usage_invalid, usage_of
from service.core.faults.catalogue import FaultSpec, Recoverability
from service.core.faults.disturbance import Disturbance
from service.core.faults.injector import Injector
from service.core.system.contract import ToolRole
from service.core.system.manifest import RUNNER_ENDPOINT
from service.core.trial.harness import MAX_RESTARTS
from service.core.trial.oracle import Outcome
from service.core.trial.record import TrialRecord
from service.core.trial.rng import Stream
from service.core.trial.world import Workload, World
from service.mcp import grading
from service.mcp.hooks import HookFailed, Upstreams
from service.mcp.launch import make_runner
from service.mcp.lock import SandboxBusy, sandbox_lock, world_key
from service.mcp.naive import naive_run
from service.mcp.proxy import Limiter, Proxy, TrialState
from service.mcp.runners import AgentRunner, RunResult
from service.mcp.witness import WITNESS, testify
from service.net.egress import refusal_in

if TYPE_CHECKING:
    from service.mcp.engine import McpEngine

log = logging.getLogger("assaygate.mcp")

T = TypeVar("T")
_DENY = Recoverability.DENY
ALARMS = frozenset({"denied", "held", "failed"})
START_TIMEOUT_S = 60.0


class Loop:
    """An asyncio loop on a daemon thread; coroutines are run on it from synchronous code. It is
    uvloop's: a trial is some twenty SDK HTTP exchanges through this loop (the proxy's and the
    upstream clients'), and the stdlib loop's own bookkeeping was a large share of their CPU."""

    def __init__(self) -> None:
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self.stopped or self.loop.is_closed():
            # Scheduled on a loop nobody runs, it would wait out `timeout` and be dropped unrun.
            coro.close()
            raise RuntimeError("the slot's event loop has stopped")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def stopped(self) -> bool:
        return not self.thread.is_alive()

    def stop(self) -> None:
        if not self.stopped:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


def _target_error(error: str, seed: int) -> TrialRecord:
    """A trial that never reached the agent: a target error, held (never a pass)."""
    w = Workload(Stream(seed))
    outcome = Outcome((False, True, False, False, False) + (False,) * 4 + (True, False), 0, "hold")
    return TrialRecord(outcome, False, [], error, None, None, w, World(w))


def _task_of(reset: Any) -> dict[str, Any]:
    task = reset.get("task") if isinstance(reset, dict) else None
    if not isinstance(task, dict):
        raise HookFailed('the reset hook must answer {"task": {...}}')
    return dict(task)


def _build_key(seen: tuple[str, str | None]) -> tuple[str, str]:
    return (seen[0], seen[1] or "")


class Slot:
    """One isolated copy of the team's world and what runs trials in it: its own event loop,
    upstream sessions (URLs with `{slot}` filled in, hooks told the slot), proxy and runner.
    Implements the harness's `TrialEngine`; a slot runs one trial at a time."""

    def __init__(self, engine: McpEngine, index: int | None, runner: AgentRunner | None) -> None:
        """`index`: the world's copy (None: a world that offers no slots, which is told none)."""
        self.engine = engine
        self.index = index
        self.contract = engine.contract if index is None else engine.contract.for_slot(index)
        self.world = world_key(self.contract, engine.tenant, index)
        self._runner = runner
        # What the slot waits for while it runs a trial (None: idle); read by `activity`.
        self.phase: str | None = None
        # The last fault run per workload (its matched baseline follows), and the last trial's
        # calls (the baseline's, to tell whether they reach the fault).
        self._matched: tuple[int, FaultSpec] | None = None
        # Whether an intervention also runs the naive agent of the sensitivity pair. A sequential
        # plan turns it off once the pair has shown its violation
        # (service/core/evidence/stopping.py): one sighting is all the pair's verdict reads.
        self.sensitivity = True
        self._last_calls: list[dict[str, Any]] = []
        self._loop = Loop()
        self.upstreams = Upstreams(self.contract, engine.confinement, engine.egress, index)
        self.proxy = Proxy(self.upstreams)
        self._naive_http: httpx2.AsyncClient | None = None
        # An http runner's agent is a remote endpoint: each reply's build is noted per trial.
        runner_spec = engine.manifest.target.runner
        self._runner_reports = runner_spec is not None and runner_spec.kind == "http"
        if engine.refused is not None:
            return
        try:
            self._loop.run(self._start(), START_TIMEOUT_S)
            if self._runner is None:
                # After the proxy started: a sandboxed python host is given the proxy's port.
                spec = engine.manifest.target.runner
                assert spec is not None
                self._runner = make_runner(
                    spec,
                    engine.confinement,
                    self.proxy.url(""),
                    engine.egress,
                    index,
                )
        except BaseException as exc:
            refused = refusal_in(exc)  # a server's name re-bound to a forbidden address
            if refused is None:
                self.close()
                raise
            engine.refused = f"TargetUnreachable: egress refused: {refused.message}"
            with contextlib.suppress(Exception):
                self._loop.run(self._stop(), 15)

    async def _start(self) -> None:
        await self.upstreams.open()
        await self.proxy.start()
        # Naive runs reach the proxy over one keep-alive client (read timeout: a run's deadline).
        self._naive_http = httpx2.AsyncClient(
            timeout=httpx2.Timeout(30.0, read=max(self.engine.deadline_s, 30.0))
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._loop.run(self._stop(), 15)
        self._loop.stop()
        if self._runner is not None:
            self._runner.close()

    @property
    def runner(self) -> AgentRunner:
        assert self._runner is not None, "the slot's runner starts with the slot"
        return self._runner

    async def _stop(self) -> None:
        if self._naive_http is not None:
            await self._naive_http.aclose()
        await self.proxy.stop()
        await self.upstreams.close()

    # -- the core's TrialEngine --------------------------------------------------------------

    def match(self, workload_key: int, spec: FaultSpec) -> None:
        """The next baseline on this workload is matched to `spec` (`MatchedEngine`): its
        intervention may have run in another slot, or not yet."""
        self._matched = (workload_key, spec)

    def run_trial(
        self,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord:
        engine = self.engine
        budget = engine.deadline_s * (MAX_RESTARTS + 3) * 2 + 120
        if engine.refused is not None:
            return _target_error(engine.refused, workload_key)
        self.phase = "lock"
        try:
            with sandbox_lock(
                self.world, engine.holder, engine.lock_wait_s, lambda n: engine.on_wait(n)
            ):
                return self._locked_trial(spec, workload_key, disabled, budget)
        except SandboxBusy as exc:
            return _target_error(f"SandboxBusy: {exc}", workload_key)
        finally:
            self.phase = None
            engine.ran()

    def _locked_trial(
        self,
        spec: FaultSpec | None,
        workload_key: int,
        disabled: frozenset[str],
        budget: float,
    ) -> TrialRecord:
        # The harness runs a trial's intervention, then its matched baseline on the same
        # workload: the baseline resets the same task (the fault's tool) with nothing armed, and
        # says whether its calls would have reached the fault's trigger.
        matched = spec
        if spec is not None:
            self._matched = (workload_key, spec)
        elif self._matched is not None and self._matched[0] == workload_key:
            matched = self._matched[1]
        rec = self._loop.run(
            self._trial(spec, workload_key, disabled, naive=False, matched=matched),
            budget,
        )
        if spec is None and matched is not None and rec.target_error is None:
            rec.reachable = grading.reaches(matched, self.contract, self._last_calls)
            calls, contract = self._last_calls, self.contract
            rec.reaches = lambda other: grading.reaches(other, contract, calls)
        if (
            spec is not None
            and spec.predicted_transfer is not None
            and not disabled
            and rec.exercised
            and self.sensitivity
        ):
            try:
                naive = self._loop.run(
                    self._trial(spec, workload_key, disabled, naive=True), budget
                )
            finally:
                self.engine.ran(naive=True)
            rec.sensitivity = naive.outcome
            if naive.builds:
                rec.builds = tuple(sorted(set(rec.builds) | set(naive.builds), key=_build_key))
        return rec

    # -- one trial ---------------------------------------------------------------------------

    async def _trial(
        self,
        spec: FaultSpec | None,
        seed: int,
        disabled: frozenset[str],
        naive: bool,
        matched: FaultSpec | None = None,
    ) -> TrialRecord:
        # One shape in every arm: nothing the agent, its tools or the hooks see names the arm.
        trial_id = self.engine.trial_id(spec, seed, disabled, naive)
        w = Workload(Stream(seed))
        inj = Injector(spec, self.engine.catalogue, self.engine.guard)
        self.upstreams.begin()
        self.phase = "reset"
        try:
            task, before = await self._reset(spec, seed, trial_id, matched or spec)
        except (HookFailed, KeyError, TypeError) as exc:
            return _target_error(f"HookFailed: {exc}", seed)
        task["trial_id"] = trial_id
        task["disabled_controls"] = sorted(disabled)
        state = self._state(spec, inj, task, before, seed, trial_id)
        self._last_calls = state.calls
        self.phase = "agent"
        runs = await self._runs(spec, inj, state, task, naive)
        await state.drain()
        self.phase = "probe"
        try:
            after = await self._probe()
        except (HookFailed, TypeError) as exc:
            after = {"effects": [], "records": {}, "error": str(exc)}
        self.phase = "grade"
        return self._grade(spec, inj, state, task, before, after, runs, w)

    async def _reset(
        self, spec: FaultSpec | None, seed: int, trial_id: str, matched: FaultSpec | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The task the team's reset hook returns, and the world before the agent runs. A
        matched baseline (`spec` None, `matched` its fault) asks for the same task: its tool.

        The hook is told the armed fault only when the contract declares it must
        (`hooks.tell_fault`); every arm is otherwise told `"fault": ""`. Told, it is first asked
        blind, and the task it answers told must be the task it answered blind: the fault reaches
        the team's world, never the agent's task."""
        payload = {
            "seed": seed % 2**31,
            "trial_id": trial_id,
            "fault": "",
            "tool": matched.target if matched is not None else "",
        }
        blind_task: dict[str, Any] | None = None
        if self.contract.hooks.tell_fault and spec is not None:
            blind_task = _task_of(await self.upstreams.hook(self.contract.hooks.reset, payload))
            payload["fault"] = spec.id
        reset = await self.upstreams.hook(self.contract.hooks.reset, payload)
        task = _task_of(reset)
        if blind_task is not None and task != blind_task:
            raise HookFailed(
                "the reset hook told the armed fault (hooks.tell_fault) answered another task "
                "than it answers blind: the agent's task may not depend on the fault"
            )
        # A reset that also answers the fresh world (`"world"`: what probe would answer)
        # saves the first probe's round trip.
        world = reset.get("world")
        before = self._world(world) if world is not None else await self._probe()
        return task, before

    def _state(
        self,
        spec: FaultSpec | None,
        inj: Injector,
        task: dict[str, Any],
        before: dict[str, Any],
        seed: int,
        trial_id: str,
    ) -> TrialState:
        """What the proxy knows of this trial: the subject, the others, the fault's limiter."""
        hooks = self.contract.hooks
        subject = task.get(self.contract.task_subject)
        others = [str(s) for s in before.get("subjects", []) if s != subject]

        async def mutate() -> None:
            assert hooks.mutate is not None
            await self.upstreams.hook(hooks.mutate, {"seed": seed % 2**31, "trial_id": trial_id})

        state = TrialState(
            spec.target if spec is not None else None,
            self.contract,
            inj,
            str(subject),
            others,
            mutate=mutate if hooks.mutate is not None else None,
        )
        if spec is not None and spec.disturbance is Disturbance.RATE_LIMIT_STORM:
            state.limiter = Limiter(
                int(spec.params["agents"]),
                int(spec.params["capacity_per_tick"]),
                int(spec.params["tick_ms"]) / 1000.0,
            )
            state.storm_spec = spec
        return state

    async def _runs(
        self,
        spec: FaultSpec | None,
        inj: Injector,
        state: TrialState,
        task: dict[str, Any],
        naive: bool,
    ) -> list[tuple[int, RunResult]]:
        """The agent's runs, numbered: restarted after a crash, and once more after a fork."""
        runs: list[tuple[int, RunResult]] = []
        number = 0

        async def one() -> RunResult:
            nonlocal number
            number += 1
            token = self.proxy.open_run(state, number)
            try:
                result = await self._agent(task, token, state, naive)
            finally:
                self.proxy.close_run(token)
            if result.replied and self._runner_reports and not naive:
                self.upstreams.answered.add((RUNNER_ENDPOINT, result.build))
            return result

        async def invoke() -> None:
            for _ in range(MAX_RESTARTS + 1):
                state.crashed.clear()
                run_no = number + 1
                result = await one()
                runs.append((run_no, result))
                if not result.crashed:
                    return

        # A storm's fleet is the proxy's model (proxy.Limiter), not copies of the agent.
        await invoke()
        fork = inj.take("mcp.state")
        if fork is not None and fork.disturbance is Disturbance.FORK_RUN:
            inj.fire(fork, "run#2", state.tick())
            await invoke()
        return runs

    async def _probe(self) -> dict[str, Any]:
        return self._world(await self.upstreams.hook(self.contract.hooks.probe, {}))

    @staticmethod
    def _world(world: Any) -> dict[str, Any]:
        if not isinstance(world, dict) or not isinstance(world.get("effects"), list):
            raise HookFailed('the probe hook must answer {"effects": [...], "records": {...}}')
        return world

    async def _agent(
        self, task: dict[str, Any], token: str, state: TrialState, naive: bool
    ) -> RunResult:
        url = self.proxy.url(token)
        if naive:
            try:
                claims = await asyncio.wait_for(
                    naive_run(self.contract, task, url, state.target, self._naive_http),
                    self.engine.deadline_s,
                )
            except TimeoutError:
                return RunResult(error="TargetTimeout", timed_out=True)
            except Exception as exc:
                if state.crashed.is_set():
                    return RunResult(crashed=True)
                return RunResult(error=f"NaiveFailed: {type(exc).__name__}: {exc}")
            if state.crashed.is_set():
                return RunResult(crashed=True)
            return RunResult(claims=claims)
        deadline_s = self.engine.deadline_s
        return await asyncio.to_thread(self.runner.run, task, url, deadline_s, state.crashed)

    def _grade(
        self,
        spec: FaultSpec | None,
        inj: Injector,
        state: TrialState,
        task: dict[str, Any],
        before: dict[str, Any],
        after: dict[str, Any],
        runs: list[tuple[int, RunResult]],
        w: Workload,
    ) -> TrialRecord:
        new_effects = grading.new_effects(before, after)
        tally = grading.tally_runs(runs)
        claims = tally.claims
        expected = (
            "deny" if spec is not None and spec.expected_recoverability is _DENY else "complete"
        )
        activation = {
            "task": task,
            "subject": task.get(self.contract.task_subject),
            "expected": expected,
            "before": before,
            "after": after,
            "new_effects": new_effects,
            "calls": state.calls,
            "claim": claims[-1] if claims else None,
            "claims": claims,
            "fault": spec.id if spec is not None else None,
        }
        with self.engine.evaluating:
            evaluation = self.engine.evaluator.evaluate(activation)
        results = evaluation.results
        typed = len(self.contract.by_role(ToolRole.EFFECT)) > 1
        testimony = testify(state.forwarded_effects, before, after, typed=typed)
        results[WITNESS] = testimony.agrees
        # Alarms are the claims' own: a denial, a hold, a failure, or an anomaly flag. In a
        # trial where nothing fired, each is a false alarm (the baseline counts them).
        alarm = any(c.get("status") in ALARMS or bool(c.get("anomaly")) for c in claims)
        outcome = grading.outcome(
            results, tally.claim_violation, tally.timed_out, alarm, len(new_effects), claims
        )
        exercised = spec is None or inj.exercised(spec)
        storm = grading.storm_observation(spec, state) if exercised else None
        rec = TrialRecord(outcome, exercised, inj.receipts, tally.error, storm, None, w, World(w))
        rec.refusals = inj.refusals
        rec.usage = usage_of(claims)
        rec.usage_invalid = usage_invalid(claims)
        rec.builds = tuple(sorted(self.upstreams.answered, key=_build_key))
        rec.invariants = tuple(sorted(name for name, ok in results.items() if not ok))
        rec.sample = {
            "task": task,
            "injections": [r.view() for r in inj.receipts],
            "calls": state.calls[:50],
            "new_effects": new_effects[:20],
            "claim": claims[-1] if claims else None,
            "claims": claims[:10],
            "invariants": results,
            "invariant_errors": evaluation.errors,
            "target_error": tally.error,
            "witness": testimony.view(state.forwarded_effects),
            "ledger": new_effects[:20],
            "evidence": [],
        }
        return rec
