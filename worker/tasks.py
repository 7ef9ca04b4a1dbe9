"""Tasks are thin: take ids, load, call the core, persist. Each is idempotent on its own key.

A shard task never acknowledges a shard it could not store. A database that does not answer is
retried with back-off for `store_retry_s` (the engine keeps running meanwhile: it needs no
database), and past that the message is handed back to the broker (`Reject(requeue=True)`). The
shard's lease is the last resort: if the message is lost anyway, the reconciler sends the shard
again (worker.reconciler).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from celery import Celery, Task
from celery.exceptions import Reject

from service.app import shards
from service.app.records import DATABASE_ERRORS
from service.app.shards import InjectorState, ShardStart, Stored
from service.core.errors import CredentialInvalid
from service.core.evidence.spend import ArmSpend, Meter
from service.core.evidence.stopping import watch_for
from service.core.faults.catalogue import FaultSpec
from service.core.shards.assay import ShardResult, ShardSpec, run_shard
from service.core.signing.credential import InjectorScope, injection_guard, verify_credential
from service.core.signing.dossier import Signer
from service.core.system.manifest import runs_code
from service.core.trial.engine import TrialEngine
from service.keys import ActiveKey, KeyRing
from worker import webhooks
from worker.code import CodeRefused, posture_view, refusal
from worker.context import Parsed, WorkerContext
from worker.heartbeat import EngineWatch, Heartbeat

log = logging.getLogger("assaygate.worker")

RUN_SHARD = "assay.run_shard"

T = TypeVar("T")


class StoreUnavailable(Exception):
    """The database did not answer within the task's retry budget."""


#: What a shard run must not turn into a failed assay: the database, not the engine, failed.
TRANSIENT: tuple[type[Exception], ...] = (StoreUnavailable, *DATABASE_ERRORS)


def retrying(ctx: WorkerContext, what: str, ids: dict[str, Any], step: Callable[[], T]) -> T:
    """Run one unit of database work, retrying a database that does not answer with exponential
    back-off (0.25 s doubling to 2 s) for `store_retry_s`. Each unit is idempotent, and a unit
    that failed rolled back, so running it again is always safe."""
    deadline = time.monotonic() + ctx.settings.store_retry_s
    delay = 0.25
    while True:
        try:
            return step()
        except DATABASE_ERRORS as exc:
            if time.monotonic() + delay > deadline:
                raise StoreUnavailable(f"could not {what}: the database did not answer") from exc
            log.warning(
                "database unavailable (%s); retrying to %s in %.2f s",
                exc.__class__.__name__,
                what,
                delay,
                extra=ids,
            )
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def register(app: Celery, ctx: WorkerContext) -> None:
    # The result of a shard lives in the database; nothing reads Celery's result backend, so
    # storing one would only add a broker write that an outage can fail. Not `shared`: the task
    # closes over this app's context, and must not be copied into another app of the process.
    @app.task(
        name=RUN_SHARD,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        shared=False,
    )
    def run_shard_task(self: Task[Any, Any], assay_id: str, shard_index: int) -> dict[str, Any]:
        try:
            done = execute_shard(ctx, uuid.UUID(assay_id), shard_index, self.request.hostname or "")
        except StoreUnavailable as exc:
            # Never acknowledged as done: the broker keeps the message for another try.
            log.error(
                "shard handed back to the broker: %s",
                exc,
                extra={"assay_id": assay_id, "shard": shard_index},
            )
            raise Reject(str(exc), requeue=True) from exc
        if done.get("decision") is not None:
            # The decision's webhooks now, not at the reconciler's next round.
            webhooks.kick(app, ctx)
        return done


def execute_shard(
    ctx: WorkerContext, assay_id: uuid.UUID, shard_index: int, worker: str
) -> dict[str, Any]:
    """Start the shard, run it, store it, and merge the assay if it was the last; a shard that
    is not started (stored, held by a live lease, or its assay finished) may still be the last
    one a merge waits for. On an engine with slots to spare the worker also begins, runs and
    stores more of the assay's shards with this one (worker.held)."""
    ids: dict[str, Any] = {"assay_id": str(assay_id), "shard": shard_index, "worker": worker}
    outcome: dict[str, Any] = {"assay_id": str(assay_id), "shard": shard_index, "stored": False}

    def begin() -> tuple[Parsed | None, ShardStart | None, InjectorState | None]:
        parsed = ctx.assay(assay_id)
        if parsed is None:
            return None, None, None
        begun = shards.begin(
            ctx.engine,
            parsed.inputs,
            shard_index,
            worker,
            lease_s=ctx.settings.shard_lease_s,
            max_attempts=ctx.settings.shard_max_attempts,
            refusal=code_refusal(ctx, parsed),
        )
        if begun.refused is not None:
            log.error("%s", begun.refused, extra=ids)
        return parsed, begun.start, begun.state

    parsed, start, state = retrying(ctx, "start the shard", ids, begin)
    if parsed is None:
        log.warning("shard of an unknown assay dropped", extra=ids)
        return {**outcome, "decision": None}
    ids["candidate_id"] = str(parsed.inputs.candidate_id)
    if start is None or state is None:
        log.info(
            "shard not started: stored, held by a live lease, or its assay finished", extra=ids
        )

        complete = retrying(
            ctx, "read the assay", ids, lambda: shards.ready_to_merge(ctx.engine, assay_id)
        )
    else:
        # Here, not at the top: worker.held builds on this module.
        from worker import held

        lead = (shard_index, start, state)
        more = held.hold_more(ctx, parsed, lead, worker)
        if more:
            stored = held.run_and_store_held(ctx, parsed, [lead, *more], ids)
        else:
            stored = run_and_store(ctx, parsed, shard_index, start, state, ids)
        outcome["stored"], complete = stored.written, stored.complete
    decision = (
        retrying(ctx, "merge the assay", ids, lambda: finalize(ctx, parsed)) if complete else None
    )
    return {**outcome, "decision": decision}


def code_refusal(ctx: WorkerContext, parsed: Parsed) -> Callable[[bool], str | None] | None:
    """For a shard naming the tenant's code: why this worker must not run it, given whether the
    tenant's code is allowed (worker.code), or why the code cannot run (an artifact missing, or
    whose bytes do not hash to its digest, or that does not unpack safely); its assay then fails
    with the reason and the shard never starts. None for a shard that runs no code.

    The code is fetched and checked here, before the shard's transaction (which the refusal
    runs in), and only by the tenant's own worker: a shared worker never reads it."""
    if not runs_code(parsed.manifest):
        return None
    settings, inputs = ctx.settings, parsed.inputs
    unusable: str | None = None
    if refusal(settings, inputs, parsed.manifest, True) is None:
        try:
            ctx.code(inputs.assay_id, inputs)
        except CodeRefused as exc:
            unusable = exc.reason

    def refuse(allowed: bool) -> str | None:
        return refusal(settings, inputs, parsed.manifest, allowed) or unusable

    return refuse


def run_and_store(
    ctx: WorkerContext,
    parsed: Parsed,
    index: int,
    start: ShardStart,
    state: InjectorState,
    ids: dict[str, Any],
) -> Stored:
    """Run the started shard under its lease's heartbeat and store its result; an engine that
    fails fails the assay (a database that fails does not: the message goes back)."""
    assay_id = parsed.inputs.assay_id
    engine = EngineWatch()
    with Heartbeat(ctx, assay_id, index, start.attempt, engine.activity):
        try:
            spec = ShardSpec.from_dict(start.spec)
            result = run_guarded(ctx, parsed, spec, state, ids, engine)
        except TRANSIENT:
            raise
        except Exception as exc:
            fail_assay(ctx, parsed, f"shard {index}", exc, ids)
            raise
        return store_result(ctx, parsed, result, ids)


def fail_assay(
    ctx: WorkerContext, parsed: Parsed, what: str, exc: Exception, ids: dict[str, Any]
) -> None:
    """An engine that failed fails the assay, with the error's words once secrets are out."""
    log.exception("shard failed", extra=ids)
    error = f"{what}: {type(exc).__name__}"
    with contextlib.suppress(Exception):  # the error's words only once secrets are out
        error = ctx.redactor(parsed.inputs, parsed.manifest).text(f"{what}: {exc}")
    assay_id = parsed.inputs.assay_id
    retrying(ctx, "record the failure", ids, lambda: shards.fail(ctx.engine, assay_id, error))


def store_result(
    ctx: WorkerContext, parsed: Parsed, result: ShardResult, ids: dict[str, Any]
) -> Stored:
    """Store a shard's result with the code it ran, its sandbox posture and image, its secrets
    blanked."""
    assay_id, index = parsed.inputs.assay_id, result.index
    # The code this shard ran, by digest, when it ran any trial of it.
    code = ctx.code_ran(assay_id) if result.trials else None
    code_sha256 = code.sha256 if code is not None else None
    if code is not None:
        # What confined it, carried into the report and the signed dossier.
        result.sandbox = posture_view(ctx.settings)
    # The image that code ran in, as the worker was told (ASSAYGATE_TENANT_IMAGE).
    image = ctx.settings.tenant_image if code is not None else None

    redactor = ctx.redactor(parsed.inputs, parsed.manifest)

    def store() -> Stored:
        return shards.store(ctx.engine, parsed.inputs, index, result, code_sha256, image, redactor)

    ids = {**ids, "shard": index}
    stored = retrying(ctx, "store the shard", ids, store)
    log.info(
        "shard stored" if stored.written else "shard result already stored; discarded",
        extra={**ids, "trials": result.trials, "stop_reason": result.stop_reason},
    )
    return stored


def run_guarded(
    ctx: WorkerContext,
    parsed: Parsed,
    spec: ShardSpec,
    state: InjectorState,
    ids: dict[str, Any],
    engine: EngineWatch | None = None,
) -> ShardResult:
    """Run a shard under the assay's injector credential and stop conditions.

    A shard does not start once a stop is recorded, nor under a credential that fails any check;
    it then stores an empty, stopped result, so the assay still completes and is decided (never
    `allow`). A running shard re-reads the stop flag between batches of trials.
    """
    assay_id = parsed.inputs.assay_id
    scope = admit(ctx, parsed, spec, state, ids)
    if isinstance(scope, ShardResult):
        return scope
    target = ctx.target(assay_id, parsed.manifest, parsed.inputs)
    if engine is not None:
        engine.watch(target)  # the heartbeat writes what it does as the shard's progress
    guard = guard_target(target, scope)
    manifest, plan = parsed.manifest, parsed.plan
    # As in the local CLI: a sequential fault (one shard) stops on its own tally; budgets count
    # what the assay's stored shards already spent.
    watch = watch_for(manifest, plan, spec.fault_id)
    meter = Meter(time.monotonic, used=spent(ctx, parsed, ids))
    result = run_shard(
        manifest,
        plan,
        spec,
        should_stop=ctx.stop_flag(assay_id),
        target=target,
        limits=shards.limits(state),
        guard=guard,
        namespace=scope.namespace,
        concurrency=ctx.settings.worker_slots,
        watch=watch,
        meter=meter,
    )
    return settle(ctx, parsed, result, meter, ids)


def admit(
    ctx: WorkerContext, parsed: Parsed, spec: ShardSpec, state: InjectorState, ids: dict[str, Any]
) -> InjectorScope | ShardResult:
    """The started shard's injector scope, or the empty, stopped result it stores instead: the
    assay is stopping, or its credential fails a check (said, and the assay stopped)."""
    assay_id = parsed.inputs.assay_id
    if state.stop_reason is not None:
        log.info("shard not started: the assay is stopping", extra=ids)
        return ShardResult(spec.index, {}, 0, True, state.stop_reason)
    try:
        return verified_scope(ctx, assay_id, state)
    except CredentialInvalid as exc:
        reason = f"injector credential refused: {exc}"
        refusal = {"reason": str(exc), "field": exc.field}

        def refuse() -> None:
            shards.refuse_credential(ctx.engine, parsed.inputs, spec.index, reason, refusal)

        retrying(ctx, "record the refusal", ids, refuse)
        log.warning("injector credential refused", extra={**ids, "reason": str(exc)})
        return ShardResult(spec.index, {}, 0, True, reason)


def guard_target(target: Any, scope: InjectorScope) -> Callable[[FaultSpec], str | None]:
    """The credential's injection guard, also handed to an engine whose injector checks it."""
    guard = injection_guard(scope, time.time)
    if isinstance(target, TrialEngine) and hasattr(target, "guard"):
        target.guard = guard  # an engine's injector checks this assay's credential too
    return guard


def spent(ctx: WorkerContext, parsed: Parsed, ids: dict[str, Any]) -> ArmSpend:
    """What the assay's stored shards spent (the budgets' starting point)."""
    assay_id, stop = parsed.inputs.assay_id, parsed.plan.stop
    return retrying(ctx, "read the spend", ids, lambda: shards.spent(ctx.engine, assay_id, stop))


def settle(
    ctx: WorkerContext,
    parsed: Parsed,
    result: ShardResult,
    meter: Meter | None,
    ids: dict[str, Any],
) -> ShardResult:
    """The run shard's spend (what `meter` counted), and an abort said in its recorded words."""
    assay_id, manifest = parsed.inputs.assay_id, parsed.manifest
    if meter is not None:
        faults = meter.view(parsed.plan.rule_for(manifest.target.kind))["faults"]
        result.spend = dict(faults) if isinstance(faults, dict) else None
    if result.stop_reason == "aborted":
        # Say why, in the words the abort was recorded with.
        def why() -> str | None:
            return shards.stop_reason(ctx.engine, assay_id)

        result.stop_reason = retrying(ctx, "read the stop", ids, why) or "aborted"
    return result


def verified_scope(ctx: WorkerContext, assay_id: uuid.UUID, state: InjectorState) -> InjectorScope:
    """The assay's injector credential, checked against the published keys (read again once if
    it names a key this process has not seen: a key rotated since)."""
    credential = state.credential or ""
    try:
        return verify_credential(
            credential, ctx.public_keys(), assay=str(assay_id), now=time.time()
        )
    except CredentialInvalid as exc:
        if "unknown key" not in exc.message:
            raise
    ctx.refresh_keys()
    return verify_credential(credential, ctx.public_keys(), assay=str(assay_id), now=time.time())


def finalize(ctx: WorkerContext, parsed: Parsed) -> str | None:
    """Merge once every shard is stored. Safe to call from any number of workers at once: the
    report is written only by the first, the others find the assay decided and change nothing."""
    assay_id = parsed.inputs.assay_id
    signer = dossier_signer(ctx)
    decided = shards.decide(ctx.engine, signer, assay_id, parsed.manifest, parsed.plan)
    if decided is None:
        return None
    if decided.won:
        log.info(
            "assay decided",
            extra={
                "assay_id": str(assay_id),
                "candidate_id": str(parsed.inputs.candidate_id),
                "decision": decided.decision,
            },
        )
    return decided.decision


_active_keys: dict[tuple[int, str], ActiveKey] = {}


def dossier_signer(ctx: WorkerContext) -> Signer:
    """The service's active signing key, read per process and re-read after a rotation."""
    assert ctx.settings.keys_dir is not None
    key = (os.getpid(), str(ctx.settings.keys_dir))
    if key not in _active_keys:
        _active_keys[key] = ActiveKey(KeyRing(ctx.settings.keys_dir))
    return _active_keys[key].current()
