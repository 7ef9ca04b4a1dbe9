"""The attempts of a release, read back: every finished assay of one system's candidates with the
same code, manifest and policy digests, oldest first; no other system's, code's or policy's, and
none still running."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlmodel import Session

from service.core.decision.gate import Reason
from service.core.decision.release import Release
from service.db import release as releases
from service.db.candidate import Recorded
from service.db.models import Assay, utcnow
from tests.db.test_candidate import record

START = utcnow()


def finished(
    session: Session,
    recorded: Recorded,
    minute: int,
    decision: str = "block",
    *,
    code: str | None = "c0de",
    policy: str | None = "p0l1",
    stopped: str | None = None,
    reasons: tuple[Reason, ...] = (Reason("duplicate_effect", "d", "f"),),
) -> Assay:
    """The recorded candidate's assay, finished `minute` minutes after the start."""
    recorded.candidate.code_sha256 = code
    assay = recorded.assay
    assay.policy = None if policy is None else {"digest": policy, "policy": {}}
    assay.decision = decision
    assay.reasons = [r.view() for r in reasons]
    assay.report = {"decision": decision, "stopped": stopped}
    assay.trials_done = 30
    assay.finished_at = START + timedelta(minutes=minute)
    session.add_all([recorded.candidate, assay])
    session.flush()
    return assay


def release_of(recorded: Recorded, code: str | None = "c0de", policy: str | None = "p0l1") -> Any:
    c = recorded.candidate
    return Release(str(c.system_id), code, c.manifest_digest, policy)


def test_every_finished_attempt_of_the_release_is_read_oldest_first(session: Session) -> None:
    later = finished(session, record(session), 2, "allow", reasons=())
    first = record(session)
    earlier = finished(session, first, 1, stopped="unsafe escapes above the limit (2 > 1)")
    found = releases.attempts(session, release_of(first))
    assert [a.assay_id for a in found] == [str(earlier.id), str(later.id)]
    assert found[0].candidate_id == str(first.candidate.id)
    assert found[0].candidate_version == "1.5.0"
    assert found[0].decision == "block" and found[0].trials == 30
    assert found[0].stopped == "unsafe escapes above the limit (2 > 1)"
    assert [r["code"] for r in found[0].reasons] == ["duplicate_effect"]
    assert releases.attempts(session, release_of(first), excluding=earlier.id)[0].decision == (
        "allow"
    )


def test_other_code_another_policy_another_system_or_a_running_assay_is_not_an_attempt(
    session: Session,
) -> None:
    mine = record(session)
    finished(session, mine, 1)
    finished(session, record(session), 2, code="other")
    finished(session, record(session), 3, code=None)
    finished(session, record(session), 4, policy="another")
    finished(session, record(session), 5, policy=None)
    finished(session, record(session, system="elsewhere"), 6)
    record(session)  # still queued
    assert [a.assay_id for a in releases.attempts(session, release_of(mine))] == [
        str(mine.assay.id)
    ]
    assert len(releases.attempts(session, release_of(mine, code=None))) == 1
    assert len(releases.attempts(session, release_of(mine, policy=None))) == 1


def test_a_release_is_read_from_its_candidate_and_assay(session: Session) -> None:
    mine = record(session)
    assay = finished(session, mine, 1)
    assert releases.of(mine.candidate, assay) == release_of(mine)
    assert releases.lock(session, assay.id) == release_of(mine)
