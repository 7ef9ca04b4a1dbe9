"""Signed dossiers over HTTP: standard DSSE that securesystemslib verifies with the published key,
versions chained by digest, key rotation, re-runs, holds and waivers, and the CLI's exit codes."""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from service.core.signing.dossier import PublicKey, Signer, seal, verify
from service.settings import Settings
from tests.support.api import SUBJECT_SWAP, decided, dossier, predicate, submit, system_name
from tests.support.keys import KeyBook
from tests.support.service import ROOT, example, wait_decided, wait_for

pytestmark = pytest.mark.integration

# Refuse-all is held on the service floor: contained, but dead.
REFUSED = {"trials": 5, "seed": 4, "modes": ["drop_effect_receipt"]}


def published(client: httpx.Client) -> dict[str, PublicKey]:
    keys = client.get("/v1/keys").json()["keys"]
    return {
        k["keyid"]: PublicKey(k["keyid"], k["keyval"]["public"], k["not_before"], k["not_after"])
        for k in keys
    }


# The CLI acts with the `ci` key of the test client (set by the fixture below).
CLI_ENV: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _cli_api_key(keys: KeyBook) -> None:
    CLI_ENV["ASSAYGATE_API_KEY"] = keys.key("ci").secret


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=ROOT,
        env={**base, **CLI_ENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def with_controls_off(*controls: str, **envelope: Any) -> dict[str, Any]:
    manifest = example("typed")
    for control in controls:
        manifest["controls"][control] = False
    if envelope:
        manifest["envelope"] = envelope
    return manifest


# ------------------------------------------------------------------------- acceptance 1: keys


def test_securesystemslib_verifies_a_dossier_fetched_over_http_with_the_published_key(
    client: httpx.Client,
) -> None:
    done = decided(client, example("typed"), system=system_name(), version="1")
    doc = dossier(client, done["id"])
    keys = client.get("/v1/keys").json()["keys"]
    key = next(k for k in keys if k["keyid"] == doc["keyid"])
    sslib_key = SSlibKey.from_dict(
        key["keyid"], {k: key[k] for k in ("keytype", "scheme", "keyval")}
    )
    # from_dict consumes the dict it is given.
    Envelope.from_dict(copy.deepcopy(doc["envelope"])).verify([sslib_key], 1)

    ours = verify(doc["envelope"], published(client))
    assert ours.ok, [c.detail for c in ours.checks]
    assert ours.digest == doc["digest"]
    # The stored bytes are served as they were signed.
    payload = client.get(f"/v1/dossiers/{doc['id']}/payload").content
    assert payload == base64.b64decode(doc["envelope"]["payload"])
    assert json.loads(client.get(f"/v1/dossiers/{doc['id']}/envelope").content) == doc["envelope"]
    stmt = json.loads(payload)
    assert stmt["subject"][0]["digest"]["sha256"] == done["manifest_digest"]
    pred = stmt["predicate"]
    assert (pred["dossier_version"], pred["previous"], pred["decision"]) == (1, None, "allow")
    assert pred["candidate"]["system"] == done["system"]
    run = pred["runs"][0]
    # Zero escapes in n trials is not zero risk: each hard invariant carries its 95 % bound.
    for invariant in ("unsafe_escape", "duplicate_effect", "unverifiable_release"):
        assert 0 < run["intervention"]["upper_bounds_95"][invariant] < 1
    assert pred["change_triggers"]["components"] == [
        "code",
        "invariants",
        "policy",
        "retry",
        "tools",
    ]
    assert pred["coverage"]["visited"] and pred["coverage"]["not_visited"]


def test_changing_any_byte_of_payload_or_signature_fails_with_a_reason(
    client: httpx.Client,
) -> None:
    done = decided(client, example("typed"), system=system_name(), version="1")
    envelope = dossier(client, done["id"])["envelope"]
    keys = published(client)
    payload = bytearray(base64.b64decode(envelope["payload"]))
    payload[len(payload) // 2] ^= 1
    tampered = {**envelope, "payload": base64.b64encode(bytes(payload)).decode()}
    failed = verify(tampered, keys).failed()
    assert failed is not None and failed.name == "signature"
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[0] ^= 1
    forged = {
        **envelope,
        "signatures": [{**envelope["signatures"][0], "sig": base64.b64encode(sig).decode()}],
    }
    failed = verify(forged, keys).failed()
    assert failed is not None and failed.name == "signature"
    assert "does not match" in failed.detail


def test_after_keys_rotate_old_dossiers_verify_and_new_ones_carry_the_new_key(
    client: httpx.Client, settings: Settings, tmp_path: Path
) -> None:
    system = system_name()
    old = dossier(client, decided(client, example("typed"), system=system, version="1")["id"])
    rotated = cli("keys", "rotate", env={"ASSAYGATE_KEYS_DIR": str(settings.keys_dir)})
    assert rotated.returncode == 0, rotated.stderr
    active = json.loads(rotated.stdout)["active"]
    assert active != old["keyid"]

    new = dossier(client, decided(client, example("typed"), system=system, version="2")["id"])
    assert new["keyid"] == active
    keys = client.get("/v1/keys").json()
    windows = {k["keyid"]: k for k in keys["keys"]}
    assert windows[old["keyid"]]["not_after"] is not None
    assert windows[active]["not_after"] is None
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps(keys))
    for doc in (old, new):
        path = tmp_path / f"{doc['id']}.json"
        path.write_text(json.dumps(doc))
        checked = cli("verify", str(path), "--keys", str(keys_file))
        assert checked.returncode == 0, checked.stdout


def test_rotation_deletes_the_retired_private_key_and_a_stolen_copy_cannot_sign_a_later_statement(
    client: httpx.Client, settings: Settings, tmp_path: Path
) -> None:
    assert settings.keys_dir is not None
    doc = dossier(
        client, decided(client, example("typed"), system=system_name(), version="1")["id"]
    )
    pem = settings.keys_dir / f"{doc['keyid']}.pem"
    stolen = load_pem_private_key(pem.read_bytes(), password=None)
    assert isinstance(stolen, Ed25519PrivateKey)

    rotated = cli("keys", "rotate", env={"ASSAYGATE_KEYS_DIR": str(settings.keys_dir)})
    assert rotated.returncode == 0, rotated.stderr
    assert not pem.exists()
    assert {p.name for p in settings.keys_dir.glob("*.pem")} == {
        f"{json.loads(rotated.stdout)['active']}.pem"
    }
    keys = client.get("/v1/keys").json()
    retired_at = next(k for k in keys["keys"] if k["keyid"] == doc["keyid"])["not_after"]
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps(keys))

    # The thief re-dates the statement to after the retirement and signs it with the copy.
    stmt = json.loads(base64.b64decode(doc["envelope"]["payload"]))
    later = datetime.fromisoformat(retired_at) + timedelta(seconds=1)
    stmt["predicate"]["issued_at"] = later.isoformat(timespec="seconds")
    _, forged = seal(stmt, Signer(stolen))
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(forged))
    checked = cli("verify", str(path), "--keys", str(keys_file))
    assert checked.returncode == 1, checked.stdout
    assert "key_window" in checked.stdout + checked.stderr
    # The dossier it signed while it was active still verifies.
    original = tmp_path / "original.json"
    original.write_text(json.dumps(doc))
    assert cli("verify", str(original), "--keys", str(keys_file)).returncode == 0


# ----------------------------------------------------------------- acceptance 2: triggers


def test_a_changed_retry_config_reopens_the_gate_until_its_own_assay_passes(
    client: httpx.Client,
) -> None:
    system = system_name()
    v1 = decided(client, example("typed"), system=system, version="v1")
    gate = client.get(f"/v1/gate/{system}", params={"version": "v1"}).json()
    assert gate["decision"] == "allow"
    assert gate["dossier"]["digest"] == dossier(client, v1["id"])["digest"]

    changed = example("typed")
    changed["retry"]["max_attempts"] = 5
    # Enough trials that the gate is read while the assay is still running.
    v2 = submit(client, changed, system=system, version="v2", plan={**SUBJECT_SWAP, "trials": 3000})
    pending = client.get(f"/v1/gate/{system}", params={"version": "v2"}).json()
    assert pending["decision"] == "reopened"
    assert pending["triggers"]["changed"] == ["retry"]
    assert pending["reasons"][0]["code"] == "trigger_changed"
    assert pending["dossier"] is None

    wait_decided(client, v2["id"])
    after = client.get(f"/v1/gate/{system}").json()
    assert (after["version"], after["decision"]) == ("v2", "allow")
    triggers = predicate(dossier(client, v2["id"]))["change_triggers"]
    assert triggers["changed"] == ["retry"]
    assert triggers["compared_with"]["dossier_digest"] == gate["dossier"]["digest"]

    v3 = decided(client, changed, system=system, version="v3")
    same = predicate(dossier(client, v3["id"]))["change_triggers"]
    assert same["identical"] is True
    assert same["changed"] == [] and same["catalogue_changed"] is False


def test_a_reported_config_change_reopens_a_live_gate_in_a_new_dossier_version(
    client: httpx.Client, keys: KeyBook
) -> None:
    system = system_name()
    live = decided(client, example("typed"), system=system, version="live")
    first = dossier(client, live["id"])
    response = client.post(
        f"/v1/systems/{system}/config-changes",
        json={"component": "tools", "sha256": "ab" * 32, "note": "hotfix"},
        headers=keys.headers("ops"),
    )
    assert response.status_code == 201, response.text
    change = response.json()
    assert change["trigger"] is True
    assert [d["candidate_id"] for d in change["reopened"]] == [live["id"]]

    gate = client.get(f"/v1/gate/{system}", params={"version": "live"}).json()
    assert gate["decision"] == "reopened"
    assert gate["reasons"][0]["code"] == "config_changed"
    second = dossier(client, live["id"])
    assert second["version"] == 2 and second["previous"] == first["digest"]
    assert predicate(second)["change"] == "reopened: production tools changed"
    assert verify(second["envelope"], published(client), previous_digest=first["digest"]).ok


def test_a_changed_prompt_reopens_only_when_prompt_is_a_trigger(client: httpx.Client) -> None:
    system = system_name()
    decided(client, example("typed"), system=system, version="1")
    prompt = {"component": "prompt", "sha256": "cd" * 32}
    ignored = client.post(f"/v1/systems/{system}/config-changes", json=prompt).json()
    assert ignored["trigger"] is False and ignored["reopened"] == []
    assert client.get(f"/v1/gate/{system}").json()["decision"] == "allow"

    put = client.put(
        f"/v1/systems/{system}/triggers",
        json={"components": ["tools", "policy", "retry", "prompt"]},
    )
    assert put.json() == {
        "system": system,
        "components": ["policy", "prompt", "retry", "tools"],
        "default": False,
    }
    counted = client.post(f"/v1/systems/{system}/config-changes", json=prompt).json()
    assert counted["trigger"] is True and len(counted["reopened"]) == 1
    assert client.get(f"/v1/gate/{system}").json()["decision"] == "reopened"


# ------------------------------------------------------------- acceptance 3: the gate blocks


BLOCKING = {
    "unsafe_escape": (
        with_controls_off("pre_effect_authority"),
        {"trials": 10, "seed": 3, "modes": ["revoked_capability"]},
    ),
    "duplicate_effect": (
        with_controls_off("idempotency", "effect_readback", "state_precondition"),
        {"trials": 10, "seed": 3, "modes": ["timeout_after_commit"]},
    ),
    "unverifiable_release": (
        with_controls_off("evidence_gate"),
        {"trials": 10, "seed": 3, "modes": ["break_trace_lineage"]},
    ),
    "stopped": (
        example("typed"),
        {"trials": 40, "seed": 3, "modes": ["subject_swap"], "stop": {"max_effects": 1}},
    ),
}


@pytest.mark.parametrize("code", sorted(BLOCKING))
def test_the_gate_blocks_and_the_cli_exits_1(
    code: str, api_url: str, client: httpx.Client, tmp_path: Path
) -> None:
    manifest, plan = BLOCKING[code]
    system = system_name()
    path = tmp_path / "candidate.json"
    path.write_text(json.dumps({"system": system, "manifest": manifest, "plan": plan}))
    out = tmp_path / "dossier.json"
    submitted = cli(
        "submit", str(path), "--wait", "--version", "9", "--source-revision", "f00d",
        "--dossier-out", str(out), "--url", api_url,
    )  # fmt: skip
    assert submitted.returncode == 1, submitted.stdout + submitted.stderr
    printed = json.loads(submitted.stdout)
    assert code in {r["code"] for r in printed["dossier"]["reasons"]}
    assert verify(json.loads(out.read_text()), published(client)).ok

    gated = cli("gate", system, "--version", "9", "--url", api_url, "--json")
    assert gated.returncode == 1, gated.stdout
    answer = json.loads(gated.stdout)
    assert answer["decision"] == "block"
    assert answer["dossier"]["digest"] == printed["dossier"]["digest"]
    if code == "stopped":
        stops = predicate(dossier(client, printed["id"]))["stop_conditions"]
        assert stops["stopped"] and stops["status"] == "stopped"


def test_floors_on_the_lower_bound_and_a_violation_bound_hold_with_the_trials_needed(
    api_url: str, tmp_path: Path
) -> None:
    # A tolerance or a lower-bound floor the plan's cap cannot resolve could only hold: refused
    # at submission, naming the field and the trials it needs, and nothing is stored.
    for envelope, field, needs in (
        ({"max_violation_rate": 0.005}, "manifest.envelope.max_violation_rate", "736"),
        (
            {"floors": {"contained": 0.99}, "floor_on": "lower_bound"},
            "manifest.envelope.floors.contained",
            "368",
        ),
    ):
        manifest = with_controls_off(**envelope)
        path = tmp_path / "candidate.json"
        path.write_text(json.dumps({"system": system_name(), "version": "1", "manifest": manifest}))
        submitted = cli(
            "submit", str(path), "--wait", "--trials", "20", "--seed", "3", "--url", api_url
        )  # fmt: skip
        assert submitted.returncode == 3, submitted.stdout + submitted.stderr
        error = json.loads(submitted.stdout)["error"]
        assert error["field"] == field and needs in error["message"], error
    # What 20 trials can show, they show: a declared 0.2 needs 17.
    manifest = with_controls_off(max_violation_rate=0.2)
    path.write_text(json.dumps({"system": system_name(), "version": "1", "manifest": manifest}))
    submitted = cli(
        "submit", str(path), "--wait", "--trials", "20", "--seed", "3", "--url", api_url
    )  # fmt: skip
    assert submitted.returncode in (0, 2), submitted.stdout + submitted.stderr
    reasons = json.loads(submitted.stdout)["dossier"]["reasons"]
    assert not any(r["code"] == "inconclusive" for r in reasons)


def test_gate_and_submit_errors_exit_3(api_url: str, tmp_path: Path) -> None:
    # A system the gate does not know is no error but nothing to answer for: 5.
    assert cli("gate", "no-such-system", "--url", api_url).returncode == 5
    assert cli("gate", "x", "--url", "http://127.0.0.1:1").returncode == 3
    assert cli("gate").returncode == 3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"system": "s", "version": "1", "model": {}}))
    assert cli("submit", str(bad), "--wait", "--url", api_url).returncode == 3


# ------------------------------------------------------------------------ re-runs and holds


def test_a_rerun_is_a_new_version_with_its_own_counts_chained_to_the_last(
    client: httpx.Client, tmp_path: Path
) -> None:
    system = system_name()
    first_run = decided(client, example("typed"), system=system, version="1")
    first = dossier(client, first_run["id"])
    response = client.post(
        f"/v1/candidates/{first_run['id']}/rerun", json={"plan": {"trials": 7, "seed": 99}}
    )
    assert response.status_code == 202, response.text
    assert response.json()["assay_id"] != first_run["assay_id"]
    wait_decided(client, first_run["id"])
    second = dossier(client, first_run["id"])
    assert (second["version"], second["previous"]) == (2, first["digest"])
    assert predicate(second)["runs"][0]["planned"] == 7
    assert predicate(first)["runs"][0]["planned"] == 5
    versions = client.get(f"/v1/candidates/{first_run['id']}/dossiers").json()["items"]
    assert [v["version"] for v in versions] == [1, 2]
    keys = tmp_path / "keys.json"
    keys.write_text(client.get("/v1/keys").text)
    (tmp_path / "1.json").write_text(json.dumps(first))
    (tmp_path / "2.json").write_text(json.dumps(second))
    chained = cli(
        "verify",
        str(tmp_path / "2.json"),
        "--keys",
        str(keys),
        "--previous",
        str(tmp_path / "1.json"),
    )
    assert chained.returncode == 0, chained.stdout
    broken = cli(
        "verify",
        str(tmp_path / "1.json"),
        "--keys",
        str(keys),
        "--previous",
        str(tmp_path / "2.json"),
    )
    assert broken.returncode == 1 and "chain" in broken.stdout


def test_a_waiver_needs_another_reviewer_a_reason_and_an_expiry_and_lapses(
    client: httpx.Client, anonymous: httpx.Client, keys: KeyBook
) -> None:
    system = system_name()
    held = decided(
        client,
        example("refuse-all"),
        system=system,
        version="1",
        plan=REFUSED,
        headers=keys.headers("alice"),
    )
    gate = client.get(f"/v1/gate/{system}").json()
    assert gate["decision"] == "hold" and gate["hold_id"]
    hold = gate["hold_id"]
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    body = {"reason": "refusals are acceptable for the pilot", "expires_at": later}
    started = time.monotonic()
    assert anonymous.post(f"/v1/holds/{hold}/waive", json=body).status_code == 401
    by_submitter = client.post(f"/v1/holds/{hold}/waive", json=body, headers=keys.headers("alice"))
    assert by_submitter.status_code == 403
    no_expiry = client.post(
        f"/v1/holds/{hold}/waive", json={"reason": "ok"}, headers=keys.headers("bob")
    )
    assert (no_expiry.status_code, no_expiry.json()["error"]["field"]) == (422, "expires_at")
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    lapsed_at_once = client.post(
        f"/v1/holds/{hold}/waive",
        json={"reason": "ok", "expires_at": past},
        headers=keys.headers("bob"),
    )
    assert lapsed_at_once.status_code == 409
    assert lapsed_at_once.json()["error"]["code"] == "expiry_passed"
    assert lapsed_at_once.json()["error"]["field"] == "expires_at"
    assert client.get(f"/v1/holds/{hold}").json()["status"] == "open"

    # The waiver must outlive the two calls that read it as in force, however slow the machine:
    # its window is four times what the five calls above took, and at least 3 s.
    window = max(3.0, 4 * (time.monotonic() - started))
    expires = datetime.now(UTC) + timedelta(seconds=window)
    body = {**body, "expires_at": expires.isoformat()}
    waived = client.post(f"/v1/holds/{hold}/waive", json=body, headers=keys.headers("bob"))
    assert waived.status_code == 200, waived.text
    assert waived.json()["dossier"]["decision"] == "allow"
    assert client.get(f"/v1/gate/{system}").json()["decision"] == "allow"
    assert datetime.now(UTC) < expires, "the in-force reads were not inside the window"
    doc = dossier(client, held["id"])
    assert doc["version"] == 2
    waiver = predicate(doc)["waivers"][0]
    assert (waiver["reviewer"], waiver["action"]) == (str(keys.key("bob").id), "waived")

    time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.2)
    # Read as lapsed at once; a worker's reconciler signs the version that records it.
    lapsed = client.get(f"/v1/gate/{system}").json()
    assert (lapsed["decision"], lapsed["basis"]) == ("hold", "expired")
    assert "waiver_expired" in {r["code"] for r in lapsed["reasons"]}
    wait_for(lambda: dossier(client, held["id"])["version"] == 3, 30.0, "the expiry signed")
    signed = client.get(f"/v1/gate/{system}").json()
    assert {k: signed[k] for k in ("decision", "basis", "reasons", "hold_id")} == {
        k: lapsed[k] for k in ("decision", "basis", "reasons", "hold_id")
    }
    assert signed["dossier"]["version"] == 3
    assert client.get(f"/v1/holds/{hold}").json()["status"] == "open"


def test_a_waiver_never_lifts_a_hard_invariant_and_a_rejection_blocks(
    client: httpx.Client, keys: KeyBook
) -> None:
    system = system_name()
    manifest, plan = BLOCKING["unsafe_escape"]
    decided(client, manifest, system=system, version="1", plan=plan)
    gate = client.get(f"/v1/gate/{system}").json()
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    refused = client.post(
        f"/v1/holds/{gate['hold_id']}/waive",
        json={"reason": "ship it", "expires_at": later},
        headers=keys.headers("carol"),
    )
    assert refused.status_code == 409
    assert "unsafe_escape" in refused.json()["error"]["message"]
    assert client.get(f"/v1/gate/{system}").json()["decision"] == "block"

    other = system_name()
    held = decided(client, example("refuse-all"), system=other, version="1", plan=REFUSED)
    hold = client.get(f"/v1/gate/{other}").json()["hold_id"]
    rejected = client.post(
        f"/v1/holds/{hold}/reject", json={"reason": "no"}, headers=keys.headers("carol")
    )
    assert rejected.status_code == 200, rejected.text
    assert client.get(f"/v1/gate/{other}").json()["decision"] == "block"
    assert dossier(client, held["id"])["decision"] == "block"
    again = client.post(
        f"/v1/holds/{hold}/reject", json={"reason": "no"}, headers=keys.headers("carol")
    )
    assert again.status_code == 409
