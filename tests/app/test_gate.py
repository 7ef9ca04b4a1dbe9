"""Reading the gate writes nothing: a lapsed waiver or rejection reads `hold` the moment it
lapses, and the reconciler signs the version that records it later, once however often it
runs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from service.app import gate, reviews
from service.core.signing.dossier import Signer
from service.db import dossier as dossiers
from service.db import queries
from service.db.models import Candidate, Dossier, Hold, HoldStatus, System
from tests.web.seed import seed_candidate


@contextmanager
def statements(session: Session) -> Iterator[list[str]]:
    """Every SQL statement the session sends while the block runs."""
    seen: list[str] = []
    connection = session.connection()

    def record(*args: Any) -> None:
        seen.append(str(args[2]))

    sa.event.listen(connection, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(connection, "before_cursor_execute", record)


def writes(seen: list[str]) -> list[str]:
    verbs = ("INSERT", "UPDATE", "DELETE")
    return [s for s in seen if s.lstrip().upper().startswith(verbs) or "FOR UPDATE" in s.upper()]


def held(session: Session, signer: Signer, action: str, expires_at: datetime) -> Candidate:
    """A held candidate whose hold was waived (or rejected) until `expires_at`."""
    system = f"gate-{uuid.uuid4().hex[:8]}"
    recorded = seed_candidate(session, system=system, version="1.0", signer=signer)
    hold = session.exec(select(Hold).where(Hold.candidate_id == recorded.candidate.id)).one()
    done = reviews.record(
        session,
        signer,
        reviews.ReviewHold(
            hold_id=hold.id,
            action=reviews.Action(action),
            reviewer="someone-else",
            reason="fine for the pilot",
            expires_at=expires_at,
        ),
        now=expires_at - timedelta(days=1),
    )
    assert done is not None
    return recorded.candidate


def answer(session: Session, candidate: Candidate, now: datetime) -> gate.Answer:
    system = session.get(System, candidate.system_id)
    assert system is not None
    return gate.answer(session, system, candidate, now=now)


def test_reading_the_gate_issues_no_insert_update_or_lock(session: Session, signer: Signer) -> None:
    now = datetime.now(UTC)
    candidate = held(session, signer, "waive", now - timedelta(seconds=1))
    session.commit()
    with statements(session) as seen:
        found = answer(session, candidate, now)
    assert seen, "the listener saw the read"
    assert writes(seen) == []
    assert found.standing.decision is gate.Word.HOLD


def test_a_lapsed_waiver_reads_hold_before_any_reconciler_ran(
    session: Session, signer: Signer
) -> None:
    now = datetime.now(UTC)
    candidate = held(session, signer, "waive", now + timedelta(hours=1))
    assert answer(session, candidate, now).standing.decision is gate.Word.ALLOW

    lapsed = answer(session, candidate, now + timedelta(hours=2)).standing
    assert (lapsed.decision, lapsed.basis) == (gate.Word.HOLD, gate.Basis.EXPIRED)
    assert "waiver_expired" in {r["code"] for r in lapsed.reasons}
    assert lapsed.hold_id is not None and lapsed.until is None
    # Nothing was signed by reading: the newest version is still the waiver.
    newest = dossiers.latest(session, candidate.id)
    assert newest is not None and newest.decision == "allow"


def test_a_lapsed_rejection_reads_hold_like_the_version_the_reconciler_signs(
    session: Session, signer: Signer
) -> None:
    now = datetime.now(UTC)
    candidate = held(session, signer, "reject", now - timedelta(seconds=1))
    before = answer(session, candidate, now).standing
    assert reviews.expire_lapsed(session, signer, now=now) == 1
    after = answer(session, candidate, now).standing
    assert (before.decision, before.basis) == (after.decision, after.basis)
    assert before.reasons == after.reasons and before.hold_id == after.hold_id


def test_a_waiver_version_whose_hold_is_open_again_never_reads_allow(
    session: Session, signer: Signer
) -> None:
    # What a read outside one snapshot can meet: the hold reopened by a lapse whose version is
    # not yet visible. The waiver's `allow` no longer stands on anything.
    now = datetime.now(UTC)
    candidate = held(session, signer, "waive", now + timedelta(hours=1))
    hold = session.exec(select(Hold).where(Hold.candidate_id == candidate.id)).one()
    hold.status = HoldStatus.OPEN.value
    session.add(hold)
    session.flush()
    found = answer(session, candidate, now).standing
    assert (found.decision, found.basis) == (gate.Word.HOLD, gate.Basis.EXPIRED)
    assert "waiver_expired" in {r["code"] for r in found.reasons}
    assert found.hold_id == hold.id and found.changes_at is None


def test_the_reconciler_signs_exactly_one_expiry_version_however_often_it_runs(
    session: Session, signer: Signer
) -> None:
    now = datetime.now(UTC)
    candidate = held(session, signer, "waive", now - timedelta(seconds=1))
    assert reviews.expire_lapsed(session, signer, now=now) == 1
    assert reviews.expire_lapsed(session, signer, now=now) == 0
    versions = session.exec(
        select(Dossier).where(Dossier.candidate_id == candidate.id).order_by(col(Dossier.version))
    ).all()
    assert [(d.version, d.decision, d.change) for d in versions][1:] == [
        (2, "allow", versions[1].change),
        (3, "hold", "waiver expired"),
    ]
    hold = session.exec(select(Hold).where(Hold.candidate_id == candidate.id)).one()
    assert hold.status == HoldStatus.OPEN.value
    row = queries.candidate(session, candidate.id)
    assert row is not None


def cached_standing(changes_at: datetime | None = None) -> gate.Standing:
    return gate.Standing(
        uuid.uuid4(), gate.Word.ALLOW, gate.Basis.WAIVED, [], None, changes_at=changes_at
    )


def test_a_cached_answer_is_served_only_for_its_epoch() -> None:
    answers = gate.AnswerCache()
    system = System(name="cached", tenant_id=uuid.uuid4(), gate_epoch=3)
    now = datetime.now(UTC)
    answers.put(system, None, cached_standing(), b"{}")
    assert answers.get(system, None, now) == b"{}"
    assert answers.get(system, "1.0", now) is None, "another version is another answer"
    system.gate_epoch = 4
    assert answers.get(system, None, now) is None


def test_a_cached_answer_that_rests_on_a_review_is_served_until_it_lapses() -> None:
    answers = gate.AnswerCache()
    system = System(name="cached", tenant_id=uuid.uuid4())
    now = datetime.now(UTC)
    answers.put(system, None, cached_standing(changes_at=now + timedelta(seconds=1)), b"{}")
    assert answers.get(system, None, now) == b"{}"
    assert answers.get(system, None, now + timedelta(seconds=1)) is None


def test_the_cache_keeps_the_most_recently_used_answers_only() -> None:
    answers = gate.AnswerCache(size=2)
    systems = [System(name=f"s{n}", tenant_id=uuid.uuid4()) for n in range(3)]
    now = datetime.now(UTC)
    answers.put(systems[0], None, cached_standing(), b"0")
    answers.put(systems[1], None, cached_standing(), b"1")
    assert answers.get(systems[0], None, now) == b"0"  # now the most recent
    answers.put(systems[2], None, cached_standing(), b"2")
    assert answers.get(systems[1], None, now) is None
    assert [answers.get(s, None, now) for s in (systems[0], systems[2])] == [b"0", b"2"]
