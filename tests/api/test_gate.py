"""What the gate says now, said the same way everywhere: `GET /v1/gate`, the candidate's `gate`
field and the CLI agree for every state (allow, hold, block, reopened, waived), and a reported
production change stays open until a candidate carrying that configuration passes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from service.core.system.manifest import parse_manifest
from tests.api.test_dossiers import BLOCKING, REFUSED, cli
from tests.support.api import decided, dossier, predicate, system_name
from tests.support.keys import KeyBook
from tests.support.service import default_example, example

pytestmark = pytest.mark.integration


def retry_changed() -> dict[str, Any]:
    manifest = example("typed")
    manifest["retry"]["max_attempts"] = 5
    return manifest


def component_hash(manifest: dict[str, Any], component: str) -> str:
    return parse_manifest(manifest).component_hashes()[component]


def gate_of(client: httpx.Client, system: str, version: str) -> dict[str, Any]:
    response = client.get(f"/v1/gate/{system}", params={"version": version})
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def candidate_gate(client: httpx.Client, candidate_id: str) -> dict[str, Any]:
    found: dict[str, Any] = client.get(f"/v1/candidates/{candidate_id}").json()["gate"]
    return found


def test_a_candidate_with_the_old_retry_config_does_not_lift_a_reported_retry_change(
    client: httpx.Client, keys: KeyBook
) -> None:
    system = system_name()
    live = decided(client, example("typed"), system=system, version="1.0")
    assert gate_of(client, system, "1.0")["decision"] == "allow"
    new_retry = component_hash(retry_changed(), "retry")
    reported = client.post(
        f"/v1/systems/{system}/config-changes",
        json={"component": "retry", "sha256": new_retry, "note": "ops raised max_attempts"},
        headers=keys.headers("ops"),
    )
    assert reported.status_code == 201, reported.text
    assert gate_of(client, system, "1.0")["decision"] == "reopened"

    # A new candidate that still carries the old retry config, whose assay allows.
    old = decided(client, example("typed"), system=system, version="1.1")
    assert old["decision"] == "allow"  # the assay's own answer
    gate = gate_of(client, system, "1.1")
    assert gate["decision"] == "reopened" and gate["basis"] == "config_changed"
    assert [r["code"] for r in gate["reasons"]] == ["config_changed"]
    assert new_retry[:12] in gate["reasons"][0]["message"]
    # Compared with the last allowed dossier of another candidate, never with itself.
    compared = gate["triggers"]["compared_with"]
    assert compared is None or compared["candidate_id"] != old["id"]
    assert candidate_gate(client, old["id"])["decision"] == "reopened"
    signed = dossier(client, old["id"])
    assert (signed["version"], signed["decision"]) == (2, "reopened")
    assert predicate(signed)["change"] == "reopened: production retry changed"
    key = {"ASSAYGATE_API_KEY": keys.key("ci").secret}
    answered = cli("gate", system, "--version", "1.1", "--url", str(client.base_url), env=key)
    assert answered.returncode == 2, answered.stdout + answered.stderr

    # The candidate that carries the reported configuration passes: the change is closed.
    carried = decided(client, retry_changed(), system=system, version="1.2")
    assert gate_of(client, system, "1.2")["decision"] == "allow"
    assert candidate_gate(client, carried["id"])["decision"] == "allow"
    # The candidates assayed with the old configuration stay reopened.
    assert gate_of(client, system, "1.1")["decision"] == "reopened"
    assert gate_of(client, system, "1.0")["decision"] == "reopened"
    assert candidate_gate(client, live["id"])["basis"] == "config_changed"


def test_a_change_reported_before_any_candidate_carries_it_holds_every_other_candidate(
    client: httpx.Client, keys: KeyBook
) -> None:
    system = system_name()
    decided(client, example("typed"), system=system, version="1")
    tools = "ef" * 32  # a tools configuration no candidate has
    client.post(
        f"/v1/systems/{system}/config-changes",
        json={"component": "tools", "sha256": tools},
        headers=keys.headers("ops"),
    )
    for version in ("2", "3"):
        done = decided(client, example("typed"), system=system, version=version)
        assert candidate_gate(client, done["id"])["decision"] == "reopened"
        assert gate_of(client, system, version)["decision"] == "reopened"


def test_every_answer_of_the_gate_is_the_candidates_gate_field(
    client: httpx.Client, keys: KeyBook
) -> None:
    system = system_name()
    held = decided(client, example("refuse-all"), system=system, version="h", plan=REFUSED)
    manifest, plan = BLOCKING["stopped"]
    blocked = decided(client, manifest, system=system, version="b", plan=plan)
    for candidate, version in ((held, "h"), (blocked, "b")):
        gate = gate_of(client, system, version)
        mine = candidate_gate(client, candidate["id"])
        assert (mine["decision"], mine["basis"]) == (gate["decision"], gate["basis"])
        assert mine["dossier_version"] == gate["dossier"]["version"]
    assert gate_of(client, system, "h")["decision"] == "hold"
    assert gate_of(client, system, "b")["decision"] == "block"

    later = datetime.now(UTC) + timedelta(days=2)
    hold = gate_of(client, system, "h")["hold_id"]
    waived = client.post(
        f"/v1/holds/{hold}/waive",
        json={"reason": "refusals are fine for the pilot", "expires_at": later.isoformat()},
        headers=keys.headers("rita"),
    )
    assert waived.status_code == 200, waived.text
    gate = gate_of(client, system, "h")
    mine = candidate_gate(client, held["id"])
    assert (gate["decision"], gate["basis"]) == ("allow", "waived")
    assert (mine["decision"], mine["basis"]) == ("allow", "waived")
    assert gate["until"] is not None and mine["until"] == gate["until"]
    assert client.get(f"/v1/candidates/{held['id']}").json()["decision"] == "hold"
    listed = client.get("/v1/candidates", params={"system": system}).json()["items"]
    assert {c["version"]: c["gate"]["decision"] for c in listed} == {"h": "allow", "b": "block"}
    latest = next(s for s in client.get("/v1/systems").json()["items"] if s["name"] == system)
    assert latest["latest"]["gate"]["decision"] == gate_of(client, system, "b")["decision"]


def test_a_reported_change_that_a_passing_candidate_carries_holds_back_no_later_release(
    client: httpx.Client, keys: KeyBook
) -> None:
    system = system_name()
    decided(client, example("typed"), system=system, version="1")
    # Production reports the retry configuration candidate 1 was assayed with: nothing to reopen.
    same = component_hash(example("typed"), "retry")
    answer = client.post(
        f"/v1/systems/{system}/config-changes",
        json={"component": "retry", "sha256": same},
        headers=keys.headers("ops"),
    ).json()
    assert answer["reopened"] == []
    assert gate_of(client, system, "1")["decision"] == "allow"
    # The next release changes retry and passes its own assay: the gate allows it.
    decided(client, retry_changed(), system=system, version="2")
    assert gate_of(client, system, "2")["decision"] == "allow"


def test_the_gate_asked_with_the_system_as_a_query_parameter_answers_exactly_as_by_path(
    client: httpx.Client, anonymous: httpx.Client, keys: KeyBook
) -> None:
    system = system_name()
    decided(client, example("typed"), system=system, version="1")
    nobody_ships = "sha256:" + "cd" * 32
    for params in ({}, {"version": "1"}, {"artifact": nobody_ships}, {"version": "nope"}):
        by_path = client.get(f"/v1/gate/{system}", params=params)
        by_query = client.get("/v1/gate", params={"system": system, **params})
        assert by_query.status_code == by_path.status_code, by_query.text
        assert by_query.json() == by_path.json()
    assert client.get("/v1/gate", params={"system": system}).json()["decision"] == "allow"
    # The same keys: none is 401, another tenant's key finds no such system.
    for shape in (f"/v1/gate/{system}", f"/v1/gate?system={system}"):
        assert anonymous.get(shape).status_code == 401
        other = client.get(shape, headers=keys.headers("stranger", tenant="elsewhere"))
        assert other.status_code == 404, other.text
    # By the artifact alone, the system is the one that ships it: here none does.
    missing = client.get("/v1/gate", params={"artifact": nobody_ships})
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "artifact"
    neither = client.get("/v1/gate")
    assert neither.status_code == 422 and neither.json()["error"]["field"] == "system"
    empty = client.get("/v1/gate", params={"system": ""})
    assert empty.status_code == 422 and empty.json()["error"]["field"] == "system"


def test_under_the_default_floors_a_careful_candidate_is_allowed_at_16_trials_and_held_at_6(
    client: httpx.Client,
) -> None:
    # The committed example states no `floor_on`: floors compare the Wilson lower bound, which a
    # perfect record clears at 16 trials a fault. At 6 the same record is missing evidence: a
    # hold naming the 16, never a block, and never a refusal (the submission stated no floor).
    # Each is its release's first attempt (two systems): a re-run of one release reads its floors
    # on the release's record instead (tests/worker/test_attempts.py).
    system = system_name("floors")
    manifest = default_example("typed-repair")
    plan = {"seed": 4, "modes": ["subject_swap", "timeout_after_commit"]}
    allowed = decided(client, manifest, system=system, version="16", plan={**plan, "trials": 16})
    assert allowed["decision"] == "allow"
    runs = predicate(dossier(client, allowed["id"]))["runs"]
    floors = [f for run in runs for f in run["floors"]]
    assert floors and all(f["on"] == "lower_bound" and f["met"] for f in floors)
    system = system_name("floors-smoke")
    held = decided(client, manifest, system=system, version="6", plan={**plan, "trials": 6})
    gate = gate_of(client, system, "6")
    assert (held["decision"], gate["decision"]) == ("hold", "hold")
    assert {r["code"] for r in gate["reasons"]} == {
        "floor:recovered",
        "floor:verified",
        "floor:useful_service",
    }
    assert all("a perfect record needs >= 16 trials" in r["message"] for r in gate["reasons"])
