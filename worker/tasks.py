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
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from celery import Celery, Task
from celery.exceptions import Reject
from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.app import shards
from service.app.dossiers import decide
from service.app.secrets import secrets_for
from service.core.assay import ShardResult, ShardSpec, run_shard
from service.core.credential import InjectorScope, injection_guard, verify_credential
from service.core.dossier import PublicKey, Signer
from service.core.engine import TrialEngine
from service.core.errors import CredentialInvalid
from service.core.execution import runs_code
from service.core.manifest import Manifest, parse_manifest
from service.core.plan import AssayPlan, parse_plan
from service.core.secret import SecretsKey
from service.core.spend import ArmSpend, Meter
from service.core.stopping import watch_for
from service.core.target import Target
from service.db.assay import (
    AssayInputs,
    ShardStart,
    Stored,
    assay_inputs,
    fail_assay,
    ready_to_merge,
    record_waiting,
)
from service.db.injector import InjectorState, stop_reason
from service.db.session import DATABASE_ERRORS, make_engine, session_scope
from service.db.tenant import code_allowed
from service.keys import ActiveKey, KeyRing, load_secrets_key
from service.net.egress import EgressPolicy
from service.settings import Settings
from service.targets import close_target, load_target
from worker.code import confinement_for, refusal
from worker.heartbeat import EngineWatch, Heartbeat

log = logging.getLogger("assaygate.worker")

RUN_SHARD = "assay.run_shard"
# Target adapters kept per process: a python target holds a child process, an http target a tool
# server, so the least recently used beyond this many are closed.
MAX_TARGETS = 4

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
        self._egress: EgressPolicy | None = None
        self._secrets_key: SecretsKey | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None or self._pid != os.getpid():
            self.forget_engine()
            self._engine = make_engine(self.settings)
            self._pid = os.getpid()
            self._assays.clear()
        return self._engine

    def forget_engine(self) -> None:
        """In a forked child: drop the parent's pooled connections without closing them (they
        are the parent's sockets), as SQLAlchemy advises for multiprocessing."""
        if self._engine is not None:
            self._engine.dispose(close=False)
            self._engine = None

    def public_keys(self) -> dict[str, PublicKey]:
        """The service's published keys (public halves only: no private key reaches a worker)."""
        if not self._keys:
            self.refresh_keys()
        return self._keys

    def refresh_keys(self) -> None:
        # Only the public index of the injector ring: no credential-minting key reaches a worker.
        assert self.settings.injector_public_dir is not None
        self._keys = {k.keyid: k for k in KeyRing(self.settings.injector_public_dir).published()}

    def target(
        self, assay_id: uuid.UUID, manifest: Manifest, inputs: AssayInputs
    ) -> Target | TrialEngine | None:
        """The adapter for a python, http or mcp target, one per tenant and manifest per
        process. Its connections to the manifest's URLs are checked against the egress policy;
        an mcp target's world lock is the tenant's and names this assay while a trial holds it;
        a manifest naming the tenant's code gets its confinement (the OS sandbox, the tenant's
        named secrets, the egress check) and never runs without one."""
        tenant = inputs.tenant_id.hex
        key = f"{tenant}:{manifest.digest()}"
        if key in self._targets:
            self._targets.move_to_end(key)
            target = self._targets[key]
        else:
            if self._egress is None:
                self._egress = EgressPolicy.from_settings(self.settings)
            confinement = None
            if runs_code(manifest):
                confinement = confinement_for(
                    self.settings, manifest, self.secrets(inputs, manifest), self._egress.resolve
                )
            target = self._targets[key] = load_target(
                manifest,
                confinement=confinement,
                egress=self._egress,
                tenant=tenant,
                slots=self.settings.worker_slots,
            )
            notice = getattr(target, "notice", None)
            if notice:
                log.info(notice, extra={"assay_id": str(assay_id)})
        while len(self._targets) > MAX_TARGETS:
            close_target(self._targets.popitem(last=False)[1])
        if hasattr(target, "holder"):  # an mcp engine (imported lazily, with the MCP SDK)
            setattr(target, "holder", str(assay_id))  # noqa: B010
            setattr(target, "on_wait", self._waiting(assay_id, inputs))  # noqa: B010
        return target

    def secrets(self, inputs: AssayInputs, manifest: Manifest) -> Mapping[str, str]:
        """The tenant's named secrets the manifest asks for, decrypted for its sandboxed code
        only (the operator's key is read once per process; a worker never creates it)."""
        if not manifest.target.secrets:
            return {}
        if self._secrets_key is None:
            assert self.settings.secrets_key_file is not None  # settings derive it
            self._secrets_key = load_secrets_key(self.settings.secrets_key_file)
        with Session(self.engine) as session:
            return secrets_for(
                session, inputs.tenant_id, manifest.target.secrets, self._secrets_key
            )

    def _waiting(self, assay_id: uuid.UUID, inputs: AssayInputs | None) -> Callable[[str], None]:
        """Where a trial waiting for its world says so: a log line and the assay's events."""

        def waiting(note: str) -> None:
            log.warning(note, extra={"assay_id": str(assay_id)})
            if inputs is None:
                return
            try:
                with session_scope(self.engine) as session:
                    record_waiting(session, inputs, note)
            except DATABASE_ERRORS:
                pass  # the log line stands; the wait goes on

        return waiting

    def stop_flag(self, assay_id: uuid.UUID, every_s: float = 0.2) -> Callable[[], bool]:
        """Polled between batches of trials: has a stop been recorded? At most every `every_s`.
        A database that does not answer is not a stop: the shard keeps running (the engine needs
        no database) and reads the flag again once it answers."""
        last = [0.0]

        def stopped() -> bool:
            now = time.monotonic()
            if now - last[0] < every_s:
                return False
            last[0] = now
            try:
                with Session(self.engine) as session:
                    return stop_reason(session, assay_id) is not None
            except DATABASE_ERRORS:
                return False

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
            return execute_shard(ctx, uuid.UUID(assay_id), shard_index, self.request.hostname or "")
        except StoreUnavailable as exc:
            # Never acknowledged as done: the broker keeps the message for another try.
            log.error(
                "shard handed back to the broker: %s",
                exc,
                extra={"assay_id": assay_id, "shard": shard_index},
            )
            raise Reject(str(exc), requeue=True) from exc


def execute_shard(
    ctx: WorkerContext, assay_id: uuid.UUID, shard_index: int, worker: str
) -> dict[str, Any]:
    """Start the shard, run it, store it, and merge the assay if it was the last; a shard that
    is not started (stored, held by a live lease, or its assay finished) may still be the last
    one a merge waits for."""
    ids: dict[str, Any] = {"assay_id": str(assay_id), "shard": shard_index, "worker": worker}
    outcome: dict[str, Any] = {"assay_id": str(assay_id), "shard": shard_index, "stored": False}

    def begin() -> tuple[Parsed | None, ShardStart | None, InjectorState | None]:
        with session_scope(ctx.engine) as session:
            parsed = ctx.assay(session, assay_id)
            if parsed is None:
                return None, None, None
            if refused(ctx, session, parsed, ids):
                return parsed, None, None
            lease_s = ctx.settings.shard_lease_s
            return parsed, *shards.begin(
                session, parsed.inputs, shard_index, worker, lease_s=lease_s
            )

    parsed, start, state = retrying(ctx, "start the shard", ids, begin)
    if parsed is None:
        log.warning("shard of an unknown assay dropped", extra=ids)
        return {**outcome, "decision": None}
    ids["candidate_id"] = str(parsed.inputs.candidate_id)
    if start is None or state is None:
        log.info(
            "shard not started: stored, held by a live lease, or its assay finished", extra=ids
        )

        def ready() -> bool:
            with Session(ctx.engine) as session:
                return ready_to_merge(session, assay_id)

        complete = retrying(ctx, "read the assay", ids, ready)
    else:
        stored = run_and_store(ctx, parsed, shard_index, start, state, ids)
        outcome["stored"], complete = stored.written, stored.complete
    decision = (
        retrying(ctx, "merge the assay", ids, lambda: finalize(ctx, parsed)) if complete else None
    )
    return {**outcome, "decision": decision}


def refused(ctx: WorkerContext, session: Session, parsed: Parsed, ids: dict[str, Any]) -> bool:
    """A shard naming the tenant's code that this worker must not run: its assay fails with the
    reason (in the caller's transaction), and the shard is never started (worker.code)."""
    inputs = parsed.inputs
    if not runs_code(parsed.manifest):
        return False
    allowed = code_allowed(session, inputs.tenant_id)
    reason = refusal(ctx.settings, inputs, parsed.manifest, allowed)
    if reason is None:
        return False
    fail_assay(session, inputs.assay_id, reason)
    log.error("%s", reason, extra=ids)
    return True


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
            log.exception("shard failed", extra=ids)
            error = f"shard {index}: {exc}"

            def fail() -> None:
                with session_scope(ctx.engine) as session:
                    fail_assay(session, assay_id, error)

            retrying(ctx, "record the failure", ids, fail)
            raise

        def store() -> Stored:
            with session_scope(ctx.engine) as session:
                return shards.store(session, parsed.inputs, index, result)

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
    if state.stop_reason is not None:
        log.info("shard not started: the assay is stopping", extra=ids)
        return ShardResult(spec.index, {}, 0, True, state.stop_reason)
    try:
        scope = verified_scope(ctx, assay_id, state)
    except CredentialInvalid as exc:
        reason = f"injector credential refused: {exc}"
        refusal = {"reason": str(exc), "field": exc.field}

        def refuse() -> None:
            with session_scope(ctx.engine) as session:
                shards.refuse_credential(session, parsed.inputs, spec.index, reason, refusal)

        retrying(ctx, "record the refusal", ids, refuse)
        log.warning("injector credential refused", extra={**ids, "reason": str(exc)})
        return ShardResult(spec.index, {}, 0, True, reason)
    target = ctx.target(assay_id, parsed.manifest, parsed.inputs)
    if engine is not None:
        engine.watch(target)  # the heartbeat writes what it does as the shard's progress
    guard = injection_guard(scope, time.time)
    if isinstance(target, TrialEngine) and hasattr(target, "guard"):
        target.guard = guard  # an engine's injector checks this assay's credential too
    manifest, plan = parsed.manifest, parsed.plan
    # As in the local CLI: a sequential fault (one shard) stops on its own tally; budgets count
    # what the assay's stored shards already spent.
    watch = watch_for(manifest, plan, spec.fault_id)

    def spent() -> ArmSpend:
        with Session(ctx.engine) as session:
            return shards.spent(session, assay_id, plan.stop)

    meter = Meter(time.monotonic, used=retrying(ctx, "read the spend", ids, spent))
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
    faults = meter.view(plan.rule_for(manifest.target.kind))["faults"]
    result.spend = dict(faults) if isinstance(faults, dict) else None
    if result.stop_reason == "aborted":
        # Say why, in the words the abort was recorded with.
        def why() -> str | None:
            with Session(ctx.engine) as session:
                return stop_reason(session, assay_id)

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
    with session_scope(ctx.engine) as session:
        decided = decide(session, signer, assay_id, parsed.manifest, parsed.plan)
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
