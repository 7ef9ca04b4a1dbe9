"""Sign-in, dossiers verified on the page, and the holds queue: every review action needs a
signed-in reviewer and the form token of their session."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient

from tests.web.conftest import Fresh, Seeded, key_for, signed_in

# A waiver may last at most 90 days by default (organisation policy `max_waiver_days`).
SOON = (datetime.now(UTC) + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M")


def token(client: TestClient, url: str = "/signin") -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get(url).text)
    assert found is not None
    return found.group(1)


def open_hold_of(client: TestClient, candidate: str) -> str:
    page = client.get("/holds").text
    block = page[: page.index(f'href="/candidates/{candidate}"')]
    return block.rsplit('id="hold-', 1)[1].split('"', 1)[0]


def test_the_dossier_page_verifies_every_version_against_the_published_keys(
    web_client: TestClient, seeded: Seeded
) -> None:
    page = web_client.get(f"/candidates/{seeded.baseline}/dossier").text
    assert "✔ verified" in page and "does not verify" not in page
    assert "Version 1" in page and "pill-block" in page
    assert 'href="/v1/dossiers/' in page and "/envelope" in page
    envelope = re.search(r'href="(/v1/dossiers/[^"]+/envelope)"', page)
    assert envelope is not None
    download = web_client.get(envelope.group(1), headers=key_for(web_client, "rita").headers)
    assert download.json()["payloadType"]


def test_review_actions_are_refused_without_sign_in_or_without_the_form_token(
    web_client: TestClient, seeded: Seeded
) -> None:
    hold = open_hold_of(web_client, seeded.typed)
    anonymous = TestClient(web_client.app)
    form = {"reason": "fine", "expires_at": SOON, "csrf": token(anonymous)}
    assert anonymous.post(f"/holds/{hold}/waive", data=form).status_code == 401
    assert anonymous.post(f"/candidates/{seeded.typed}/rerun", data=form).status_code == 401
    reviewer = signed_in(web_client)
    forged = {**form, "csrf": "not-the-token"}
    assert reviewer.post(f"/holds/{hold}/waive", data=forged).status_code == 403
    missing = {k: v for k, v in form.items() if k != "csrf"}
    assert reviewer.post(f"/holds/{hold}/waive", data=missing).status_code == 403
    # Another browser's token does not fit this session either.
    assert reviewer.post(f"/holds/{hold}/waive", data=form).status_code == 403


def test_a_waiver_needs_a_reason_and_signs_a_new_dossier_version(
    web_client: TestClient, fresh_typed: Fresh
) -> None:
    # Its own candidate: waiving the session's seeded hold would change what other tests read.
    reviewer = signed_in(web_client)
    hold = open_hold_of(reviewer, fresh_typed.candidate)
    csrf = token(reviewer, "/holds")
    no_reason = reviewer.post(
        f"/holds/{hold}/waive", data={"reason": " ", "expires_at": SOON, "csrf": csrf}
    )
    assert no_reason.status_code == 422
    done = reviewer.post(
        f"/holds/{hold}/waive",
        data={
            "reason": "lineage repair ships next week",
            "expires_at": SOON,
            "csrf": csrf,
        },
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
    page = reviewer.get(done.headers["location"]).text
    assert "Version 2" in page and "Version 1" in page
    assert page.count("✔ verified") == 2
    # The reviewer is named as the person behind the key, not by the key's id.
    assert 'waived by <span class="person">rita</span>' in page
    assert "lineage repair ships next week" in page
    assert str(key_for(web_client, "rita").id) not in page
    events = reviewer.get("/events?kind=dossier.issued").text
    assert "dossier.issued" in events


def test_a_block_cannot_be_waived_from_the_queue(web_client: TestClient, seeded: Seeded) -> None:
    reviewer = signed_in(web_client)
    hold = open_hold_of(reviewer, seeded.baseline)
    answer = reviewer.post(
        f"/holds/{hold}/waive",
        data={
            "reason": "ship it",
            "expires_at": SOON,
            "csrf": token(reviewer, "/holds"),
        },
    )
    assert answer.status_code in (409, 422) and "cannot lift a block" in answer.text


def test_sign_out_ends_the_session(web_client: TestClient) -> None:
    reviewer = signed_in(web_client)
    assert "Sign out" in reviewer.get("/").text
    out = reviewer.post("/signout", data={"csrf": token(reviewer, "/")}, follow_redirects=False)
    assert out.status_code == 303
    reviewer.cookies.clear()
    assert "Sign in" in reviewer.get("/").text


def test_sign_in_takes_an_api_key_and_refuses_anything_else(web_client: TestClient) -> None:
    browser = TestClient(web_client.app)
    answer = browser.post(
        "/signin",
        data={"credential": "rita", "csrf": token(browser), "next": "/holds"},
        follow_redirects=False,
    )
    assert answer.status_code != 303
    assert "Sign out" in signed_in(web_client, "rita").get("/").text
