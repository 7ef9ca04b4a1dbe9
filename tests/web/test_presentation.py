"""What a reviewer reads on the pages: the holds page gives the gate's word and its filter, times
in UTC with the zone named, counts that agree with the catalogue, a counterfactual never called
valid above an untested control, the Submit form only for a submitter, and the people and keys."""

from __future__ import annotations

import re

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session

from service.core.faults.plan import parse_plan
from service.db.injector import _faults_and_steps
from service.db.models import KeyRole
from service.keys import KeyRing
from service.settings import Settings
from service.web.present import describe
from tests.web.conftest import Seeded, signed_in
from tests.web.seed import report_of, seed_candidate


def card_of(html: str, candidate: str) -> str:
    start = html.rindex("<article", 0, html.index(f'/candidates/{candidate}"'))
    return html[start : html.index("</article>", start)]


def test_an_open_hold_on_a_blocked_candidate_reads_block_beside_its_open_status(
    web_client: TestClient, seeded: Seeded
) -> None:
    card = card_of(web_client.get("/holds").text, seeded.baseline)
    gate, _, status = card.partition('class="hold-status"')
    assert 'class="pill pill-block"' in gate and 'class="pill pill-open"' in status


def test_the_holds_page_names_its_filter_and_offers_all(
    web_client: TestClient, seeded: Seeded
) -> None:
    page = web_client.get("/holds").text
    assert re.search(r'class="active-filter">open<', page)
    assert '<a href="?status=all">all</a>' in page
    every = web_client.get("/holds", params={"status": "all"}).text
    assert re.search(r'class="active-filter">all<', every)
    assert seeded.baseline in every
    assert "Until (UTC)" in page


def test_a_credential_line_counts_faults_as_the_catalogue_does_and_gives_its_expiry_in_utc() -> (
    None
):
    faults, steps = _faults_and_steps(parse_plan({}))
    line = describe(
        "credential.minted",
        {
            "modes": [*faults, *steps],
            "faults": len(faults),
            "steps": len(steps),
            "max_effects": 400,
            "namespace": "ns",
            "expires": 1796192307.947013,
        },
    )
    assert f"for {len(faults)} faults (and 1 composition step)" in line
    assert line.endswith("until 2026-12-02 06:18:27 UTC")
    assert "1796192307" not in line


def test_a_valid_pair_beside_an_untested_control_is_never_worded_valid(
    web_client: TestClient, web_engine: sa.Engine, web_settings: Settings, seeded: Seeded
) -> None:
    report = report_of("typed-repair")
    fault = next(f for f in report["faults"] if f["counterfactual"]["status"] == "valid")
    report["reasons"].append(
        {
            "code": "counterfactual_untested",
            "message": f"{fault['id']}: no counterfactual pair for refresh_context",
            "fault": fault["id"],
            "severity": "hold",
        }
    )
    report["decision"] = "hold"
    assert web_settings.keys_dir is not None
    with Session(web_engine, expire_on_commit=False) as session:
        recorded = seed_candidate(
            session,
            system="partly-untested",
            version="1",
            example_name="typed-repair",
            report=report,
            signer=KeyRing(web_settings.keys_dir).load_or_create(),
        )
        session.commit()
    page = web_client.get(f"/candidates/{recorded.candidate.id}").text
    article = page[page.index(f'id="fault-{fault["id"]}"') :]
    article = article[: article.index("</article>")]
    assert 'class="cf cf-partly_untested">partly untested<' in article
    assert "cf-valid" not in article
    assert "1 partly untested" in page


def test_a_reviewer_without_the_submitter_role_gets_no_submit_form(
    web_client: TestClient,
) -> None:
    reviewer = signed_in(web_client, "rene", "/", roles=(KeyRole.REVIEWER,))
    page = reviewer.get("/submit").text
    assert "This key has no submitter role" in page
    assert '<form method="post" action="/submit"' not in page
    assert 'href="/submit"' not in page.split("</nav>")[0]
    assert '<form method="post" action="/submit"' in web_client.get("/submit").text


def test_an_admin_sees_the_people_and_their_keys_and_no_one_else_does(
    web_client: TestClient,
) -> None:
    admin = signed_in(web_client, "ada", "/", roles=(KeyRole.ADMIN,))
    page = admin.get("/keys")
    assert page.status_code == 200
    assert 'href="/keys"' in page.text.split("</nav>")[0]
    for person in ("ada", "rita"):
        assert f'<span class="person">{person}</span>' in page.text
    assert "ag_" not in page.text
    assert web_client.get("/keys").status_code == 403
