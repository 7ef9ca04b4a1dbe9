"""One shard of an assay, as the worker runs it: start it under its lease, the stop conditions it
runs within, a refused injector credential, and its stored result with the injector's totals.
Each step is one unit of database work the worker may repeat (a unit that failed rolled back);
the caller owns the transaction (`session_scope`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from sqlmodel import Session

from service.core.assay import Limits, ShardResult
from service.core.plan import StopConditions
from service.core.spend import ArmSpend, budgeted, from_views
from service.db.assay import (
    AssayInputs,
    ShardStart,
    Stored,
    begin_shard,
    store_shard_result,
    stored_spend,
)
from service.db.injector import (
    InjectorState,
    add_totals,
    injector_state,
    record_event,
    request_stop,
)


def begin(
    session: Session, inputs: AssayInputs, index: int, worker: str, *, lease_s: float
) -> tuple[ShardStart | None, InjectorState | None]:
    """Take the shard's lease and read the injector's state; (None, None) if the shard is
    stored, held by a live lease, or its assay finished."""
    start = begin_shard(session, inputs, index, worker, lease_s=lease_s)
    if start is None:
        return None, None
    return start, injector_state(session, inputs.assay_id)


def limits(state: InjectorState, clock: Callable[[], float] = time.time) -> Limits:
    """What is left of the assay's stop conditions once the stored shards' totals are spent."""
    caps = state.limits

    def remaining(key: str, used: int) -> int | None:
        cap = caps.get(key)
        return None if cap is None else max(0, int(cap) - used)

    deadline = caps.get("deadline")
    return Limits(
        max_effects=remaining("max_effects", state.effects),
        max_unsafe=remaining("max_unsafe", state.unsafe),
        max_target_errors=remaining("max_target_errors", state.target_errors),
        deadline=float(deadline) if deadline is not None else None,
        clock=clock,
    )


def spent(session: Session, assay_id: uuid.UUID, stop: StopConditions) -> ArmSpend:
    """What the assay's stored shards spent: the budgets' starting point for the next shard.
    Read only under a budget: it sums every stored shard, which for a plan of many shards would
    make each shard's start cost grow with the shards before it."""
    if not budgeted(stop):
        return ArmSpend()
    return from_views(stored_spend(session, assay_id)).total()


def refuse_credential(
    session: Session, inputs: AssayInputs, index: int, reason: str, refusal: dict[str, Any]
) -> None:
    """A shard refused its injector credential: say so, and stop the assay."""
    record_event(
        session,
        "credential.refused",
        candidate_id=inputs.candidate_id,
        assay_id=inputs.assay_id,
        shard_index=index,
        data=refusal,
    )
    request_stop(session, inputs.assay_id, reason, kind="assay.stopped", data={})


def store(session: Session, inputs: AssayInputs, index: int, result: ShardResult) -> Stored:
    """Store the shard's result; only the run that stores first adds the injector's totals."""
    stored = store_shard_result(session, inputs, index, result.to_dict(), result.trials)
    if stored.written:
        _record_injector(session, inputs, index, result)
    return stored


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
