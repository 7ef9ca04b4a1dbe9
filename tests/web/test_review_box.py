"""A held candidate's page leads with what failed: the review box first (waive with an expiry,
reject, the hold in the queue), the failing faults first in the grid; and the holds page uses one
word per concept."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient

from tests.web.conftest import Fresh, Seeded, signed_in
from tests.web.test_presentation import card_of
from tests.web.test_review import open_hold_of, token

# A waiver may last at most 90 days by default (organisation policy `max_waiver_days`).
SOON = (datetime.now(UTC) + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M")


def test_a_held_candidates_page_puts_the_review_box_before_the_decision_and_the_faults(
    web_client: TestClient, seeded: Seeded
) -> None:
    reviewer = signed_in(web_client)
    page = reviewer.get(f"/candidates/{seeded.typed}").text
    box = page.index('id="review-box"')
    assert box < page.index('id="decision"') < page.index('aria-label="per-fault evidence"')
    hold = open_hold_of(reviewer, seeded.typed)
    section = page[box : page.index("</section>", box)]
    assert f'href="/holds?status=open#hold-{hold}"' in section
    assert f'action="/holds/{hold}/waive"' in section and 'name="expires_at"' in section
    assert f'action="/holds/{hold}/reject"' in section


def test_a_blocked_candidates_box_offers_reject_and_says_why_it_cannot_be_waived(
    web_client: TestClient, seeded: Seeded
) -> None:
    page = signed_in(web_client).get(f"/candidates/{seeded.baseline}").text
    section = page[page.index('id="review-box"') :].split("</section>", 1)[0]
    assert "/waive" not in section and "/reject" in section
    assert "cannot be waived" in section


def test_a_waiver_from_the_candidates_page_is_the_holds_pages_review(
    web_client: TestClient, fresh_typed: Fresh
) -> None:
    reviewer = signed_in(web_client)
    url = f"/candidates/{fresh_typed.candidate}"
    hold = open_hold_of(reviewer, fresh_typed.candidate)
    done = reviewer.post(
        f"/holds/{hold}/waive",
        data={"reason": "accepted for the pilot", "expires_at": SOON,
              "csrf": token(reviewer, url)},
        follow_redirects=False,
    )  # fmt: skip
    assert done.status_code == 303, done.text
    assert 'id="review-box"' not in reviewer.get(url).text


def test_the_per_fault_grid_lists_failing_faults_before_passing_ones(
    web_client: TestClient, seeded: Seeded
) -> None:
    page = web_client.get(f"/candidates/{seeded.baseline}").text
    grid = page[page.index('aria-label="per-fault evidence"') :]
    states = re.findall(r'<article class="card fault fault-(\w+)"', grid)
    rank = {"block": 0, "hold": 1, "allow": 2}
    assert states and states[0] != "allow"
    assert [rank[s] for s in states] == sorted(rank[s] for s in states)


def test_the_holds_page_says_decision_and_review_not_gate_and_hold_twice(
    web_client: TestClient, seeded: Seeded
) -> None:
    card = card_of(web_client.get("/holds").text, seeded.baseline)
    heading = card[card.index("<h2>") : card.index("</h2>")]
    words = re.sub(r"<[^>]+>", " ", heading).split()
    # "<system> <version> decision block review open": each word names one thing.
    assert words[-4:] == ["decision", "block", "review", "open"], words
    assert "gate" not in words and "hold" not in words
