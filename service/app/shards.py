"""One shard of an assay, as the worker runs it: start it under its lease, the stop conditions it
runs within, a refused injector credential, its heartbeat, and its stored result with the
injector's totals; an assay that fails, and its merge once every shard is stored.
Each step is one unit of database work, in a transaction of its own, that the worker may repeat
(a unit that failed rolled back).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.app.dossiers import UNSEALABLE, Decide, Decided, decide_or_fail, unsealable_reason
from service.app.ports import Queue
from service.app.tenants import queue_of_assay
from service.core.evidence.quota import Quota, cut_shard
from service.core.evidence.spend import ArmSpend, budgeted, from_views
from service.core.faults.plan import StopConditions
from service.core.shards.assay import ShardResult, StopLimits
from service.core.shards.shard import ShardActivity
from service.core.signing.dossier import Signer, sealable
from service.core.system.redaction import Redactor
from service.core.system.text import as_texts
from service.db import assay as assays
from service.db.assay import AssayInputs, ShardStart, Stored
from service.db.injector import (
    InjectorState,
    add_totals,
    injector_state,
    record_event,
    request_stop,
)
from service.db.injector import stop_reason as stop_reason_in
from service.db.lease import (
    free_shards,
    record_progress,
    release_all,
    renew_lease,
    renew_leases,
)
from service.db.models import utcnow
from service.db.session import session_scope
from service.db.tenant import code_allowed
from service.settings import Settings

__all__ = ["UNSEALABLE", "Begun", "InjectorState", "ShardStart", "Stored", "unsealable_reason"]


def requeue_unfinished(engine: Engine, settings: Settings, queue: Queue) -> None:
    """Release every unfinished shard's lease and send it again, each to its assay's queue, in
    one transaction: if the queue refuses, nothing is counted."""
    with session_scope(engine) as session:
        unfinished = release_all(session, settings.shard_lease_s)
        for assay_id, indices in unfinished.items():
            queue.enqueue_shards(assay_id, indices, queue_of_assay(session, settings, assay_id))


def inputs(engine: Engine, assay_id: uuid.UUID) -> AssayInputs | None:
    """What a worker needs of an assay (written once, at submission); None for no such assay."""
    with Session(engine) as session:
        return assays.assay_inputs(session, assay_id)


@dataclass(frozen=True)
class Begun:
    """A shard's start: its lease and the injector's state, or None for both when the shard is
    stored, held by a live lease, its assay finished, or its code `refused` (the reason)."""

    start: ShardStart | None = None
    state: InjectorState | None = None
    refused: str | None = None


def begin(
    engine: Engine,
    inputs: AssayInputs,
    index: int,
    worker: str,
    *,
    lease_s: float,
    max_attempts: int | None = None,
    refusal: Callable[[bool], str | None] | None = None,
) -> Begun:
    """Take the shard's lease and read the injector's state. `refusal`, for a shard that runs
    the tenant's code: why this worker must not run it, given whether the tenant's code is
    allowed (read afresh here); a refused shard's assay fails with the reason, in the same
    transaction, and the shard never starts."""
    with session_scope(engine) as session:
        if refusal is not None:
            reason = refusal(code_allowed(session, inputs.tenant_id))
            if reason is not None:
                assays.fail_assay(session, inputs.assay_id, reason)
                return Begun(refused=reason)
        start = assays.begin_shard(
            session, inputs, index, worker, lease_s=lease_s, max_attempts=max_attempts
        )
        if start is None:
            return Begun()
        return Begun(start, injector_state(session, inputs.assay_id))


def limits(state: InjectorState, clock: Callable[[], float] = time.time) -> StopLimits:
    """What is left of the assay's stop conditions once the stored shards' totals are spent."""
    caps = state.limits

    def remaining(key: str, used: int) -> int | None:
        cap = caps.get(key)
        return None if cap is None else max(0, int(cap) - used)

    deadline = caps.get("deadline")
    return StopLimits(
        max_effects=remaining("max_effects", state.effects),
        max_unsafe=remaining("max_unsafe", state.unsafe),
        max_target_errors=remaining("max_target_errors", state.target_errors),
        deadline=float(deadline) if deadline is not None else None,
        clock=clock,
    )


def spent(engine: Engine, assay_id: uuid.UUID, stop: StopConditions) -> ArmSpend:
    """What the team's agent spent in the assay's stored shards: the budgets' starting point for
    the next shard. Read only under a budget: it sums every stored shard, which for a plan of
    many shards would make each shard's start cost grow with the shards before it."""
    if not budgeted(stop):
        return ArmSpend()
    with Session(engine) as session:
        return from_views(assays.stored_spend(session, assay_id)).team()


def stop_reason(engine: Engine, assay_id: uuid.UUID) -> str | None:
    """Why the assay is stopping (a stop condition, an abort), or None."""
    with Session(engine) as session:
        return stop_reason_in(session, assay_id)


def ready_to_merge(engine: Engine, assay_id: uuid.UUID) -> bool:
    """Every shard of the open assay is stored."""
    with Session(engine) as session:
        return assays.ready_to_merge(session, assay_id)


def fail(engine: Engine, assay_id: uuid.UUID, message: str) -> bool:
    """Fail the assay with the reason, once (`service.db.assay.fail_assay`)."""
    with session_scope(engine) as session:
        return assays.fail_assay(session, assay_id, message)


def record_waiting(engine: Engine, inputs: AssayInputs, note: str) -> None:
    """A trial of the assay waits for its world: the tenant's events say so."""
    with session_scope(engine) as session:
        assays.record_waiting(session, inputs, note)


def record_deprecated(engine: Engine, inputs: AssayInputs, lines: Sequence[str]) -> None:
    """The assay's code imports deprecated `assaygate` paths: the tenant's events say which."""
    with session_scope(engine) as session:
        assays.record_deprecated(session, inputs, lines)


def renew(engine: Engine, assay_id: uuid.UUID, index: int, attempt: int, lease_s: float) -> bool:
    """The running shard's heartbeat; False once it is stored or another attempt took it."""
    with session_scope(engine) as session:
        return renew_lease(session, assay_id, index, attempt, lease_s)


def renew_all(
    engine: Engine, assay_id: uuid.UUID, held: list[tuple[int, int]], lease_s: float
) -> int:
    """The heartbeat of every (shard, attempt) a worker holds, in one transaction; returns how
    many it still holds."""
    with session_scope(engine) as session:
        return renew_leases(session, assay_id, held, lease_s)


def free(
    engine: Engine, assay_id: uuid.UUID, *, limit: int, max_attempts: int | None = None
) -> list[int]:
    """The assay's shards a worker may begin now (queued, or whose lease lapsed), in order: what
    a worker holding several shards at once tries to `begin` next."""
    with Session(engine) as session:
        return free_shards(session, assay_id, utcnow(), limit=limit, max_attempts=max_attempts)


def progress(
    engine: Engine, assay_id: uuid.UUID, index: int, attempt: int, activity: ShardActivity
) -> bool:
    """The running shard's activity, as its workers' engine reports it."""
    with session_scope(engine) as session:
        return record_progress(session, assay_id, index, attempt, activity)


def refuse_credential(
    engine: Engine, inputs: AssayInputs, index: int, reason: str, refusal: dict[str, Any]
) -> None:
    """A shard refused its injector credential: say so, and stop the assay."""
    with session_scope(engine) as session:
        record_event(
            session,
            "credential.refused",
            candidate_id=inputs.candidate_id,
            assay_id=inputs.assay_id,
            shard_index=index,
            data=refusal,
        )
        request_stop(session, inputs.assay_id, reason, kind="assay.stopped", data={})


def store(
    engine: Engine,
    inputs: AssayInputs,
    index: int,
    result: ShardResult,
    quota: Quota,
    code_sha256: str | None = None,
    tenant_image: str | None = None,
    redactor: Redactor | None = None,
) -> Stored:
    """Store the shard's result, and the code it ran (`code_sha256`: the hex digest the worker
    checked; None when it ran none) with the image it ran in (`tenant_image`: the worker's
    word, `name@sha256:…`); only the run that stores first adds the injector's totals.
    `redactor` blanks the tenant's secrets from everything stored (errors, claims, tool
    arguments and replies): the report, the events and the signed dossier are made from it.
    Every string is made text (`as_texts`: a target's word that slipped past its entry point);
    a result that still has no RFC 8785 form (NaN, infinity, an integer beyond 2^53) raises
    EvidenceUnsealable before anything is written: it would make the dossier unsealable.
    `quota`: its sampled trials are cut to the shard's share before anything is written."""
    payload = result.to_dict()
    if redactor is not None:
        payload = redactor.value(payload)
    payload = as_texts(payload)
    sealable(payload, f"shard {index}'s result")
    with session_scope(engine) as session:
        payload = cut_shard(payload, quota, assays.shard_count(session, inputs.assay_id))
        stored = assays.store_shard_result(
            session, inputs, index, payload, result.trials, code_sha256, tenant_image
        )
        if stored.written:
            _record_injector(session, inputs, index, result)
        return stored


def decide(engine: Engine, signer: Signer, command: Decide) -> Decided | None:
    """Merge and decide the assay if every shard is stored and nobody has, in one transaction
    (`service.app.dossiers.decide_or_fail`, within its quota); None otherwise, and None when the
    merge could not be stored or signed (the assay is then failed with the reason)."""
    with session_scope(engine) as session:
        return decide_or_fail(session, signer, command)


def _record_injector(
    session: Session, inputs: AssayInputs, index: int, result: ShardResult
) -> None:
    """With the stored result, once: totals, refusals and any stop condition that tripped."""
    assay_id, candidate_id = inputs.assay_id, inputs.candidate_id
    errors = sum(t.all_errors for t in result.tallies.values())
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
                shard_index=index,
                data={"count": count},
            )
    reason = result.stop_reason
    if tripped is None and reason is not None and not reason.startswith("aborted"):
        request_stop(session, assay_id, reason, kind="assay.stopped", data={"shard": index})
