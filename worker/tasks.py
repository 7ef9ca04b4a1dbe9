"""Tasks are thin: take ids, load, call the core, persist. Each is idempotent on its own key."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task
from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.core.assay import Limits, ShardResult, ShardSpec, merge, run_shard
from service.core.copperfin import Target
from service.core.credential import injection_guard, verify_credential
from service.core.dossier import PublicKey, Signer
from service.core.engine import TrialEngine
from service.core.errors import CredentialInvalid
from service.core.manifest import Manifest, parse_manifest
from service.core.plan import AssayPlan, parse_plan
from service.db import queries
from service.db.assay import (
    AssayInputs,
    FaultRow,
    assay_inputs,
    begin_shard,
    fail_assay,
    ready_to_merge,
    record_report,
    store_shard_result,
)
from service.db.dossier import record_assay_dossier
from service.db.injector import (
    InjectorState,
    add_totals,
    injector_state,
    record_event,
    request_stop,
    stop_reason,
)
from service.db.session import make_engine, session_scope
from service.keys import ActiveKey, KeyRing
from service.settings import Settings
from service.targets import close_target, load_target

log = logging.getLogger("assaygate.worker")

RUN_SHARD = "assay.run_shard"
# Target adapters kept per process: a python target holds a child process, an http target a tool
# server, so the least recently used beyond this many are closed.
MAX_TARGETS = 4


@dataclass(frozen=True)
class Parsed:
    """An assay's inputs, parsed once per process and reused by each of its shards."""

    inputs: AssayInputs
    manifest: Manifest
    plan: AssayPlan


class WorkerContext:
    """Per-process resources, created on first use so a prefork child never shares its parent's
    database connections."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._engine: Engine | None = None
        self._pid = 0
        self._assays: OrderedDict[uuid.UUID, Parsed] = OrderedDict()
        self._keys: dict[str, PublicKey] = {}
        self._targets: OrderedDict[str, Target | TrialEngine | None] = OrderedDict()

    @property
    def engine(self) -> Engine:
        if self._engine is None or self._pid != os.getpid():
            self._engine = make_engine(self.settings)
            self._pid = os.getpid()
            self._assays.clear()
        return self._engine

    def public_keys(self) -> dict[str, PublicKey]:
        """The service's published keys (public halves only: no private key reaches a worker)."""
        if not self._keys:
            self.refresh_keys()
        return self._keys

    def refresh_keys(self) -> None:
        # Only the public index of the injector ring: no credential-minting key reaches a worker.
        assert self.settings.injector_public_dir is not None
        self._keys = {k.keyid: k for k in KeyRing(self.settings.injector_public_dir).published()}

    def target(self, assay_id: uuid.UUID, manifest: Manifest) -> Target | TrialEngine | None:
        """The adapter for a python or http target, one per manifest per process."""
        key = manifest.digest()
        if key in self._targets:
            self._targets.move_to_end(key)
            return self._targets[key]
        target = self._targets[key] = load_target(manifest)
        while len(self._targets) > MAX_TARGETS:
            close_target(self._targets.popitem(last=False)[1])
        return target

    def stop_flag(self, assay_id: uuid.UUID, every_s: float = 0.2) -> Callable[[], bool]:
        """Polled between batches of trials: has a stop been recorded? At most every `every_s`."""
        last = [0.0]

        def stopped() -> bool:
            now = time.monotonic()
            if now - last[0] < every_s:
                return False
            last[0] = now
            with Session(self.engine) as session:
                return stop_reason(session, assay_id) is not None

        return stopped

    def assay(self, session: Session, assay_id: uuid.UUID) -> Parsed | None:
        """The parsed inputs of an assay, refusing a stored manifest whose digest moved."""
        cached = self._assays.get(assay_id)
        if cached is not None:
            self._assays.move_to_end(assay_id)
            return cached
        inputs = assay_inputs(session, assay_id)
        if inputs is None:
            return None
        manifest = parse_manifest(inputs.manifest)
        if manifest.digest() != inputs.manifest_digest:
            raise RuntimeError(
                f"stored manifest {inputs.manifest_digest} re-parses to {manifest.digest()}"
            )
        parsed = Parsed(inputs, manifest, parse_plan(inputs.plan))
        self._assays[assay_id] = parsed
        if len(self._assays) > 256:
            self._assays.popitem(last=False)
        return parsed


def register(app: Celery, ctx: WorkerContext) -> None:
    @app.task(name=RUN_SHARD, bind=True, acks_late=True, reject_on_worker_lost=True)
    def run_shard_task(self: Task[Any, Any], assay_id: str, shard_index: int) -> dict[str, Any]:
        return execute_shard(ctx, uuid.UUID(assay_id), shard_index, self.request.hostname or "")


def execute_shard(
    ctx: WorkerContext, assay_id: uuid.UUID, shard_index: int, worker: str
) -> dict[str, Any]:
    ids: dict[str, Any] = {"assay_id": str(assay_id), "shard": shard_index, "worker": worker}
    outcome: dict[str, Any] = {"assay_id": str(assay_id), "shard": shard_index, "stored": False}
    with session_scope(ctx.engine) as session:
        parsed = ctx.assay(session, assay_id)
        start = begin_shard(session, parsed.inputs, shard_index, worker) if parsed else None
        state = injector_state(session, assay_id) if start else None
    if parsed is None:
        log.warning("shard of an unknown assay dropped", extra=ids)
        return {**outcome, "decision": None}
    ids["candidate_id"] = str(parsed.inputs.candidate_id)
    if start is None or state is None:
        log.info("shard already stored", extra=ids)
        with Session(ctx.engine) as session:
            complete = ready_to_merge(session, assay_id)
    else:
        spec = ShardSpec.from_dict(start.spec)
        try:
            result = run_guarded(ctx, parsed, spec, state, ids)
        except Exception as exc:
            log.exception("shard failed", extra=ids)
            with session_scope(ctx.engine) as session:
                fail_assay(session, assay_id, f"shard {shard_index}: {exc}")
            raise
        with session_scope(ctx.engine) as session:
            stored = store_shard_result(
                session, parsed.inputs, shard_index, result.to_dict(), result.trials
            )
            if stored.written:
                record_shard_injector(session, parsed, shard_index, result)
        outcome["stored"] = stored.written
        complete = stored.complete
        log.info(
            "shard stored" if stored.written else "shard result already stored; discarded",
            extra={**ids, "trials": result.trials, "stop_reason": result.stop_reason},
        )
    decision = finalize(ctx, parsed) if complete else None
    return {**outcome, "decision": decision}


def run_guarded(
    ctx: WorkerContext, parsed: Parsed, spec: ShardSpec, state: InjectorState, ids: dict[str, Any]
) -> ShardResult:
    """Run a shard under the assay's injector credential and stop conditions.

    A shard does not start once a stop is recorded, nor under a credential that fails any check;
    it then stores an empty, stopped result, so the assay still completes and is decided (never
    `allow`). A running shard re-reads the stop flag between batches of trials.
    """
    assay_id = parsed.inputs.assay_id
    if state.stop_reason is not None:
        log.info("shard not started: the assay is stopping", extra=ids)
        return ShardResult(spec.index, {}, 0, True, state.stop_reason)
    try:
        try:
            scope = verify_credential(
                state.credential or "", ctx.public_keys(), assay=str(assay_id), now=time.time()
            )
        except CredentialInvalid as exc:
            if "unknown key" not in exc.message:
                raise
            ctx.refresh_keys()  # a key rotated since this process last read the published keys
            scope = verify_credential(
                state.credential or "", ctx.public_keys(), assay=str(assay_id), now=time.time()
            )
    except CredentialInvalid as exc:
        reason = f"injector credential refused: {exc}"
        with session_scope(ctx.engine) as session:
            record_event(
                session,
                "credential.refused",
                candidate_id=parsed.inputs.candidate_id,
                assay_id=assay_id,
                shard_index=spec.index,
                data={"reason": str(exc), "field": exc.field},
            )
            request_stop(session, assay_id, reason, kind="assay.stopped", data={})
        log.warning("injector credential refused", extra={**ids, "reason": str(exc)})
        return ShardResult(spec.index, {}, 0, True, reason)
    limits = state.limits

    def remaining(key: str, used: int) -> int | None:
        cap = limits.get(key)
        return None if cap is None else max(0, int(cap) - used)

    deadline = limits.get("deadline")
    guard_limits = Limits(
        max_effects=remaining("max_effects", state.effects),
        max_unsafe=remaining("max_unsafe", state.unsafe),
        max_target_errors=remaining("max_target_errors", state.target_errors),
        deadline=float(deadline) if deadline is not None else None,
        clock=time.time,
    )
    target = ctx.target(assay_id, parsed.manifest)
    guard = injection_guard(scope, time.time)
    if isinstance(target, TrialEngine) and hasattr(target, "guard"):
        target.guard = guard  # an engine's injector checks this assay's credential too
    result = run_shard(
        parsed.manifest,
        parsed.plan,
        spec,
        should_stop=ctx.stop_flag(assay_id),
        target=target,
        limits=guard_limits,
        guard=guard,
        namespace=scope.namespace,
    )
    if result.stop_reason == "aborted":
        # Say why, in the words the abort was recorded with.
        with Session(ctx.engine) as session:
            result.stop_reason = stop_reason(session, assay_id) or "aborted"
    return result


def record_shard_injector(
    session: Session, parsed: Parsed, shard_index: int, result: ShardResult
) -> None:
    """With the stored result, once: totals, refusals and any stop condition that tripped."""
    assay_id, candidate_id = parsed.inputs.assay_id, parsed.inputs.candidate_id
    errors = sum(t.target_errors for t in result.tallies.values())
    tripped = add_totals(session, assay_id, result.effects, result.unsafe, errors)
    injector = sum(t.injector_refusals for t in result.tallies.values())
    sandbox = sum(t.sandbox_refusals for t in result.tallies.values())
    for kind, count in (("injection.refused", injector), ("sandbox.refused", sandbox)):
        if count:
            record_event(
                session,
                kind,
                candidate_id=candidate_id,
                assay_id=assay_id,
                shard_index=shard_index,
                data={"count": count},
            )
    reason = result.stop_reason
    if tripped is None and reason is not None and not reason.startswith("aborted"):
        request_stop(session, assay_id, reason, kind="assay.stopped", data={"shard": shard_index})


def finalize(ctx: WorkerContext, parsed: Parsed) -> str | None:
    """Merge once every shard is stored. Safe to call from any number of workers at once: the
    report is written only by the first, the others find the assay done and change nothing."""
    assay_id = parsed.inputs.assay_id
    with Session(ctx.engine) as session:
        if not ready_to_merge(session, assay_id):
            return None
        results = queries.done_shard_results(session, assay_id)
    report = merge(
        parsed.manifest, parsed.plan, [ShardResult.from_dict(r) for r in results]
    ).to_dict()
    decision = str(report["decision"])
    signer = dossier_signer(ctx)
    with session_scope(ctx.engine) as session:
        won = record_report(
            session, assay_id, decision=decision, report=report, faults=fault_rows(report)
        )
        if won:
            # In the same transaction: exactly one signed dossier version per finished assay.
            record_assay_dossier(session, signer, assay_id, report)
    if won:
        log.info(
            "assay decided",
            extra={
                "assay_id": str(assay_id),
                "candidate_id": str(parsed.inputs.candidate_id),
                "decision": decision,
            },
        )
    return decision


def fault_rows(report: dict[str, Any]) -> list[FaultRow]:
    """Split each fault of the report into its signature and its sampled trial evidence."""
    rows: list[FaultRow] = []
    for fault in report.get("faults", []):
        samples = fault.get("samples") or []
        rows.append(
            FaultRow(
                fault_id=str(fault["id"]),
                domain=fault.get("domain"),
                trials=int(fault.get("planned", 0)),
                signature={k: v for k, v in fault.items() if k != "samples"},
                evidence=list(samples),
            )
        )
    return rows


_active_keys: dict[tuple[int, str], ActiveKey] = {}


def dossier_signer(ctx: WorkerContext) -> Signer:
    """The service's active signing key, read per process and re-read after a rotation."""
    assert ctx.settings.keys_dir is not None
    key = (os.getpid(), str(ctx.settings.keys_dir))
    if key not in _active_keys:
        _active_keys[key] = ActiveKey(KeyRing(ctx.settings.keys_dir))
    return _active_keys[key].current()
