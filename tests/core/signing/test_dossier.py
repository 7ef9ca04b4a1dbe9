"""Dossiers: standard DSSE over an in-toto statement, verifiable offline, tamper-evident."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from dataclasses import replace
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey
from securesystemslib.signer._utils import compute_default_keyid

from service.core.decision.policy import parse_policy
from service.core.errors import ArtifactInvalid
from service.core.evidence.builds import EndpointBuilds
from service.core.evidence.spend import Meter
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.signing.dossier import (
    CandidateRef,
    PublicKey,
    Signer,
    key_dict,
    payload_digest,
    predicate_from_report,
    seal,
    statement,
    verify,
)
from service.core.system.artifact import CODE as CODE_NAME
from service.core.system.artifact import ArtifactSubject, Assurance, Source, parse_digest
from service.core.system.manifest import Envelope as ReleaseEnvelope
from service.core.system.manifest import Manifest
from tests.core.conftest import ASSETS

TEST_SEED = bytes(range(32))  # the golden test key; never a real one


def _signer(seed: bytes = TEST_SEED) -> Signer:
    return Signer(Ed25519PrivateKey.from_private_bytes(seed))


def _keys(*signers: Signer) -> dict[str, PublicKey]:
    return {s.keyid: PublicKey(s.keyid, s.public) for s in signers}


def _dossier(
    manifest: Manifest,
    signer: Signer,
    previous: str | None = None,
    version: int = 1,
    issued_at: str = "2026-11-30T00:00:00Z",
) -> tuple[bytes, dict[str, Any]]:
    # Floors on the point estimate: 100 paper trials give each fault fewer than the 16 a perfect
    # record needs on the default lower bound, and these tests are about the signature.
    manifest = manifest.model_copy(update={"envelope": ReleaseEnvelope(floor_on="point")})
    report = run_assay(manifest, AssayPlan(catalogue="paper", trials=100, seed=188)).to_dict()
    cand = CandidateRef("c-1", "copperfin-returns", "1.6.0", "abc123", "ci-bot")
    pred = predicate_from_report(
        report,
        cand,
        version=version,
        previous=previous,
        issued_at=issued_at,
        triggers={"components": ["tools", "policy", "retry"]},
    )
    return seal(statement(cand.subject_name(), report["manifest_digest"], pred), signer)


def test_a_dossier_verifies_offline_with_only_the_published_key(typed_repair: Manifest) -> None:
    signer = _signer()
    _, env = _dossier(typed_repair, signer)
    result = verify(env, _keys(signer))
    assert result.ok
    assert [c.name for c in result.checks] == [
        "payload_type",
        "signature",
        "statement",
        "key_window",
        "subject_digest",
    ]
    pred = result.statement["predicate"]  # type: ignore[index]
    assert pred["decision"] == "allow" and pred["catalogue_version"] == "paper-188/1"
    assert {
        "fault_specs",
        "runs",
        "coverage",
        "stop_conditions",
        "holds",
        "waivers",
        "change_triggers",
        "interpretation",
        "previous",
    } <= set(pred)


def test_each_faults_run_names_the_shared_baseline_its_trials_used_and_old_plans_name_none(
    typed: Manifest,
) -> None:
    cand = CandidateRef("c-1", "copperfin-returns", "1.6.0", "abc123", "ci-bot")
    runs = {}
    for share in ("per_fault", "shared"):
        plan = AssayPlan(
            modes=("timeout_after_commit", "malformed_output"), trials=3, baseline=share
        )
        report = run_assay(typed, plan).to_dict()
        pred = predicate_from_report(
            report,
            cand,
            version=1,
            previous=None,
            issued_at="2026-12-06T00:00:00Z",
            triggers={"components": ["tools"]},
        )
        runs[share] = pred["runs"]
        assert pred["plan"].get("baseline") == (None if share == "per_fault" else "shared")
    assert all("baseline_run" not in r for r in runs["per_fault"])
    [named] = {json.dumps(r["baseline_run"], sort_keys=True) for r in runs["shared"]}
    assert json.loads(named)["shared_by"] == "refund API"


def test_securesystemslib_verifies_our_envelope_and_agrees_on_the_key_id(
    typed_repair: Manifest,
) -> None:
    signer = _signer()
    _, env = _dossier(typed_repair, signer)
    assert signer.keyid == compute_default_keyid("ed25519", "ed25519", {"public": signer.public})
    key = SSlibKey.from_dict(signer.keyid, key_dict(signer.public))
    accepted = Envelope.from_dict(copy.deepcopy(env)).verify([key], 1)
    assert list(accepted) == [signer.keyid]


@pytest.mark.parametrize("where", ["payload", "sig"])
def test_changing_any_byte_of_payload_or_signature_fails_with_a_reason(
    typed_repair: Manifest, where: str
) -> None:
    signer = _signer()
    payload, env = _dossier(typed_repair, signer)
    for i in (0, len(payload) // 2, len(payload) - 1) if where == "payload" else (0, 17, 63):
        bad = copy.deepcopy(env)
        if where == "payload":
            raw = bytearray(payload)
            raw[i] ^= 0x01
            bad["payload"] = base64.b64encode(bytes(raw)).decode()
        else:
            raw = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
            raw[i] ^= 0x01
            bad["signatures"][0]["sig"] = base64.b64encode(bytes(raw)).decode()
        result = verify(bad, _keys(signer))
        assert not result.ok
        assert result.failed() is not None
        assert result.failed().name == "signature"  # type: ignore[union-attr]
        assert "does not match the payload" in result.failed().detail  # type: ignore[union-attr]


def test_a_wrong_payload_type_and_an_unknown_key_are_named(typed_repair: Manifest) -> None:
    signer, other = _signer(), _signer(bytes(32))
    _, env = _dossier(typed_repair, signer)
    assert verify({**env, "payloadType": "text/plain"}, _keys(signer)).failed().name == (  # type: ignore[union-attr]
        "payload_type"
    )
    unknown = verify(env, _keys(other)).failed()
    assert unknown is not None and "no published key" in unknown.detail


def test_after_rotation_old_dossiers_still_verify_and_new_ones_carry_the_new_key(
    typed_repair: Manifest,
) -> None:
    old, new = _signer(), _signer(bytes(range(1, 33)))
    _, env_old = _dossier(typed_repair, old)
    payload_old = base64.b64decode(env_old["payload"])
    _, env_new = _dossier(typed_repair, new, previous=payload_digest(payload_old), version=2)
    published = _keys(old, new)
    assert verify(env_old, published).ok
    assert env_new["signatures"][0]["keyid"] == new.keyid != old.keyid
    chained = verify(env_new, published, previous_digest=payload_digest(payload_old))
    assert chained.ok and chained.checks[-1].name == "chain"
    broken = verify(env_new, published, previous_digest="0" * 64)
    assert broken.failed().name == "chain"  # type: ignore[union-attr]


def test_the_golden_dossier_still_verifies_byte_for_byte() -> None:
    golden = json.loads((ASSETS / "golden_dossier.json").read_text())
    keys = {k["keyid"]: PublicKey(k["keyid"], k["keyval"]["public"]) for k in golden["keys"]}
    assert verify(golden["envelope"], keys).ok
    stmt = json.loads(base64.b64decode(golden["envelope"]["payload"]))
    _, again = seal(stmt, _signer())
    assert again == golden["envelope"]  # canonical bytes and a deterministic Ed25519 signature


# ------------------------------------------------------------------------ validity windows

ROTATED_AT = "2026-12-01T12:00:00+00:00"


def _windowed(old: Signer, new: Signer) -> dict[str, PublicKey]:
    """`old` retired at ROTATED_AT in favour of `new`, as `GET /v1/keys` publishes them."""
    return {
        old.keyid: PublicKey(old.keyid, old.public, "2026-11-01T00:00:00+00:00", ROTATED_AT),
        new.keyid: PublicKey(new.keyid, new.public, ROTATED_AT, None),
    }


def test_a_retired_key_does_not_vouch_for_a_statement_dated_after_its_retirement(
    typed_repair: Manifest,
) -> None:
    old, new = _signer(), _signer(bytes(range(1, 33)))
    keys = _windowed(old, new)
    # The thief kept a copy of the retired private key and signs a statement dated after.
    _, forged = _dossier(typed_repair, old, issued_at="2026-12-01T12:00:01+00:00")
    failed = verify(forged, keys).failed()
    assert failed is not None and failed.name == "key_window"
    assert "after key" in failed.detail and "retired" in failed.detail
    # What it signed while it was active still verifies; so does what the new key signs.
    assert verify(_dossier(typed_repair, old, issued_at=ROTATED_AT)[1], keys).ok
    assert verify(_dossier(typed_repair, new, issued_at="2026-12-02T00:00:00Z")[1], keys).ok


def test_a_key_does_not_vouch_for_a_statement_dated_before_it_became_valid(
    typed_repair: Manifest,
) -> None:
    old, new = _signer(), _signer(bytes(range(1, 33)))
    _, backdated = _dossier(typed_repair, new, issued_at="2026-11-15T00:00:00Z")
    failed = verify(backdated, _windowed(old, new)).failed()
    assert failed is not None and failed.name == "key_window" and "before key" in failed.detail


@pytest.mark.parametrize("issued_at", [None, "yesterday", 17])
def test_a_statement_without_a_readable_time_is_refused_by_a_key_with_a_window(
    typed_repair: Manifest, issued_at: Any
) -> None:
    old, new = _signer(), _signer(bytes(range(1, 33)))
    report = run_assay(typed_repair, AssayPlan(catalogue="paper", trials=20, seed=1)).to_dict()
    cand = CandidateRef("c-1", "copperfin-returns", "1.6.0")
    pred = predicate_from_report(
        report, cand, version=1, previous=None, issued_at=issued_at, triggers={}
    )
    _, env = seal(statement(cand.subject_name(), report["manifest_digest"], pred), new)
    failed = verify(env, _windowed(old, new)).failed()
    assert failed is not None and failed.name == "key_window"


# ------------------------------------------------------------------------ artifact subjects

CODE = "ab" * 32


def _with_code(
    manifest: Manifest,
    signer: Signer,
    assurance: Assurance = Assurance.EXECUTED,
    policy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    report = run_assay(manifest, AssayPlan(catalogue="paper", trials=20, seed=1)).to_dict()
    cand = CandidateRef("c-1", "copperfin-returns", "1.6.0")
    pred = predicate_from_report(
        report,
        cand,
        version=1,
        previous=None,
        issued_at="2026-12-08T00:00:00Z",
        triggers={},
        artifacts=[ArtifactSubject(CODE_NAME, CODE, assurance, Source.ARTIFACT)],
        policy=policy,
    )
    return seal(statement(cand.subject_name(), report["manifest_digest"], pred), signer)[1]


def _policy(document: dict[str, Any]) -> dict[str, Any]:
    """An `organisation_policy` record as the service signs it."""
    found = parse_policy(document)
    return {"digest": found.digest(), "policy": found.document(), "versions": {"tenant": 1}}


def test_a_declared_artifact_fails_the_assurance_check_unless_the_signed_policy_accepts_it(
    typed_repair: Manifest,
) -> None:
    signer = _signer()
    for policy in (None, _policy({}), _policy({"accept_assurance": "reported"})):
        env = _with_code(typed_repair, signer, Assurance.DECLARED, policy)
        result = verify(env, _keys(signer), artifact=CODE)
        failed = result.failed()
        assert failed is not None and failed.name == "assurance", policy
        assert failed.detail.startswith("declared; the organisation's policy")
        assert result.artifact is not None and not result.artifact.met
    accepting = _policy({"accept_assurance": "declared"})
    result = verify(
        _with_code(typed_repair, signer, Assurance.DECLARED, accepting),
        _keys(signer),
        artifact=CODE,
    )
    assert result.ok, result.failed()
    assert "accepted by the organisation's policy" in result.checks[-1].detail
    assert result.artifact is not None and result.artifact.view() == {
        "digest": f"sha256:{CODE}",
        "assurance": "declared",
        "required": "declared",
        "met": True,
        "accepted_by_policy": True,
        "policy": accepting["digest"],
    }
    # Executed code needs no acceptance, under any policy.
    for policy in (None, accepting):
        env = _with_code(typed_repair, signer, Assurance.EXECUTED, policy)
        executed = verify(env, _keys(signer), artifact=CODE)
        assert executed.ok and executed.artifact is not None
        assert not executed.artifact.accepted


def test_the_code_that_ran_is_a_subject_beside_the_manifest_with_its_assurance(
    typed_repair: Manifest,
) -> None:
    signer = _signer()
    env = _with_code(typed_repair, signer)
    result = verify(env, _keys(signer), artifact=CODE)
    assert result.ok, result.failed()
    # With an artifact, verify also checks its assurance against the dossier's policy.
    names = [c.name for c in result.checks][-3:]
    assert names == ["artifact_subjects", "artifact", "assurance"]
    subjects = result.statement["subject"]  # type: ignore[index]
    assert subjects[0]["name"] == "assaygate:candidate/c-1"
    assert subjects[1] == {
        "name": "assaygate:code",
        "digest": {"sha256": CODE},
        "annotations": {"assurance": "executed", "source": "artifact"},
    }
    assert "(executed)" in result.checks[-2].detail


def test_an_artifact_that_is_not_a_subject_fails_the_artifact_check(
    typed_repair: Manifest,
) -> None:
    signer = _signer()
    env = _with_code(typed_repair, signer)
    failed = verify(env, _keys(signer), artifact="cd" * 32).failed()
    assert failed is not None and failed.name == "artifact"
    assert "is not a subject" in failed.detail
    # The manifest's digest is the first subject, never an artifact.
    manifest_digest = json.loads(base64.b64decode(env["payload"]))["subject"][0]["digest"]
    failed = verify(env, _keys(signer), artifact=manifest_digest["sha256"]).failed()
    assert failed is not None and failed.name == "artifact"


def test_a_subject_the_predicate_does_not_list_is_refused_even_when_signed(
    typed_repair: Manifest,
) -> None:
    """A signer (or a bug) adding a subject no evidence speaks of does not get it vouched for."""
    signer = _signer()
    stmt = json.loads(base64.b64decode(_with_code(typed_repair, signer)["payload"]))
    stmt["subject"].append({"name": "assaygate:code", "digest": {"sha256": "ef" * 32}})
    _, forged = seal(stmt, signer)
    failed = verify(forged, _keys(signer), artifact="ef" * 32).failed()
    assert failed is not None and failed.name == "artifact_subjects"


def test_an_old_dossier_without_artifacts_keeps_one_subject_and_its_checks(
    typed_repair: Manifest,
) -> None:
    signer = _signer()
    _, env = _dossier(typed_repair, signer)
    stmt = json.loads(base64.b64decode(env["payload"]))
    assert len(stmt["subject"]) == 1 and "artifacts" not in stmt["predicate"]
    failed = verify(env, _keys(signer), artifact=CODE).failed()
    assert failed is not None and failed.name == "artifact"
    assert "0 artifact subject(s)" in failed.detail


@pytest.mark.parametrize(
    "text",
    [
        "sha256:" + "AB" * 32,
        "sha512:" + "ab" * 32,
        "ab" * 32,
        "sha256:" + "ab" * 31,
        "sha256:" + "ab" * 32 + "\n",
        "sha256:../" + "ab" * 30,
        "refunds-sha256:" + "ab" * 32,
        17,
    ],
)
def test_a_digest_is_written_one_way_only(text: object) -> None:
    with pytest.raises(ArtifactInvalid, match="sha256:<64 lowercase hex") as refused:
        parse_digest(text, "code")
    assert refused.value.field == "code"
    assert parse_digest("sha256:" + "ab" * 32, "code") == "ab" * 32


# ---------------------------------------------------------------------------- build subjects

IMAGE = "sha256:" + "ee" * 32


def _with_builds(manifest: Manifest, signer: Signer) -> dict[str, Any]:
    """A dossier whose code ran, and whose remote endpoints: the agent reported the image it
    declared (by digest), a shop reported another build than declared, a ledger declared one
    and never said."""
    report = run_assay(manifest, AssayPlan(catalogue="paper", trials=20, seed=1)).to_dict()
    report["builds"] = {
        e.endpoint: e.view()
        for e in (
            EndpointBuilds("target.url", IMAGE, ((IMAGE, 20),)),
            EndpointBuilds("tools.servers.shop.url", "shop@1", (("shop@2", 20),)),
            EndpointBuilds("tools.servers.ledger.url", "ledger@3", ((None, 20),)),
        )
    }
    cand = CandidateRef("c-1", "copperfin-returns", "1.6.0")
    pred = predicate_from_report(
        report,
        cand,
        version=1,
        previous=None,
        issued_at="2026-12-08T00:00:00Z",
        triggers={},
        artifacts=[ArtifactSubject(CODE_NAME, CODE, Assurance.EXECUTED, Source.ARTIFACT)],
    )
    return seal(statement(cand.subject_name(), report["manifest_digest"], pred), signer)[1]


def test_each_remote_build_is_a_subject_reported_if_the_trials_heard_it_else_declared(
    typed_repair: Manifest,
) -> None:
    signer = _signer()
    env = _with_builds(typed_repair, signer)
    result = verify(env, _keys(signer), artifact=CODE)  # the code is still a subject
    assert result.ok, result.failed()
    subjects = result.statement["subject"]  # type: ignore[index]
    text = hashlib.sha256
    assert [(s["name"], s["digest"]["sha256"], s["annotations"]) for s in subjects[2:]] == [
        # A build written as a digest is that digest; any other is the SHA-256 of its text.
        ("assaygate:build:target.url", "ee" * 32, {"assurance": "reported", "ref": IMAGE}),
        (
            "assaygate:build:tools.servers.ledger.url",
            text(b"ledger@3").hexdigest(),
            {"assurance": "declared", "ref": "ledger@3"},
        ),
        (
            "assaygate:build:tools.servers.shop.url",
            text(b"shop@2").hexdigest(),
            {"assurance": "reported", "ref": "shop@2"},
        ),
        (
            "assaygate:build:tools.servers.shop.url",
            text(b"shop@1").hexdigest(),
            {"assurance": "declared", "ref": "shop@1"},
        ),
    ]
    # The deployed image, by digest, is a subject; `reported` is the endpoint's word, which an
    # allow rests on only when the organisation's policy accepts it (it accepts executed only).
    image = verify(env, _keys(signer), artifact="ee" * 32)
    assert [(c.name, c.ok) for c in image.checks][-2:] == [("artifact", True), ("assurance", False)]
    assert "reported; the organisation's policy (no policy recorded) accepts executed" in (
        image.checks[-1].detail
    )


def test_a_statement_that_drops_a_build_subject_fails_the_subject_check(
    typed_repair: Manifest,
) -> None:
    signer = _signer()
    env = _with_builds(typed_repair, signer)
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["subject"] = stmt["subject"][:-1]
    forged = seal(stmt, signer)[1]
    failed = verify(forged, _keys(signer)).failed()
    assert failed is not None and failed.name == "artifact_subjects"


# ------------------------------------------------------------------------ a release's attempts


def test_a_dossier_lists_the_releases_attempts_only_when_there_is_more_than_one(
    typed_repair: Manifest,
) -> None:
    report = run_assay(typed_repair, AssayPlan(catalogue="paper", trials=20, seed=1)).to_dict()
    cand = CandidateRef("c-1", "copperfin-returns", "1.6.0")
    first = {"candidate": {"id": "c-0", "version": "1.6.0"}, "assay_id": "a-0", "trials": 20}
    this = {"candidate": {"id": "c-1", "version": "1.6.0"}, "assay_id": "a-1", "trials": 20}
    args: dict[str, Any] = {
        "version": 1,
        "previous": None,
        "issued_at": "2026-12-05T00:00:00Z",
        "triggers": {},
    }
    assert "attempts" not in predicate_from_report(report, cand, **args)
    assert "attempts" not in predicate_from_report(report, cand, attempts=[this], **args)
    pred = predicate_from_report(report, cand, attempts=[first, this], **args)
    assert pred["attempts"] == [first, this]
    _, env = seal(statement(cand.subject_name(), report["manifest_digest"], pred), _signer())
    assert verify(env, _keys(_signer())).ok


def test_a_dossier_signs_what_the_team_paid_apart_from_the_gates_own_naive_agent(
    typed_repair: Manifest,
) -> None:
    report = run_assay(typed_repair, AssayPlan(modes=("subject_swap",), trials=4, seed=1))
    assert report.spend is None
    args: dict[str, Any] = {
        "version": 1,
        "previous": None,
        "issued_at": "2026-12-05T00:00:00Z",
        "triggers": {},
    }
    cand = CandidateRef("c-1", "copperfin-returns", "1.6.0")
    # An unmetered assay's dossier reads as it always did.
    assert "spend" not in predicate_from_report(report, cand, **args)
    meter = Meter()
    meter.add("subject_swap", "intervention", 4, (400, 0.04))
    meter.add("subject_swap", "sensitivity", 4, (0, 0.0))
    meter.add("subject_swap", "baseline", 4, (380, 0.038))
    metered = replace(report, spend=meter.view("sequential"))
    spend = predicate_from_report(metered, cand, **args)["spend"]
    assert spend["team"] == {"runs": 8, "seconds": 0.0, "tokens": 780, "cost": 0.078}
    assert spend["gate"] == {"runs": 4}
    assert spend["total"]["runs"] == 12 and "faults" not in spend
