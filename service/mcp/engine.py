"""Whole trials of an `mcp` target, graded with the oracle's flags so the core's tallies apply.

A trial: reset the team's sandbox (seed, trial id) and take the task it returns; probe the world;
arm the fault at the proxy; run the agent (restarted after a crash, forked, or in a storm's fleet,
as the fault says); probe again; evaluate the invariants over the task, both worlds, the proxied
calls and the claims; map them to the oracle's flags. For a fault with a predicted violation, the
intervention arm also runs the naive agent under the same fault in the same world (the sensitivity
pair). The engine owns an event loop thread with the proxy and the upstream clients; trials are
called synchronously from the harness.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections.abc import Callable

from service.core.faults.catalogue import Catalogue, FaultSpec
from service.core.shards.shard import ShardActivity
from service.core.shards.slots import slots_of
from service.core.system.contract import Contract, Invariants
from service.core.system.manifest import Manifest, contract_of, invariants_of
from service.core.trial import engine as trial_engine
from service.core.trial.harness import MAX_RESTARTS
from service.core.trial.record import TrialRecord
from service.mcp.cel import Compiled, Evaluator, compile_invariants
from service.mcp.hooks import Upstreams, check_servers
from service.mcp.proxy import Proxy
from service.mcp.runners import AgentRunner
from service.mcp.slot import Loop, Slot
from service.net.egress import EgressPolicy, EgressRefused
from service.sandbox import Confinement

log = logging.getLogger("assaygate.mcp")


def run_key() -> bytes:
    """A fresh key for one run's trial ids (the agent never sees it)."""
    return secrets.token_bytes(trial_engine.KEY_BYTES)


class McpEngine:
    """The `mcp` target: implements the harness's `TrialEngine` (on its first slot) and the
    assay's `SlottedEngine`: with `slots=N` and a world that offers slots (`tools.slots`), N
    isolated copies of the world, each with its own proxy, upstream sessions, event loop and
    runner, run trials at once."""

    def __init__(
        self,
        manifest: Manifest,
        catalogue: Catalogue | None = None,
        runner: AgentRunner | None = None,
        guard: Callable[[FaultSpec], str | None] | None = None,
        confinement: Confinement | None = None,
        egress: EgressPolicy | None = None,
        tenant: str | None = None,
        slots: int = 1,
    ) -> None:
        """`egress`: the policy every connection to the manifest's URLs is checked against.
        `tenant`: whose world this is (the sandbox lock's key; None on the local CLI).
        `slots`: trials wanted at once; at most what the world offers (`notice` says when the
        world offers fewer)."""
        assert manifest.target.runner is not None
        self.manifest = manifest
        self.contract: Contract = contract_of(manifest)
        self.invariants: Invariants = invariants_of(manifest)
        self.compiled: tuple[Compiled, ...] = compile_invariants(self.invariants)
        self.evaluator = Evaluator(self.compiled)
        # One evaluator child for every slot: its socket carries one request at a time.
        self.evaluating = threading.Lock()
        self.catalogue = catalogue
        self.guard = guard
        self.deadline_s = manifest.target.runner.deadline_s
        self.confinement = confinement
        self.tenant = tenant
        self.egress = egress
        offered = self.contract.slots
        n = slots_of(offered, slots)
        self.notice: str | None = None
        if slots > 1 and offered is None:
            self.notice = (
                "assaygate: the world offers no slots (tools.slots): trials run one at a time"
            )
        elif slots > n:
            self.notice = f"assaygate: the world offers {n} slots: {n} trials at once"
        # Who holds a world's lock (the worker names the assay), how long a trial waits for
        # it, and where a waiter says whom it waits for.
        self.holder = f"pid {os.getpid()}"
        self.lock_wait_s = self.deadline_s * (MAX_RESTARTS + 3) * 2 + 120
        self.on_wait: Callable[[str], None] = lambda note: log.info(note)
        # A URL the egress policy refuses: every trial is that target error, nothing connects.
        self.refused: str | None = None
        if egress is not None:
            try:
                check_servers(egress, self.contract)
            except EgressRefused as exc:
                self.refused = f"TargetUnreachable: egress refused: {exc.message}"
        # The key of the trials' ids: drawn per engine (the local CLI's run); a worker sets the
        # assay's (`trial_engine.assay_key` of its credential) before each shard.
        self.blind_key = run_key()
        # Trial arms finished (the team's agent's runs) and the naive agent's runs of the
        # sensitivity pair (the gate's own), read by `activity`.
        self.runs_done = 0
        self.gate_runs_done = 0
        self._counting = threading.Lock()
        self._slots: list[Slot] = []
        try:
            for i in range(n):
                self._slots.append(Slot(self, i if offered is not None else None, runner))
        except BaseException:
            self.close()
            raise

    @property
    def slots(self) -> int:
        return len(self._slots)

    def slot(self, index: int) -> Slot:
        return self._slots[index]

    # The first slot's, for callers that know one world (tests, the sandbox adapters).
    @property
    def world(self) -> str:
        return self._slots[0].world

    @property
    def upstreams(self) -> Upstreams:
        return self._slots[0].upstreams

    @property
    def proxy(self) -> Proxy:
        return self._slots[0].proxy

    @property
    def runner(self) -> AgentRunner:
        return self._slots[0].runner

    # The serial path's sensitivity switch (a sequential plan's `Watch.steer`) is slot 0's.
    @property
    def sensitivity(self) -> bool:
        return self._slots[0].sensitivity

    @sensitivity.setter
    def sensitivity(self, on: bool) -> None:
        self._slots[0].sensitivity = on

    def close(self) -> None:
        for slot in self._slots:
            slot.close()
        self.evaluator.close()

    def activity(self) -> ShardActivity:
        """What the engine is doing now, for progress: the team's agent runs done (a trial's
        arms: intervention, baseline, counterfactual), the gate's naive agent's runs, its slots,
        how many are busy, and what the busy ones wait for (`lock`, `reset`, `agent`, `probe`,
        `grade`), counted."""
        waiting: dict[str, int] = {}
        for slot in self._slots:
            if slot.phase is not None:
                waiting[slot.phase] = waiting.get(slot.phase, 0) + 1
        return ShardActivity(
            runs_done=self.runs_done,
            gate_runs_done=self.gate_runs_done,
            slots=len(self._slots),
            slots_busy=sum(waiting.values()),
            waiting=dict(sorted(waiting.items())),
        )

    def ran(self, naive: bool = False) -> None:
        """A run finished: a trial's arm (the team's agent), or (`naive`) the gate's own."""
        with self._counting:  # slots finish runs from their own threads
            if naive:
                self.gate_runs_done += 1
            else:
                self.runs_done += 1

    def trial_id(
        self,
        spec: FaultSpec | None,
        workload_key: int,
        disabled: frozenset[str] = frozenset(),
        naive: bool = False,
    ) -> str:
        """The trial's id as the agent and the hooks see it: opaque and of one shape in every
        arm (`service.core.trial.engine`), keyed by `blind_key`; from the trial (its workload,
        which the plan's seed, the fault and the trial's number derive) and the arm, never from
        the slot or the order trials start in, so an agent keyed on it behaves alike at any
        concurrency."""
        return trial_engine.trial_id(
            self.blind_key, workload_key, trial_engine.arm_of(spec, disabled, naive)
        )

    def match(self, workload_key: int, spec: FaultSpec) -> None:
        self._slots[0].match(workload_key, spec)

    def run_trial(
        self,
        spec: FaultSpec | None,
        workload_key: int,
        storm_key: int,
        disabled: frozenset[str],
        capture: bool,
    ) -> TrialRecord:
        return self._slots[0].run_trial(spec, workload_key, storm_key, disabled, capture)


__all__ = ["Loop", "McpEngine", "Slot"]
