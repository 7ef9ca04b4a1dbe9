"""Injector identities and stop conditions in the database.

The credential is minted when the assay is recorded and stored with it; stop conditions and the
running totals they are checked against live on the assay row, so the abort path is a database
write that no disturbed component sits in front of.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col

from service.core.faults.plan import AssayPlan
from service.core.signing.credential import InjectorScope, mint
from service.core.signing.dossier import Signer
from service.db.models import Assay, AssayStatus, Event, utcnow
from service.settings import Settings

FINISHED = (AssayStatus.DONE.value, AssayStatus.STOPPED.value, AssayStatus.FAILED.value)
# Generous: every arm of every trial may commit twice before the cap means something is wrong.
EFFECTS_PER_TRIAL = 10
SECONDS_PER_TRIAL = 0.002


@dataclass(frozen=True)
class InjectorState:
    credential: str | None
    limits: dict[str, Any]
    effects: int
    unsafe: int
    target_errors: int
    stop_reason: str | None
    status: str


def injector_modes(plan: AssayPlan) -> list[str]:
    """Every fault the assay may inject, with the steps of its ordered compositions."""
    faults, steps = _faults_and_steps(plan)
    return sorted({*faults, *steps})


def _faults_and_steps(plan: AssayPlan) -> tuple[list[str], list[str]]:
    """The faults the assay runs (what the catalogue counts), and the steps its ordered
    compositions arm after them that are not faults of their own."""
    cat = plan.resolve_catalogue()
    faults = [f.id for f in (plan.faults() if not plan.paper else cat.faults)]
    steps = sorted({s for f in (plan.faults() if not plan.paper else cat.faults) for s in f.then})
    return faults, [s for s in steps if s not in faults]


def issue_credential(
    session: Session,
    assay: Assay,
    *,
    tenant: str,
    plan: AssayPlan,
    signer: Signer,
    namespace: str,
    max_effects: int,
    margin_s: float,
    defaults: dict[str, Any],
) -> None:
    """Mint the assay's injector credential and resolve its stop conditions onto the row."""
    now = time.time()
    expected = max(60.0, assay.trials_planned * SECONDS_PER_TRIAL)
    stop = plan.stop
    limits = {
        "max_effects": stop.max_effects
        if stop.max_effects is not None
        else min(max_effects, EFFECTS_PER_TRIAL * assay.trials_planned),
        "max_unsafe": stop.max_unsafe if stop.max_unsafe is not None else defaults["max_unsafe"],
        "max_target_errors": stop.max_target_errors
        if stop.max_target_errors is not None
        else defaults["max_target_errors"],
        "deadline": now + (stop.deadline_s or defaults["deadline_s"] or expected * 10 + margin_s),
    }
    scope = InjectorScope(
        tenant=tenant,
        candidate=str(assay.candidate_id),
        assay=str(assay.id),
        modes=tuple(injector_modes(plan)),
        namespace=namespace,
        max_effects=int(limits["max_effects"]),
        not_before=now - 5.0,  # tolerate clock skew between API and workers
        expires=now + expected + margin_s,
    )
    faults, steps = _faults_and_steps(plan)
    assay.credential = mint(scope, signer)
    assay.limits = limits
    session.add(assay)
    session.add(
        Event(
            kind="credential.minted",
            candidate_id=assay.candidate_id,
            assay_id=assay.id,
            data={
                "tenant": tenant,
                "keyid": signer.keyid,
                "modes": list(scope.modes),
                # The modes are the faults and their composition steps: the log counts them
                # apart, as the catalogue does.
                "faults": len(faults),
                "steps": len(steps),
                "namespace": namespace,
                "max_effects": scope.max_effects,
                "expires": scope.expires,
                "limits": limits,
            },
        )
    )


def issue_for(
    session: Session,
    assay: Assay,
    *,
    tenant: str,
    plan: AssayPlan,
    signer: Signer,
    settings: Settings,
) -> None:
    """`issue_credential` with the namespace, caps and stop defaults the settings configure."""
    issue_credential(
        session,
        assay,
        tenant=tenant,
        plan=plan,
        signer=signer,
        namespace=settings.injector_namespace,
        max_effects=settings.injector_max_effects,
        margin_s=settings.injector_margin_s,
        defaults={
            "max_unsafe": settings.stop_max_unsafe,
            "max_target_errors": settings.stop_max_target_errors,
            "deadline_s": settings.stop_deadline_s,
        },
    )


def injector_state(session: Session, assay_id: uuid.UUID) -> InjectorState | None:
    row = session.execute(
        sa.select(
            col(Assay.credential),
            col(Assay.limits),
            col(Assay.effects),
            col(Assay.unsafe),
            col(Assay.target_errors),
            col(Assay.stop_reason),
            col(Assay.status),
        ).where(col(Assay.id) == assay_id)
    ).first()
    if row is None:
        return None
    cred, limits, effects, unsafe, target_errors, reason, status = row
    return InjectorState(cred, dict(limits or {}), effects, unsafe, target_errors, reason, status)


def stop_reason(session: Session, assay_id: uuid.UUID) -> str | None:
    reason: str | None = session.execute(
        sa.select(col(Assay.stop_reason)).where(col(Assay.id) == assay_id)
    ).scalar_one_or_none()
    return reason


def request_stop(
    session: Session, assay_id: uuid.UUID, reason: str, *, kind: str, data: dict[str, Any]
) -> bool:
    """Record why the assay stops, once; later shards find it and do not start."""
    values: dict[str, Any] = {"stop_reason": reason[:300]}
    if kind == "assay.aborted":
        values["aborted_at"] = utcnow()
    written = session.execute(
        sa.update(Assay)
        .where(
            col(Assay.id) == assay_id,
            col(Assay.stop_reason).is_(None),
            col(Assay.status).not_in(FINISHED),
        )
        .values(**values)
    )
    if written.rowcount != 1:  # type: ignore[attr-defined]
        return False
    candidate_id = session.execute(
        sa.select(col(Assay.candidate_id)).where(col(Assay.id) == assay_id)
    ).scalar_one()
    session.add(
        Event(
            kind=kind,
            candidate_id=candidate_id,
            assay_id=assay_id,
            data={"reason": reason, **data},
        )
    )
    return True


def add_totals(
    session: Session, assay_id: uuid.UUID, effects: int, unsafe: int, target_errors: int
) -> str | None:
    """Add a stored shard's totals (once, with its result) and trip a stop condition if due."""
    row = session.execute(
        sa.update(Assay)
        .where(col(Assay.id) == assay_id)
        .values(
            effects=col(Assay.effects) + effects,
            unsafe=col(Assay.unsafe) + unsafe,
            target_errors=col(Assay.target_errors) + target_errors,
        )
        .returning(
            col(Assay.effects), col(Assay.unsafe), col(Assay.target_errors), col(Assay.limits)
        )
    ).one()
    total_effects, total_unsafe, total_errors, limits = row
    limits = limits or {}
    reason = None
    if limits.get("max_effects") is not None and total_effects > limits["max_effects"]:
        reason = f"effects above the cap ({total_effects} > {limits['max_effects']})"
    elif limits.get("max_unsafe") is not None and total_unsafe > limits["max_unsafe"]:
        reason = f"unsafe escapes above the limit ({total_unsafe} > {limits['max_unsafe']})"
    elif limits.get("max_target_errors") is not None and total_errors > limits["max_target_errors"]:
        reason = f"target errors above the limit ({total_errors} > {limits['max_target_errors']})"
    if reason is not None:
        request_stop(session, assay_id, reason, kind="assay.stopped", data={})
    return reason


def record_event(
    session: Session,
    kind: str,
    *,
    candidate_id: uuid.UUID | None,
    assay_id: uuid.UUID | None,
    shard_index: int | None = None,
    data: dict[str, Any],
) -> None:
    session.add(
        Event(
            kind=kind,
            candidate_id=candidate_id,
            assay_id=assay_id,
            shard_index=shard_index,
            data=data,
        )
    )
