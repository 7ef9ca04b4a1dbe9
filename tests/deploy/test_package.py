"""Assaygate as a user installs it from a package index: the sdist and the wheel pass
`twine check --strict` (metadata, licence, README as the description), and the wheel installed
into a fresh virtualenv runs from an empty folder far from any checkout — `serve` until ready
(its migrations come from inside the wheel), a local assay, a submission and the gate."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import httpx
import pytest

from tests.deploy.conftest import Built, Installed, clean_env
from tests.support.embedded import embedded_service
from tests.support.service import EXAMPLES

pytestmark = pytest.mark.integration

MANIFEST = EXAMPLES / "copperfin-typed-repair.json"


def wheel_metadata(wheel: Path) -> tuple[list[str], dict[str, str], str]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(archive.read(meta).decode())
    headers = {k: str(v) for k, v in message.items()}
    return names, headers, str(message.get_payload())


def test_the_sdist_and_the_wheel_pass_twine_check_strict(built: Built) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(built.sdist), str(built.wheel)],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2


def test_the_wheel_carries_its_migrations_licence_and_readme(built: Built) -> None:
    names, headers, description = wheel_metadata(built.wheel)
    assert "service/migrations/env.py" in names
    assert "service/migrations/script.py.mako" in names
    shipped = {n.rsplit("/", 1)[1] for n in names if n.startswith("service/migrations/versions/")}
    in_checkout = {p.name for p in (EXAMPLES.parent / "migrations" / "versions").glob("*.py")}
    assert shipped == in_checkout, "every revision of the checkout is in the wheel"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert headers["License-Expression"] == "Apache-2.0"
    assert headers["Description-Content-Type"] == "text/markdown"
    readme_title = (EXAMPLES.parent / "README.md").read_text().splitlines()[0]
    assert description.lstrip().startswith(readme_title)
    # The target author's stable interface ships in the same wheel (docs/targets.md).
    assert {"assaygate/__init__.py", "assaygate/target.py", "assaygate/mcp.py"} <= set(names)
    assert "assaygate/host.py" in names


def test_the_sdist_carries_what_the_wheel_is_built_from(built: Built) -> None:
    with tarfile.open(built.sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {"LICENSE", "README.md", "alembic.ini", "setup.py", "migrations/env.py"} <= names
    assert not any(n.startswith(("tests/", "docs/", ".venv/")) for n in names)


def test_the_installed_wheel_serves_assays_and_gates_from_an_empty_folder(
    installed: Installed, tmp_path: Path
) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    assaygate = str(installed.bin / "assaygate")
    env = installed.env()

    def run(*words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [assaygate, *words], cwd=folder, env=env, capture_output=True, text=True, timeout=600
        )

    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("assaygate 0."), version

    (folder / "manifest.json").write_text(MANIFEST.read_text())
    assay = run(
        "assay", "manifest.json", "--catalogue", "paper", "--trials", "200",
        "--junit", "assay-junit.xml", "--summary", "assay-summary.md",
    )  # fmt: skip
    assert assay.returncode in (0, 1, 2), assay.stderr
    assert "Decision:" in assay.stdout
    assert (folder / "assay-junit.xml").is_file() and (folder / "assay-summary.md").is_file()

    data_dir = tmp_path / "service"
    data_dir.mkdir()
    with embedded_service([assaygate], data_dir, {"PATH": env["PATH"], "PYTHONPATH": ""}) as svc:
        assert (data_dir / "var" / "assaygate.sqlite3").is_file(), "migrated from the wheel"
        client = ["--url", svc.url, "--api-key", svc.key]
        submitted = run(
            "submit", "manifest.json", "--wait", "--version", "wheel-1",
            "--dossier-out", "dossier.json", *client,
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        assert json.loads(submitted.stdout)["gate"]["decision"] == "allow"
        gate = run("gate", "--manifest", "manifest.json", "--version", "wheel-1", *client)
        assert gate.returncode == 0, gate.stdout + gate.stderr
        assert gate.stdout.startswith("allow: copperfin-returns wheel-1")
        (folder / "keys.json").write_text(httpx.get(f"{svc.url}/v1/keys").text)
        verified = run("verify", "dossier.json", "--keys", "keys.json")
        assert verified.returncode == 0, verified.stdout + verified.stderr
