"""What an operator's `/metrics` counts as a hold awaiting review (issue 47: every blocked
candidate counted as an open hold, so the documented "a hold nobody reviews" alert fired for each
block)."""

from __future__ import annotations

import uuid

from sqlmodel import Session, col, select

from service.core.signing.dossier import Signer
from service.db.counts import operator_counts
from service.db.models import Hold
from service.http.metrics import ASSAY_BUCKETS
from tests.web.seed import seed_candidate


def test_a_blocked_candidate_is_no_hold_awaiting_review_and_a_held_one_is(
    session: Session, signer: Signer
) -> None:
    before = len(operator_counts(session, ASSAY_BUCKETS).hold_opened)
    tenant = f"ops-{uuid.uuid4().hex[:8]}"
    held = seed_candidate(session, system="held", version="1", signer=signer, tenant=tenant)
    blocked = seed_candidate(
        session,
        system="blocked",
        version="1",
        example_name="baseline",
        signer=signer,
        tenant=tenant,
    )
    assert (held.assay.decision, blocked.assay.decision) == ("hold", "block")
    opened = session.exec(
        select(Hold.candidate_id).where(
            col(Hold.candidate_id).in_([held.candidate.id, blocked.candidate.id]),
            Hold.status == "open",
        )
    ).all()
    assert len(opened) == 2, "each awaits a reviewer: a block's hold may be rejected"
    assert len(operator_counts(session, ASSAY_BUCKETS).hold_opened) == before + 1
