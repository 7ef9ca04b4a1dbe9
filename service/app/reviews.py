"""Reviews of dossiers that did not allow: waive or reject a hold, and the lapse of either.

Each review signs the next dossier version. A waiver lifts only `hold` reasons: a block (a hard
invariant, invalid evidence, a stop) is never waived into `allow`. A waiver or rejection lapses at
its expiry: the gate reads it as lapsed at once (`service.app.gate`, no write), and the
reconciler signs the version that records it (`expire_lapsed`), once however often it runs.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlmodel import Session, col, select

from service.app import notify, policies
from service.app.dossiers import derive
from service.app.errors import (
    ExpiryPassed,
    FieldInvalid,
    HoldNotOpen,
    NotFound,
    NotWaivable,
    ReviewerIsSubmitter,
)
from service.app.notify import HookEvent
from service.core.decision.gate import Decision, Reason, ReasonView, reason_view
from service.core.decision.policy import waiver_days
from service.core.signing.dossier import Signer
from service.db import dossier as dossiers
from service.db.apikey import Principal, actor_view, audit, review_conflict
from service.db.models import Candidate, Dossier, Hold, HoldStatus, System, as_utc, utcnow
from service.db.session import DATABASE_ERRORS

log = logging.getLogger("assaygate.reviews")


class Action(StrEnum):
    WAIVE = "waive"
    REJECT = "reject"


@dataclass(frozen=True)
class Review:
    """What a reviewer asks: waive (until an expiry) or reject one hold, with a reason."""

    hold_id: uuid.UUID
    action: Action
    reason: str
    expires_at: datetime | None = None


@dataclass(frozen=True)
class ReviewHold:
    """Waive or reject one open hold. `reviewer` is the reviewing key's id; `reviewed_by` who
    acted through it (`actor_view`), named in the hold, the messages and the signed entry."""

    hold_id: uuid.UUID
    action: Action
    reviewer: str
    reason: str
    expires_at: datetime | None
    reviewed_by: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Reviewed:
    hold: Hold
    dossier: Dossier


@dataclass(frozen=True)
class Lapse:
    """What a lapsed waiver or rejection stands for: the decision and the reasons of the version
    that records it, the same whether read before or after that version is signed."""

    what: str  # "waiver" or "rejection"
    decision: str
    reasons: list[ReasonView]


def _iso(value: datetime) -> str:
    return value.isoformat(timespec="seconds")


def held_reasons(hold: Hold) -> list[ReasonView]:
    """The reasons a hold was opened for, as its row stores them."""
    return [reason_view(r) for r in hold.reasons]


def hard_reasons(hold: Hold) -> list[ReasonView]:
    """The reasons no waiver can lift: every block (hard invariants, invalid evidence, a stop)."""
    return [r for r in held_reasons(hold) if r["severity"] == Decision.BLOCK]


def lapsed(hold: Hold, now: datetime) -> bool:
    """A waived or rejected hold whose expiry has passed."""
    return (
        hold.status in (HoldStatus.WAIVED.value, HoldStatus.REJECTED.value)
        and hold.expires_at is not None
        and as_utc(hold.expires_at) <= as_utc(now)
    )


def lapse(hold: Hold, status: str | None = None) -> Lapse:
    """What a lapsed review reads as; `status` names the review when the hold has already been
    reopened (read as of the lapse's own version)."""
    what = "waiver" if (status or hold.status) == HoldStatus.WAIVED.value else "rejection"
    by = hold.reviewed_by or hold.reviewer
    expires = hold.expires_at
    message = (
        f"the {what} by {by} expired at {_iso(expires) if expires else '?'}; the hold is open again"
    )
    return Lapse(
        what,
        Decision.BLOCK if hard_reasons(hold) else Decision.HOLD,
        [*held_reasons(hold), Reason(f"{what}_expired", message).view()],
    )


def _who(key_id: str, actor: Mapping[str, Any] | None) -> str:
    """A reviewer as messages name them: the person (the signed `reviewed_by` records the key's
    id and name; no message carries a part of a secret)."""
    if not actor:
        return f"key {key_id[:8]}"
    return str(actor["person"])


def _outcome(hold: Hold, command: ReviewHold, who: str) -> tuple[str, list[ReasonView]]:
    """The decision and reasons a review signs."""
    until = f" until {_iso(command.expires_at)}" if command.expires_at else ""
    if command.action is Action.WAIVE:
        # Defence in depth: only hold reasons are ever waived, so a block stays a block.
        remaining = hard_reasons(hold)
        waived = f"held reasons waived by {who}{until}: {command.reason}"
        return Decision.BLOCK if remaining else Decision.ALLOW, remaining or [
            Reason("waived", waived, severity=Decision.ALLOW).view()
        ]
    why = f"rejected by {who}{until}: {command.reason}"
    rejected = Reason("rejected", why, None, Decision.BLOCK)
    return Decision.BLOCK, [*held_reasons(hold), rejected.view()]


def record(
    session: Session, signer: Signer, command: ReviewHold, *, now: datetime | None = None
) -> Reviewed | None:
    """Sign the review of an open hold as the next dossier version; None if it is not open any
    more (re-checked under the candidate's lock). Flushes; the caller commits."""
    now = now or utcnow()
    hold = session.get(Hold, command.hold_id)
    if hold is None:
        return None
    candidate = dossiers.lock(session, hold.candidate_id)
    session.refresh(hold)
    before = dossiers.latest(session, candidate.id)
    if hold.status != HoldStatus.OPEN.value or before is None:
        return None
    status = HoldStatus.WAIVED if command.action is Action.WAIVE else HoldStatus.REJECTED
    reviewed_by = command.reviewed_by
    hold.status = status.value
    hold.reviewer = command.reviewer
    hold.reviewed_by = str(reviewed_by["person"]) if reviewed_by else None
    hold.review_reason = command.reason
    hold.reviewed_at = now
    hold.expires_at = command.expires_at
    session.add(hold)
    who = _who(command.reviewer, reviewed_by)
    decision, reasons = _outcome(hold, command, who)
    entry = {
        "hold_id": str(hold.id),
        "action": status.value,
        "reviewer": command.reviewer,
        "reviewed_by": dict(reviewed_by) if reviewed_by else None,
        "reason": command.reason,
        "at": _iso(now),
        "expires_at": _iso(command.expires_at) if command.expires_at else None,
        "reasons": [r.get("code") for r in hold.reasons],
    }
    dossier = derive(
        session,
        signer,
        candidate,
        before,
        change=f"{status.value} by {who}: {command.reason}",
        decision=decision,
        reasons=reasons,
        now=now,
        hold=hold,
        waiver=entry,
    )
    waived = command.action is Action.WAIVE
    event = HookEvent.HOLD_WAIVED if waived else HookEvent.HOLD_REJECTED
    notify.emit(session, candidate, dossier, event, hold)
    session.flush()
    return Reviewed(hold, dossier)


def expire_lapsed(session: Session, signer: Signer, *, now: datetime | None = None) -> int:
    """Sign a new version for each lapsed waiver (or rejection), reopening its hold; the number
    signed. Idempotent: each hold is re-read under its candidate's lock, so concurrent or
    repeated runs sign one version per lapse. Flushes; the caller commits.

    Each hold is its own savepoint: one whose version cannot be signed or stored (a row no
    canonical form exists for) is logged and skipped, and every other tenant's lapse is still
    signed and its `hold.reopened` still sent. A database that does not answer is not a bad
    row: it ends the call."""
    now = now or utcnow()
    expired = session.exec(
        select(Hold.id).where(
            col(Hold.status).in_([HoldStatus.WAIVED.value, HoldStatus.REJECTED.value]),
            col(Hold.expires_at).is_not(None),
            col(Hold.expires_at) <= now,
        )
    ).all()
    done = 0
    for hold_id in expired:
        try:
            with session.begin_nested():
                done += _expire(session, signer, hold_id, now)
        except DATABASE_ERRORS:
            raise
        except Exception:
            log.exception("lapsed review of hold %s not signed; skipped", hold_id)
    session.flush()
    return done


def _expire(session: Session, signer: Signer, hold_id: uuid.UUID, now: datetime) -> int:
    """Sign the version that reopens one lapsed hold (1), or nothing if it is not lapsed (0)."""
    hold = session.get(Hold, hold_id)
    assert hold is not None
    candidate = dossiers.lock(session, hold.candidate_id)
    session.refresh(hold)
    before = dossiers.latest(session, candidate.id)
    if not lapsed(hold, now) or before is None:
        return 0
    found = lapse(hold)
    hold.status = HoldStatus.OPEN.value
    session.add(hold)
    reopened = derive(
        session,
        signer,
        candidate,
        before,
        change=f"{found.what} expired",
        decision=found.decision,
        reasons=found.reasons,
        now=now,
        hold=hold,
    )
    notify.emit(session, candidate, reopened, HookEvent.HOLD_REOPENED, hold)
    session.flush()
    return 1


def review(
    session: Session,
    signer: Signer,
    principal: Principal,
    command: Review,
    *,
    now: datetime | None = None,
) -> Reviewed:
    """The review use case: check it, sign it, audit it, commit. Separation of duties is per
    person (`review_conflict`); a waiver needs an expiry in the future and lifts no block."""
    now = now or utcnow()
    if expire_lapsed(session, signer, now=now):
        session.commit()
    hold = dossiers.hold_of_tenant(session, command.hold_id, principal.tenant_id)
    if hold is None:
        raise NotFound(f"no hold {command.hold_id}", field="hold_id")
    candidate = session.get(Candidate, hold.candidate_id)
    assert candidate is not None
    expires_at = _checked_expiry(command, now)
    conflict = review_conflict(session, principal, candidate.submitter)
    if conflict is not None:
        raise ReviewerIsSubmitter(conflict, field="Authorization")
    if hold.status != HoldStatus.OPEN.value:
        raise HoldNotOpen(f"hold {command.hold_id} is {hold.status}", field="hold_id")
    blocking = hard_reasons(hold)
    if command.action is Action.WAIVE and blocking:
        codes = ", ".join(sorted({str(r.get("code")) for r in blocking}))
        raise NotWaivable(
            f"a waiver cannot lift a block ({codes}); re-run after fixing, or reject",
            field="hold_id",
        )
    if expires_at is not None and command.action is Action.WAIVE:
        _within_policy(session, principal, candidate, expires_at, now)
    signed = ReviewHold(
        command.hold_id,
        command.action,
        principal.actor,
        command.reason,
        expires_at,
        actor_view(session, principal.key_id),
    )
    done = record(session, signer, signed, now=now)
    if done is None:
        session.rollback()
        raise HoldNotOpen(
            f"hold {command.hold_id} was reviewed or superseded meanwhile", field="hold_id"
        )
    audit(
        session,
        principal,
        f"hold.{command.action.value}",
        f"hold:{command.hold_id}",
        candidate_id=candidate.id,
        reason=command.reason,
        dossier_id=str(done.dossier.id),
    )
    session.commit()
    return done


def _checked_expiry(command: Review, now: datetime) -> datetime | None:
    if command.action is Action.WAIVE and command.expires_at is None:
        raise FieldInvalid("a waiver needs an expiry", field="expires_at")
    expires_at = command.expires_at
    if expires_at is None:
        return None
    expires_at = as_utc(expires_at)
    if expires_at <= now:
        # Well-formed, but the clock already passed it: a conflict with now, not bad input.
        raise ExpiryPassed("the expiry must be in the future", field="expires_at")
    return expires_at


def _within_policy(
    session: Session,
    principal: Principal,
    candidate: Candidate,
    expires_at: datetime,
    now: datetime,
) -> None:
    """A waiver lasts no longer than the policy in force for its system allows
    (`max_waiver_days`, or the default): asked longer, it is refused naming the maximum."""
    system = session.get(System, candidate.system_id)
    name = system.name if system is not None else None
    force = policies.in_force(session, principal.tenant_id, principal.tenant, name)
    days = waiver_days(force.policy)
    latest = now + timedelta(days=days)
    if expires_at > latest:
        said = "max_waiver_days" if force.policy.max_waiver_days is not None else "the default"
        raise FieldInvalid(
            f"a waiver may last at most {days} days, until {_iso(latest)} ({said} of "
            f"{force.named()}); ask for an earlier expiry and waive again when it lapses",
            field="expires_at",
        )


def holds(
    session: Session,
    signer: Signer,
    tenant_id: uuid.UUID,
    *,
    system: str | None = None,
    status: str | None = None,
    limit: int = 100,
) -> list[Hold]:
    """The tenant's holds, newest first, with every lapsed review reopened first (a hold list
    shows the status a reviewer can act on)."""
    if expire_lapsed(session, signer):
        session.commit()
    return list(
        dossiers.holds(session, system=system, status=status, limit=limit, tenant_id=tenant_id)
    )


@dataclass(frozen=True)
class HeldCandidate:
    """Which candidate a hold is about, as people name it: its system and version."""

    system: str
    version: str


def held_candidates(session: Session, found: Sequence[Hold]) -> dict[uuid.UUID, HeldCandidate]:
    """The system and version of each hold's candidate, by candidate id."""
    names = dossiers.candidate_names(session, [h.candidate_id for h in found])
    return {cid: HeldCandidate(system, version) for cid, (system, version) in names.items()}


def hold(session: Session, signer: Signer, tenant_id: uuid.UUID, hold_id: uuid.UUID) -> Hold:
    if expire_lapsed(session, signer):
        session.commit()
    found = dossiers.hold_of_tenant(session, hold_id, tenant_id)
    if found is None:
        raise NotFound(f"no hold {hold_id}", field="hold_id")
    return found
