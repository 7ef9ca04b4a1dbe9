"""For every answer the deploy gate gives, every page shows the same word: the candidate page,
its dossier page, its system's page, the candidates list and the systems page say what
`GET /v1/gate` says —
allow, hold, block or reopened — and what it rests on (a waiver, a rejection, a lapsed review, a
production change, a pending assay)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from service.app import changes, reviews
from service.core.signing.dossier import Signer
from service.core.system.manifest import parse_manifest
from service.db.candidate import Recorded
from service.db.models import Hold, HoldStatus, System
from service.keys import KeyRing
from service.settings import Settings
from tests.web.conftest import Seeded, key_for
from tests.web.seed import example, seed_candidate


def _signer(settings: Settings) -> Signer:
    assert settings.keys_dir is not None
    return KeyRing(settings.keys_dir).load_or_create()


def _review(
    session: Session,
    settings: Settings,
    recorded: Recorded,
    action: str,
    expires_at: datetime | None,
) -> None:
    hold = session.exec(
        select(Hold).where(
            Hold.candidate_id == recorded.candidate.id, Hold.status == HoldStatus.OPEN.value
        )
    ).one()
    done = reviews.record(
        session,
        _signer(settings),
        reviews.ReviewHold(
            hold_id=hold.id,
            action=reviews.Action(action),
            reviewer="someone-else",
            reason=f"{action} in a test",
            expires_at=expires_at,
        ),
        now=expires_at - timedelta(days=1) if expires_at else None,
    )
    assert done is not None


def retry_changed() -> dict[str, Any]:
    manifest = example("typed-repair")
    manifest["retry"]["max_attempts"] = 5
    return manifest


# state -> (what to seed, the word, the few words on what it rests on)
STATES: dict[str, tuple[str, str, str]] = {
    "allow": ("allow", "allow", ""),
    "hold": ("hold", "hold", ""),
    "block": ("block", "block", ""),
    "pending": ("pending", "hold", "assay running"),
    "waived": ("waived", "allow", "waived until"),
    "rejected": ("rejected", "block", "rejected"),
    "expired": ("expired", "hold", "review expired"),
    "config": ("config", "reopened", "production config changed"),
    "trigger": ("trigger", "reopened", "triggers changed"),
}


def seed_state(session: Session, settings: Settings, state: str, system: str) -> Recorded:
    signer = _signer(settings)
    now = datetime.now(UTC)

    def decided(name: str, version: str = "1.0", created_at: datetime | None = None) -> Recorded:
        return seed_candidate(
            session,
            system=system,
            version=version,
            example_name=name,
            signer=signer,
            created_at=created_at,
        )

    if state == "allow":
        return decided("typed-repair")
    if state == "hold":
        return decided("typed")
    if state == "block":
        return decided("baseline")
    if state == "pending":
        return seed_candidate(session, system=system, version="1.0", decided=False)
    if state in ("waived", "rejected", "expired"):
        held = decided("typed")
        action = "reject" if state == "rejected" else "waive"
        until = now - timedelta(seconds=1) if state == "expired" else now + timedelta(days=3)
        _review(session, settings, held, action, until)
        return held
    if state == "config":
        decided("typed-repair")
        row = session.exec(select(System).where(System.name == system)).one()
        retry = parse_manifest(retry_changed()).component_hashes()["retry"]
        changes.report_config_change(
            session, signer, row, component="retry", sha256=retry, reported_by=None, note=None
        )
        # A later candidate that still carries the old retry configuration, and allows.
        return decided("typed-repair", "1.1", created_at=now + timedelta(seconds=1))
    if state == "trigger":
        decided("typed-repair")
        recorded = seed_candidate(
            session,
            system=system,
            version="1.1",
            manifest_document=retry_changed(),
            decided=False,
            created_at=now + timedelta(seconds=1),
        )
        return recorded
    raise AssertionError(state)


def word_in(html: str, where: str) -> str:
    found = re.search(r'class="pill pill-(\w+)"', html[html.index(where) :])
    assert found, where
    return found.group(1)


def row_of(html: str, link: str) -> str:
    start = html.rindex("<tr", 0, html.index(link))
    return html[start : html.index("</tr>", start)]


@pytest.mark.parametrize("state", sorted(STATES))
def test_every_page_shows_the_word_the_gate_answers(
    state: str,
    web_client: TestClient,
    web_engine: sa.Engine,
    web_settings: Settings,
    seeded: Seeded,
) -> None:
    system = f"gate-word-{state}"
    with Session(web_engine, expire_on_commit=False) as session:
        recorded = seed_state(session, web_settings, state, system)
        session.commit()
    candidate = str(recorded.candidate.id)
    _, word, note = STATES[state]

    api = web_client.get(
        f"/v1/gate/{system}",
        params={"version": recorded.candidate.version},
        headers=key_for(web_client, "rita").headers,
    )
    assert api.status_code == 200, api.text
    assert api.json()["decision"] == word
    mine = web_client.get(
        f"/v1/candidates/{candidate}", headers=key_for(web_client, "rita").headers
    ).json()["gate"]
    assert mine["decision"] == word and mine["basis"] == api.json()["basis"]

    page = web_client.get(f"/candidates/{candidate}").text
    assert word_in(page, "<h1>") == word
    if state not in ("pending", "trigger"):  # a running assay has no decision card yet
        assert word_in(page, 'id="decision"') == word
    assert word_in(web_client.get(f"/candidates/{candidate}/dossier").text, "<h1>") == word
    shown = {
        "systems": row_of(web_client.get("/", params={"q": system}).text, f'/systems/{system}"'),
        "system": row_of(web_client.get(f"/systems/{system}").text, f"/candidates/{candidate}"),
        "candidates": row_of(web_client.get("/candidates").text, f"/candidates/{candidate}"),
    }
    for where, row in shown.items():
        assert word_in(row, '<td class="gate">') == word, where
        assert note in row, (where, row)
    if note:
        assert note in page
