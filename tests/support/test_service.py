"""The test support leaves nothing behind: the copy of tenant code a test process makes for its
tenant workers is removed when that process ends. A manifest sent to a tenant worker names the
agent in that copy, and a wait polls less often the longer it waits."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import service
from tests.support.service import ROOT, in_tenant_code, tenant_code


def test_the_tenant_code_copy_is_removed_when_the_test_process_exits() -> None:
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "from tests.support.service import tenant_code; print(tenant_code())",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    folder = Path(made.stdout.strip())
    assert folder.name.startswith("assaygate-tenant-code-")
    assert not folder.exists()


def test_a_manifest_for_a_tenant_worker_names_the_agent_in_the_tenant_code_copy() -> None:
    agent = ROOT / "examples" / "mcp-warehouse" / "agents.py"
    manifest = {"target": {"runner": {"command": [sys.executable, str(agent), "careful"]}}}
    moved = in_tenant_code(manifest)
    copied = tenant_code() / "examples" / "mcp-warehouse" / "agents.py"
    assert moved["target"]["runner"]["command"] == [sys.executable, str(copied), "careful"]
    assert copied.read_bytes() == agent.read_bytes()
    assert json.dumps(manifest) != json.dumps(moved), "the manifest given is left as it was"


def test_a_wait_polls_every_50_ms_at_first_and_at_most_every_quarter_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(service.time, "sleep", slept.append)
    answers = iter([False] * 30 + [True])
    service.wait_for(lambda: next(answers), 60, "the thirty-first answer")
    assert len(slept) == 30
    assert slept[0] == pytest.approx(0.05)
    assert all(b >= a for a, b in itertools.pairwise(slept))
    assert slept[-1] == pytest.approx(0.25)
