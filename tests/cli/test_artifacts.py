"""`pack`, `verify --artifact` and `gate --artifact` without a service: the digest a folder
packs to, whether a file is a dossier's subject (offline), and bad input as one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from service.cli import main
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


@pytest.fixture
def dossier_with_code(tmp_path: Path, typed_repair: Manifest) -> tuple[Path, Path, Path]:
    """A signed dossier whose subjects name a team folder's artifact, its keys, the folder."""
    folder = team_folder(tmp_path / "code")
    signer = Signer(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
    report = run_assay(typed_repair, AssayPlan(catalogue="paper", trials=10, seed=1)).to_dict()
    cand = CandidateRef("c-1", "refunds", "1.0.0")
    subject = ArtifactSubject("code", pack(folder).sha256, Assurance.EXECUTED, Source.ARTIFACT)
    pred = predicate_from_report(
        report,
        cand,
        version=1,
        previous=None,
        issued_at="2026-12-08T00:00:00Z",
        triggers={},
        artifacts=[subject],
    )
    _, envelope = seal(statement(cand.subject_name(), report["manifest_digest"], pred), signer)
    dossier, keys = tmp_path / "dossier.json", tmp_path / "keys.json"
    dossier.write_text(json.dumps(envelope))
    keys.write_text(json.dumps({"keys": [{"keyid": signer.keyid, **key_dict(signer.public)}]}))
    return dossier, keys, folder


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
