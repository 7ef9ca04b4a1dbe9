"""Tasks are thin: take ids, load, call the core, persist. Each is idempotent on its own key.

A shard task never acknowledges a shard it could not store. A database that does not answer is
retried with back-off for `store_retry_s` (the engine keeps running meanwhile: it needs no
database), and past that the message is handed back to the broker (`Reject(requeue=True)`). The
shard's lease is the last resort: if the message is lost anyway, the reconciler sends the shard
again (worker.reconciler).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import Any

from celery import Celery, Task
from celery.exceptions import Reject

from service.app import shards
from service.app.dossiers import Decide
from service.app.rights import RightEnded
from service.app.shards import InjectorState, ShardStart, Stored
from service.core.evidence.spend import Meter
from service.core.evidence.stopping import watch_for
from service.core.shards.assay import ShardResult, ShardSpec, run_shard
from service.core.signing.dossier import Signer
from service.keys import ActiveKey, KeyRing
from service.settings import Settings
from worker import held, webhooks
from worker.context import Parsed, WorkerContext
from worker.heartbeat import EngineWatch, Heartbeat
from worker.steps import (
    TRANSIENT,
    StoreUnavailable,
    admit,
    code_refusal,
    fail_assay,
    guard_target,
    retrying,
    settle,
    spent,
    store_result,
)

__all__ = [
    "RUN_SHARD",
    "SEAL",
    "StoreUnavailable",
    "execute_shard",
    "finalize",
    "register",
    "seals",
]

log = logging.getLogger("assaygate.worker")

RUN_SHARD = "assay.run_shard"
# Merge, decide and sign an assay whose shards are all stored: served by the shared queue only.
SEAL = "assay.seal"


def seals(settings: Settings) -> bool:
    """Whether this worker signs dossiers. A tenant's worker runs tenant code, so it never holds
    the signing key: it stores its results and hands the seal to the shared queue, whose workers
    run no tenant code (docs/operations.md, "Keys never meet tenant code")."""
    return settings.worker_tenant is None


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
        if done.pop("seal", False):
            hand_over(app, ctx, uuid.UUID(assay_id))
        return done

    @app.task(
        name=SEAL,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
        shared=False,
    )
    def seal_task(self: Task[Any, Any], assay_id: str) -> str | None:
        ids: dict[str, Any] = {"assay_id": assay_id, "worker": self.request.hostname or ""}
        if not seals(ctx.settings):
            # Only on a misrouted message: this worker holds no key, the shared pool does.
            hand_over(app, ctx, uuid.UUID(assay_id))
            return None
        try:
            parsed = retrying(ctx, "read the assay", ids, lambda: ctx.assay(uuid.UUID(assay_id)))
            if parsed is None:
                return None
            decision = retrying(ctx, "merge the assay", ids, lambda: finalize(ctx, parsed))
        except StoreUnavailable as exc:
            log.error("seal handed back to the broker: %s", exc, extra=ids)
            raise Reject(str(exc), requeue=True) from exc
        if decision is not None:
            webhooks.kick(app, ctx)
        return decision


def hand_over(app: Celery, ctx: WorkerContext, assay_id: uuid.UUID) -> None:
    """Ask the shared pool to seal the assay. Best effort: a message the broker refuses or
    loses is found by the shared workers' reconciler, which decides every assay left undecided."""
    try:
        app.send_task(SEAL, args=[str(assay_id)], queue=ctx.settings.queue)
    except Exception as exc:  # the reconciler decides it; a stored shard must not fail for this
        log.warning(
            "seal not sent (%s); the shared reconciler will",
            exc.__class__.__name__,
            extra={"assay_id": str(assay_id)},
        )


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
        lead = (shard_index, start, state)
        more = held.hold_more(ctx, parsed, lead, worker)
        if more:
            stored = held.run_and_store_held(ctx, parsed, [lead, *more], ids, worker)
        else:
            stored = run_and_store(ctx, parsed, shard_index, start, state, ids)
        outcome["stored"], complete = stored.written, stored.complete
    if complete and not seals(ctx.settings):
        return {**outcome, "decision": None, "seal": True}
    decision = (
        retrying(ctx, "merge the assay", ids, lambda: finalize(ctx, parsed)) if complete else None
    )
    if complete:
        # Its code's right to run ends with it (the warden's poll ends it on other processes).
        ctx.end_assay(assay_id, RightEnded("its assay ended (every shard stored)"))
    return {**outcome, "decision": decision}


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
    guard = guard_target(target, scope, state)
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


def finalize(ctx: WorkerContext, parsed: Parsed) -> str | None:
    """Merge once every shard is stored. Safe to call from any number of workers at once: the
    report is written only by the first, the others find the assay decided and change nothing."""
    assay_id = parsed.inputs.assay_id
    signer = dossier_signer(ctx)
    command = Decide(assay_id, parsed.manifest, parsed.plan, ctx.settings.quota())
    decided = shards.decide(ctx.engine, signer, command)
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
    """The service's active signing key, read per process and re-read after a rotation. Never in
    a tenant's worker: one there would make (and sign with) a key nobody published."""
    if not seals(ctx.settings):
        raise RuntimeError("a tenant's worker never signs: the shared pool seals its dossiers")
    assert ctx.settings.keys_dir is not None
    key = (os.getpid(), str(ctx.settings.keys_dir))
    if key not in _active_keys:
        _active_keys[key] = ActiveKey(KeyRing(ctx.settings.keys_dir))
    return _active_keys[key].current()
