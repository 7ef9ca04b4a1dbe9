"""Block reasons lead on every page and in every API answer: a blocked candidate whose stored
reasons begin with a hold-level reason (as a dossier signed before the one order would) is headed
by its block reason on the holds, dossier, candidate, candidates, system and systems pages, and in
`GET /v1/gate`, `GET /v1/candidates/{id}` and its dossiers."""

from __future__ import annotations

import re

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from service.db.models import Assay, Hold
from service.keys import KeyRing
from service.settings import Settings
from tests.web.conftest import Seeded, key_for
from tests.web.seed import seed_candidate

SYSTEM = "reason-order"
HOLD_FIRST = {
    "code": "counterfactual_untested",
    "message": "a hold-level reason stored first",
    "fault": None,
    "severity": "hold",
}


def _hold_first(reasons: list[dict[str, object]]) -> list[dict[str, object]]:
    return [HOLD_FIRST, *reasons]


def first_severity(html: str) -> str:
    found = re.search(r'<li class="sev-(\w+)"', html)
    assert found is not None, html[:400]
    return found.group(1)


def row_of(html: str, link: str) -> str:
    start = html.rindex("<tr", 0, html.index(link))
    return html[start : html.index("</tr>", start)]


def test_every_page_and_answer_lists_the_block_reason_first(
    web_client: TestClient, web_engine: sa.Engine, web_settings: Settings, seeded: Seeded
) -> None:
    assert web_settings.keys_dir is not None
    signer = KeyRing(web_settings.keys_dir).load_or_create()
    with Session(web_engine, expire_on_commit=False) as session:
        recorded = seed_candidate(
            session, system=SYSTEM, version="1.0", example_name="baseline", signer=signer
        )
        cid = recorded.candidate.id
        # Rows written before the one order: a hold-level reason heads the assay's and the
        # hold's stored lists (a signed dossier is never rewritten; it signs block-first).
        for model in (Assay, Hold):
            for row in session.exec(select(model).where(model.candidate_id == cid)).all():
                row.reasons = _hold_first(list(row.reasons or []))
                session.add(row)
        session.commit()
    candidate = str(cid)

    holds = web_client.get("/holds").text
    card = holds[holds.index(f'/candidates/{candidate}"') :]
    pages = {
        "holds": card[: card.index("</article>")],
        "dossier": web_client.get(f"/candidates/{candidate}/dossier").text,
        "candidate": web_client.get(f"/candidates/{candidate}").text,
        "candidates": row_of(web_client.get("/candidates").text, f"/candidates/{candidate}"),
        "system": row_of(web_client.get(f"/systems/{SYSTEM}").text, f"/candidates/{candidate}"),
        "systems": row_of(web_client.get("/", params={"q": SYSTEM}).text, f'/systems/{SYSTEM}"'),
    }
    for where, html in pages.items():
        assert first_severity(html) == "block", where
    # Reordered, not dropped: the candidate page's full list still carries the hold reason.
    assert "a hold-level reason stored first" in pages["candidate"]

    headers = key_for(web_client, "rita").headers
    gate = web_client.get(f"/v1/gate/{SYSTEM}", headers=headers).json()
    assert gate["decision"] == "block"
    assert gate["reasons"][0]["severity"] == "block"
    mine = web_client.get(f"/v1/candidates/{candidate}", headers=headers).json()
    assert mine["reasons"][0]["severity"] == "block"
    assert mine["gate"]["reasons"][0]["severity"] == "block"
    dossiers = web_client.get(f"/v1/candidates/{candidate}/dossiers", headers=headers)
    assert dossiers.status_code == 200, dossiers.text
    for d in dossiers.json()["items"]:
        assert d["reasons"][0]["severity"] == "block"
