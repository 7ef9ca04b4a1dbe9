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
import uuid
from pathlib import Path

import httpx
import pytest

from tests.api.test_bad_input import refused
from tests.support.api import cli, submit, upload
from tests.support.keys import KeyBook
from tests.support.service import example, wait_decided

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PLAN = {"catalogue": "full", "modes": ["timeout_after_commit"], "trials": 5, "seed": 3}
UNKNOWN = "sha256:" + hashlib.sha256(b"never submitted").hexdigest()


def test_the_gate_asked_by_an_artifact_alone_answers_for_the_system_that_ships_it(
    api_url: str, keys: KeyBook, tmp_path: Path
) -> None:
    tenant = f"bytes-{uuid.uuid4().hex[:8]}"
    key = keys.key(f"ci-{tenant}", tenant=tenant)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "agent.py").write_text("run = None\n")
    system = f"bytes-{uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=api_url, timeout=30.0, headers=key.headers) as client:
        digest, _ = upload(client, tmp_path / "code")
        submitted = submit(
            client, example("typed-repair"), system=system, version="1", plan=PLAN, code=digest
        )
        wait_decided(client, submitted["id"])
        named = client.get(f"/v1/gate/{system}", params={"artifact": digest}).json()
        alone = client.get("/v1/gate", params={"artifact": digest})
        assert alone.status_code == 200, alone.text
        assert alone.json() == named and named["system"] == system
        refused(client.get("/v1/gate", params={"artifact": UNKNOWN}), 404, "artifact")
        refused(client.get("/v1/gate"), 422, "system")

    # The deploy's command: the same answer, and its exit code, by the bytes alone.
    asked = cli(api_url, key.secret, "gate", "--artifact", str(tmp_path / "code"))
    assert asked.returncode == 2, asked.stdout + asked.stderr  # declared: held
    assert asked.stdout.startswith(f"hold: {system} 1 — assurance"), asked.stdout
    unknown = cli(api_url, key.secret, "gate", "--artifact", UNKNOWN)
    assert unknown.returncode == 5, unknown.stdout + unknown.stderr
    assert f"no candidate to answer for: HTTP 404: artifact: no candidate of tenant {tenant}" in (
        unknown.stderr
    )
    assert "Traceback" not in unknown.stderr
    other_version = cli(api_url, key.secret, "gate", system, "--version", "9")
    assert other_version.returncode == 5, other_version.stdout
    nothing = cli(api_url, key.secret, "gate")
    assert nothing.returncode == 3 and "--artifact" in nothing.stderr, nothing.stderr
