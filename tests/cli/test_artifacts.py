"""`pack`, `verify --artifact` and `gate --artifact` without a service: the digest a folder
packs to, whether a file is a dossier's subject (offline), and bad input as one line."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from service.cli import main
from service.cli.ci import gate_exit, gate_line
from service.core.decision.policy import parse_policy
from service.core.faults.plan import AssayPlan
from service.core.shards.assay import run_assay
from service.core.signing.dossier import (
    CandidateRef,
    Signer,
    key_dict,
    predicate_from_report,
    seal,
    statement,
)
from service.core.system.artifact import ArtifactSubject, Assurance, Source
from service.core.system.manifest import Manifest
from service.packing import pack
from tests.core.conftest import typed_repair

__all__ = ["typed_repair"]  # the fixture


def team_folder(root: Path) -> Path:
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "run.py").write_text("def run(task, tools):\n    pass\n")
    return root


def assaygate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, check=False
    )


def test_pack_prints_the_digest_the_same_files_always_pack_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = team_folder(tmp_path / "code")
    out = tmp_path / "code.tar.gz"
    assert main(["pack", str(folder), "--out", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["digest"] == f"sha256:{pack(folder).sha256}"
    assert shown["source"] == "folder" and shown["entries"] == 2 and shown["dirty"] is False
    assert out.read_bytes() == pack(folder).data
    assert main(["pack", str(team_folder(tmp_path / "again"))]) == 0
    assert capsys.readouterr().out.strip() == shown["digest"]


def test_pack_of_something_that_is_not_a_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = assaygate("pack", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"assaygate: error: folder: {tmp_path / 'missing'} is not a folder"
    ]


def signed_with_code(
    root: Path,
    manifest: Manifest,
    assurance: Assurance = Assurance.EXECUTED,
    policy: dict[str, object] | None = None,
) -> tuple[Path, Path, Path]:
    """A signed dossier whose subjects name a team folder's artifact (with this assurance, under
    this organisation policy), its keys, the folder."""
    folder = team_folder(root / "code")
    signer = Signer(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
    # 16 trials: the fewest in which a perfect record clears the default floors (an allow).
    plan = AssayPlan(catalogue="full", modes=["timeout_after_commit"], trials=16, seed=3)
    report = run_assay(manifest, plan).to_dict()
    cand = CandidateRef("c-1", "refunds", "1.0.0")
    subject = ArtifactSubject("code", pack(folder).sha256, assurance, Source.ARTIFACT)
    found = parse_policy(policy or {})
    pred = predicate_from_report(
        report,
        cand,
        version=1,
        previous=None,
        issued_at="2026-12-08T00:00:00Z",
        triggers={},
        artifacts=[subject],
        policy={"digest": found.digest(), "policy": found.document()},
    )
    _, envelope = seal(statement(cand.subject_name(), report["manifest_digest"], pred), signer)
    dossier, keys = root / "dossier.json", root / "keys.json"
    dossier.write_text(json.dumps(envelope))
    keys.write_text(json.dumps({"keys": [{"keyid": signer.keyid, **key_dict(signer.public)}]}))
    return dossier, keys, folder


@pytest.fixture
def dossier_with_code(tmp_path: Path, typed_repair: Manifest) -> tuple[Path, Path, Path]:
    return signed_with_code(tmp_path, typed_repair)


def test_verify_artifact_finds_the_packed_file_and_the_folder_among_the_subjects(
    tmp_path: Path, dossier_with_code: tuple[Path, Path, Path]
) -> None:
    dossier, keys, folder = dossier_with_code
    packed = tmp_path / "code.tar.gz"
    packed.write_bytes(pack(folder).data)
    for artifact in (str(packed), str(folder), f"sha256:{pack(folder).sha256}"):
        done = assaygate("verify", str(dossier), "--keys", str(keys), "--artifact", artifact)
        assert done.returncode == 0, done.stdout
        assert "ok   artifact: sha256:" in done.stdout and "(executed)" in done.stdout


def test_verify_artifact_of_declared_code_fails_its_assurance_and_answers_as_the_gate_would(
    tmp_path: Path, typed_repair: Manifest
) -> None:
    dossier, keys, folder = signed_with_code(tmp_path, typed_repair, Assurance.DECLARED)
    decision = json.loads(base64.b64decode(json.loads(dossier.read_text())["payload"]))
    assert decision["predicate"]["decision"] == "allow"  # the candidate's evidence allows
    done = assaygate("verify", str(dossier), "--keys", str(keys), "--artifact", str(folder))
    assert done.returncode == 1, done.stdout
    assert "FAIL assurance: declared; the organisation's policy" in done.stdout
    held = "hold: refunds 1.0.0 — assurance (declared; the policy requires executed)"
    assert f"answer: {held}\n" in done.stdout
    assert done.stdout.strip().endswith("NOT VERIFIED: assurance failed")
    shown = assaygate(
        "verify", str(dossier), "--keys", str(keys), "--artifact", str(folder), "--json"
    )
    answer = json.loads(shown.stdout)["answer"]
    assert answer["decision"] == "hold" and answer["reasons"][0]["code"] == "assurance"
    assert gate_line(answer) == held and gate_exit(answer) == 2


def test_verify_artifact_of_declared_code_the_policy_accepts_passes_and_says_so(
    tmp_path: Path, typed_repair: Manifest
) -> None:
    accepting = {"accept_assurance": "declared"}
    dossier, keys, folder = signed_with_code(tmp_path, typed_repair, Assurance.DECLARED, accepting)
    done = assaygate("verify", str(dossier), "--keys", str(keys), "--artifact", str(folder))
    assert done.returncode == 0, done.stdout
    line = "allow: refunds 1.0.0 — artifact declared, not executed: accepted by the organisation's"
    assert f"answer: {line} policy\n" in done.stdout
    shown = assaygate(
        "verify", str(dossier), "--keys", str(keys), "--artifact", str(folder), "--json"
    )
    answer = json.loads(shown.stdout)["answer"]
    assert answer["artifact_assurance"]["accepted_by_policy"] is True
    assert gate_exit(answer) == 4  # what `gate` exits on the same answer online
    # Executed code under that policy is a plain allow: exit 0, nothing accepted.
    ran = signed_with_code(tmp_path / "ran", typed_repair, Assurance.EXECUTED, accepting)
    shown = assaygate("verify", str(ran[0]), "--keys", str(ran[1]), "--artifact", str(ran[2]))
    assert shown.returncode == 0 and "answer: allow: refunds 1.0.0\n" in shown.stdout


def test_verify_artifact_of_other_bytes_is_not_verified_and_says_so(
    tmp_path: Path, dossier_with_code: tuple[Path, Path, Path]
) -> None:
    dossier, keys, folder = dossier_with_code
    (folder / "agent" / "run.py").write_text("def run(task, tools):\n    raise SystemExit\n")
    done = assaygate("verify", str(dossier), "--keys", str(keys), "--artifact", str(folder))
    assert done.returncode == 1
    assert "is not a subject of this dossier" in done.stdout
    assert done.stdout.strip().endswith("NOT VERIFIED: artifact failed")


@pytest.mark.parametrize(
    "artifact",
    ["sha256:" + "AB" * 32, "sha256:../../etc/passwd", "no-such-file-or-digest"],
)
def test_a_malformed_artifact_is_one_line_naming_the_flag(
    artifact: str, dossier_with_code: tuple[Path, Path, Path]
) -> None:
    dossier, keys, _ = dossier_with_code
    done = assaygate("verify", str(dossier), "--keys", str(keys), "--artifact", artifact)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("assaygate: error: --artifact: ")
    gate = assaygate("gate", "refunds", "--artifact", artifact, "--url", "http://127.0.0.1:9")
    assert gate.returncode == 3  # the gate's exit codes: any error is 3, never a decision
    [line] = gate.stderr.strip().splitlines()
    assert line.startswith("assaygate: error: --artifact: ")


def test_a_folder_whose_link_leaves_it_is_one_line_and_exit_2_before_anything_is_uploaded(
    tmp_path: Path,
) -> None:
    folder = team_folder(tmp_path / "team")
    (folder / "etc").symlink_to("/etc")
    done = assaygate("pack", str(folder))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "assaygate: error: folder: archive entry 'etc': a link to '/etc' leaves the folder"
    ]
