"""One version is one release, and changed code reopens the gate: the code artifact's digest is
compared like a manifest component. Real PostgreSQL, Redis, the API on a real port and a tenant
worker process running the code in its sandbox."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from service.packing import pack
from tests.api.test_artifacts import PLAN, Team, manifest, team, write_code
from tests.api.test_bad_input import refused
from tests.support.service import wait_decided

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
