"""One version is one release, and changed code reopens the gate: the code artifact's digest is
compared like a manifest component. Real PostgreSQL, Redis, the API on a real port and a tenant
worker process running the code in its sandbox."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.db.models import KeyRole
from service.packing import pack
from tests.api.test_artifacts import PLAN, Team, manifest, team, write_code
from tests.api.test_bad_input import refused
from tests.support.flipping import PLAN as DRAW
from tests.support.flipping import agent_at
from tests.support.flipping import manifest as remote
from tests.support.keys import KeyBook
from tests.support.service import free_port, wait_decided

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

__all__ = ["team"]  # the module's tenant and its worker, shared with test_artifacts


def stored(team: Team, folder: Path, note: str) -> str:
    """The digest of a careful agent's code, made distinct by a note in a file of its own."""
    write_code(folder)
    (folder / "NOTE").write_text(note)
    answer = team.upload(pack(folder).data)
    assert answer.status_code in (200, 201), answer.text
    digest: str = answer.json()["digest"]
    return digest


def submit(team: Team, system: str, version: str, code: str) -> Any:
    body = {"system": system, "version": version, "source_revision": "abc", "manifest": manifest()}
    body["plan"] = PLAN
    return team.client.post("/v1/candidates", json={**body, "code": code})


def test_a_version_is_one_release_other_code_under_it_is_a_conflict_naming_the_first(
    team: Team, tmp_path: Path
) -> None:
    system = f"release-{uuid.uuid4().hex[:6]}"
    first_code = stored(team, tmp_path / "a", "first")
    other_code = stored(team, tmp_path / "b", "second")
    first = submit(team, system, "1", first_code)
    assert first.status_code == 202, first.text
    # The same release again is a new candidate of that version (a re-run by hand).
    again = submit(team, system, "1", first_code)
    assert again.status_code == 202 and again.json()["id"] != first.json()["id"]
    conflict = submit(team, system, "1", other_code)
    error = refused(conflict, 409, "version")
    assert error["code"] == "version_taken"
    assert first.json()["id"] in error["message"] and "changed code" in error["message"]
    for shown in (first, again):
        wait_decided(team.client, shown.json()["id"])


def test_changed_code_reopens_the_gate_until_a_candidate_shipping_it_is_allowed(
    team: Team, tmp_path: Path
) -> None:
    system = f"deploy-{uuid.uuid4().hex[:6]}"
    running = stored(team, tmp_path / "a", "running")
    deployed = stored(team, tmp_path / "b", "deployed by hand")
    live = submit(team, system, "1", running)
    assert live.status_code == 202, live.text
    done = wait_decided(team.client, live.json()["id"])
    assert done["decision"] == "allow", done
    assert team.client.get(f"/v1/gate/{system}").json()["decision"] == "allow"

    # Production runs other code than the gate assayed: the standing dossier reopens.
    reported = team.client.post(
        f"/v1/systems/{system}/config-changes",
        json={"component": "code", "sha256": deployed.removeprefix("sha256:")},
    )
    assert reported.status_code == 201, reported.text
    change = reported.json()
    assert change["trigger"] is True
    assert [d["candidate_id"] for d in change["reopened"]] == [live.json()["id"]]
    gate = team.client.get(f"/v1/gate/{system}").json()
    assert gate["decision"] == "reopened" and gate["reasons"][0]["code"] == "config_changed"

    # Before its own assay decides, a candidate with other code than the last allowed is
    # reopened on `code`; once a candidate shipping the deployed code is allowed, the gate is.
    shipping = submit(team, system, "2", deployed)
    assert shipping.status_code == 202, shipping.text
    before = team.client.get(f"/v1/gate/{system}", params={"version": "2"}).json()
    if before["decision"] == "reopened" and before["basis"] == "trigger_changed":
        assert "code" in before["triggers"]["changed"]
    decided = wait_decided(team.client, shipping.json()["id"])
    assert decided["decision"] == "allow", decided
    gate = team.client.get(f"/v1/gate/{system}").json()
    assert gate["decision"] == "allow" and gate["candidate_id"] == shipping.json()["id"]
    assert gate["triggers"]["hashes"]["code"] == deployed.removeprefix("sha256:")
    assert "code" in gate["triggers"]["changed"]


# ------------------------------------------------------------------- attempts of one release
#
# The team's own HTTP agent answers at one URL: the manifest, and so the release, is the same from
# one attempt to the next whatever build answers there, which is how a submitter who retries
# meets the gate (a careful-looking attempt after a broken one).


def attempt(
    client: httpx.Client,
    system: str,
    version: str,
    port: int,
    *,
    seed: int = 1,
    manifest: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body = {
        "system": system,
        "version": version,
        "source_revision": "abc",
        "manifest": manifest or remote(port),
        "plan": {**DRAW, "seed": seed},
    }
    sent = client.post("/v1/candidates", json=body)
    assert sent.status_code == 202, sent.text
    return wait_decided(client, sent.json()["id"])


def rerun(client: httpx.Client, candidate_id: str, seed: int) -> dict[str, Any]:
    sent = client.post(
        f"/v1/candidates/{candidate_id}/rerun", json={"plan": {**DRAW, "seed": seed}}
    )
    assert sent.status_code == 202, sent.text
    return wait_decided(client, candidate_id)


def own(decided: dict[str, Any]) -> list[str]:
    """The block reasons an attempt's own evidence gave (not the release's carried block)."""
    return [
        r["code"]
        for r in decided["reasons"]
        if r["severity"] == "block" and r["code"] != "release_blocked"
    ]


def signed(client: httpx.Client, candidate_id: str) -> dict[str, Any]:
    doc = client.get(f"/v1/candidates/{candidate_id}/dossier").json()
    found: dict[str, Any] = json.loads(base64.b64decode(doc["envelope"]["payload"]))["predicate"]
    return found


def blocked(client: httpx.Client, system: str, port: int) -> dict[str, Any]:
    """A first attempt of the release, against the broken build: blocked on its own evidence."""
    with agent_at(port, broken=True):
        first = attempt(client, system, "1", port)
    assert first["decision"] == "block" and "duplicate_effect" in own(first), first
    return first


def carried_from(decided: dict[str, Any], first: dict[str, Any]) -> None:
    """The attempt is blocked by the release's standing block, which names the first attempt."""
    assert decided["decision"] == "block", decided
    head = decided["reasons"][0]
    assert head["code"] == "release_blocked" and head["severity"] == "block", head
    assert first["id"] in head["message"] and first["assay_id"] in head["message"]
    assert f"version {first['version']}" in head["message"]
    assert "duplicate_effect" in head["message"]


def test_a_blocked_release_stays_blocked_across_a_rerun_and_a_new_candidate_with_its_digests(
    client: httpx.Client, keys: KeyBook
) -> None:
    system, port = f"retry-{uuid.uuid4().hex[:6]}", free_port()
    first = blocked(client, system, port)
    with agent_at(port):  # the careful build answers at the same URL from now on
        # The same release, another draw: its own evidence is clean, the block stands.
        again = rerun(client, first["id"], seed=2)
        assert own(again) == [] and again["assay_id"] != first["assay_id"]
        carried_from(again, first)
        listed = signed(client, first["id"])["attempts"]
        assert [(a["assay_id"], a["decision"]) for a in listed] == [
            (first["assay_id"], "block"),
            (again["assay_id"], "block"),
        ]
        assert "duplicate_effect" in listed[0]["reasons"]
        assert listed[1]["reasons"] == ["release_blocked"]
        assert all(a["candidate"] == {"id": first["id"], "version": "1"} for a in listed)
        assert all(a["trials"] > 0 and a["finished_at"] for a in listed)

        # A new candidate with the same digests is a third attempt of the same release.
        newer = attempt(client, system, "2", port, seed=3)
    assert own(newer) == []
    carried_from(newer, first)
    assert [a["candidate"]["id"] for a in signed(client, newer["id"])["attempts"]] == [
        first["id"],
        first["id"],
        newer["id"],
    ]
    gate = client.get(f"/v1/gate/{system}").json()
    assert gate["decision"] == "block" and gate["candidate_id"] == newer["id"]
    assert gate["reasons"][0]["code"] == "release_blocked"

    # A reviewer cannot waive it: the carried block is a block.
    reviewer = keys.headers("release-reviewer", roles=[KeyRole.REVIEWER])
    waived = client.post(
        f"/v1/holds/{gate['hold_id']}/waive",
        json={"reason": "the agent is fixed now", "expires_at": "2099-01-01T00:00:00Z"},
        headers=reviewer,
    )
    assert waived.status_code == 409, waived.text
    assert waived.json()["error"]["code"] == "not_waivable"
    assert "release_blocked" in waived.json()["error"]["message"]
    assert client.get(f"/v1/gate/{system}").json()["decision"] == "block"


def test_a_change_of_manifest_or_policy_lifts_the_releases_block(client: httpx.Client) -> None:
    system, port = f"lift-{uuid.uuid4().hex[:6]}", free_port()
    blocked(client, system, port)
    with agent_at(port):
        # Another manifest (a prompt's digest changed): another release.
        changed = remote(port)
        changed["prompt"]["sha"] = "5a2d"
        assert attempt(client, system, "2", port, manifest=changed)["decision"] == "allow"

        # The same manifest stands blocked, until the organisation's policy changes.
        assert attempt(client, system, "3", port)["decision"] == "block"
        raised = client.put("/v1/policy", params={"system": system}, json={"rules": ["fixed"]})
        assert raised.status_code == 200 and raised.json()["changed"] is True, raised.text
        lifted = attempt(client, system, "4", port)
    assert lifted["decision"] == "allow", lifted
    assert "attempts" not in signed(client, lifted["id"])
