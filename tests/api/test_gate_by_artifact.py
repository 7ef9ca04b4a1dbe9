"""A deploy asks the gate about the bytes it deploys, and needs nothing else (issue 47: `gate
--artifact` still needed the system's name, and a digest nobody submitted exited 3, as an
unreachable service does, where a pipeline may retry).

- By the artifact alone (`GET /v1/gate?artifact=`, `assaygate gate --artifact`), the answer is
  the one asked with the system: for the system whose newest candidate ships it.
- A digest no candidate of the tenant ships is 404 naming `artifact`, and `gate` exits 5 (no
  candidate to answer for), as for an unknown system or version; asked with neither a system nor
  an artifact, the read is 422 naming `system`."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from service.packing import pack
from tests.api.test_bad_input import refused
from tests.support.keys import KeyBook
from tests.support.service import ROOT, example, wait_decided

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PLAN = {"catalogue": "full", "modes": ["timeout_after_commit"], "trials": 5, "seed": 3}
UNKNOWN = "sha256:" + hashlib.sha256(b"never submitted").hexdigest()


def assaygate(url: str, secret: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "ASSAYGATE_URL": url, "ASSAYGATE_API_KEY": secret}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_gate_asked_by_an_artifact_alone_answers_for_the_system_that_ships_it(
    api_url: str, keys: KeyBook, tmp_path: Path
) -> None:
    tenant = f"bytes-{uuid.uuid4().hex[:8]}"
    key = keys.key(f"ci-{tenant}", tenant=tenant)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "agent.py").write_text("run = None\n")
    packed = pack(tmp_path / "code")
    system = f"bytes-{uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=api_url, timeout=30.0, headers=key.headers) as client:
        digest = client.post(
            "/v1/artifacts", content=packed.data, headers={"Content-Type": "application/gzip"}
        ).json()["digest"]
        submitted = client.post(
            "/v1/candidates",
            json={
                "system": system,
                "version": "1",
                "source_revision": "abc",
                "manifest": example("typed-repair"),
                "plan": PLAN,
                "code": digest,
            },
        )
        assert submitted.status_code == 202, submitted.text
        wait_decided(client, submitted.json()["id"])
        named = client.get(f"/v1/gate/{system}", params={"artifact": digest}).json()
        alone = client.get("/v1/gate", params={"artifact": digest})
        assert alone.status_code == 200, alone.text
        assert alone.json() == named and named["system"] == system
        refused(client.get("/v1/gate", params={"artifact": UNKNOWN}), 404, "artifact")
        refused(client.get("/v1/gate"), 422, "system")

    # The deploy's command: the same answer, and its exit code, by the bytes alone.
    asked = assaygate(api_url, key.secret, "gate", "--artifact", str(tmp_path / "code"))
    assert asked.returncode == 2, asked.stdout + asked.stderr  # declared: held
    assert asked.stdout.startswith(f"hold: {system} 1 — assurance"), asked.stdout
    unknown = assaygate(api_url, key.secret, "gate", "--artifact", UNKNOWN)
    assert unknown.returncode == 5, unknown.stdout + unknown.stderr
    assert f"no candidate to answer for: HTTP 404: artifact: no candidate of tenant {tenant}" in (
        unknown.stderr
    )
    assert "Traceback" not in unknown.stderr
    other_version = assaygate(api_url, key.secret, "gate", system, "--version", "9")
    assert other_version.returncode == 5, other_version.stdout
    nothing = assaygate(api_url, key.secret, "gate")
    assert nothing.returncode == 3 and "--artifact" in nothing.stderr, nothing.stderr
