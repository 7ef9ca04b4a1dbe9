"""The steps a shard task is made of, shared by the task (worker.tasks) and the shards a worker
holds with it (worker.held): retrying the database, the tenant-code refusal, the checks a started
shard passes before it runs (a stop, the injector credential), its spend and stop reason, storing
its result, and failing its assay.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from service.app import shards
from service.app.records import DATABASE_ERRORS
from service.app.shards import InjectorState, Stored
from service.core.errors import CredentialInvalid
from service.core.evidence.spend import ArmSpend, Meter
from service.core.evidence.tally import ShardResult
from service.core.faults.catalogue import FaultSpec
from service.core.shards.shard import ShardSpec
from service.core.signing.credential import InjectorScope, injection_guard, verify_credential
from service.core.system.manifest import runs_code
from service.core.trial.engine import TrialEngine, assay_key
from worker.code import CodeRefused, posture_view, refusal
from worker.context import Parsed, WorkerContext

log = logging.getLogger("assaygate.worker")

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
        quota = ctx.settings.quota()
        return shards.store(
            ctx.engine, parsed.inputs, index, result, quota, code_sha256, image, redactor
        )

    ids = {**ids, "shard": index}
    try:
        stored = retrying(ctx, "store the shard", ids, store)
    except shards.UNSEALABLE as exc:
        # Storing it again would fail again: the assay fails with the reason, and nothing of
        # the result reaches the database, the report or a reconciler's round.
        reason = shards.unsealable_reason(exc, f"shard {index}'s result")
        log.error("assay failed: %s", reason, extra=ids)
        retrying(ctx, "record the failure", ids, lambda: shards.fail(ctx.engine, assay_id, reason))
        return Stored(written=False, complete=False)
    log.info(
        "shard stored" if stored.written else "shard result already stored; discarded",
        extra={**ids, "trials": result.trials, "stop_reason": result.stop_reason},
    )
    return stored


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


def guard_target(
    target: Any, scope: InjectorScope, state: InjectorState
) -> Callable[[FaultSpec], str | None]:
    """The credential's injection guard, also handed to an engine whose injector checks it; an
    engine that names its trials (an mcp target's) keys their ids by the assay's credential, so
    they are opaque to the agent in every arm and the same on every shard and redelivery."""
    guard = injection_guard(scope, time.time)
    if isinstance(target, TrialEngine) and hasattr(target, "guard"):
        target.guard = guard  # an engine's injector checks this assay's credential too
    if hasattr(target, "blind_key"):
        setattr(target, "blind_key", assay_key(state.credential or ""))  # noqa: B010
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
