""" "Changed since last allow" says the same on the systems page, the dossier page and in
`GET /v1/gate`: every component whose hash differs from the last allowed *other* candidate's,
triggers or not (`triggers.components_changed`), while `triggers.changed` names only triggers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session

from service.keys import KeyRing
from service.settings import Settings
from tests.web.conftest import Seeded, key_for
from tests.web.seed import example, seed_candidate

SYSTEM = "since-allow"


def test_a_changed_control_is_named_alike_by_the_pages_and_the_gate(
    web_client: TestClient, web_engine: sa.Engine, web_settings: Settings, seeded: Seeded
) -> None:
    assert web_settings.keys_dir is not None
    signer = KeyRing(web_settings.keys_dir).load_or_create()
    changed = example("typed-repair")
    changed["controls"]["evidence_repair"] = False
    now = datetime.now(UTC)
    with Session(web_engine, expire_on_commit=False) as session:
        seed_candidate(
            session, system=SYSTEM, version="1.0", example_name="typed-repair", signer=signer
        )
        later = seed_candidate(
            session,
            system=SYSTEM,
            version="1.1",
            example_name="typed-repair",
            manifest_document=changed,
            signer=signer,
            created_at=now + timedelta(seconds=1),
        )
        session.commit()

    answer = web_client.get(f"/v1/gate/{SYSTEM}", headers=key_for(web_client, "rita").headers)
    assert answer.status_code == 200, answer.text
    triggers = answer.json()["triggers"]
    assert answer.json()["version"] == "1.1" and answer.json()["decision"] == "allow"
    # Compared with the other allowed candidate, never with itself.
    assert triggers["compared_with"]["version"] == "1.0"
    assert triggers["components_changed"] == ["controls"]
    assert triggers["changed"] == []  # controls is not a trigger of this system

    systems = web_client.get("/", params={"q": SYSTEM}).text
    cell = systems[systems.index('<td class="changed">') :]
    cell = cell[: cell.index("</td>")]
    assert ">controls</span>" in cell and "against 1.0" in cell
    assert "tag-trigger" not in cell

    dossier = web_client.get(f"/candidates/{later.candidate.id}/dossier").text
    section = dossier[dossier.index('class="card changed-since"') :]
    section = section[: section.index("</section>")]
    assert "Changed since the last allow: 1.0" in section
    assert "<th>controls</th><td>no</td>" in section
    assert section.count("</td></tr>") == len(triggers["components_changed"])
