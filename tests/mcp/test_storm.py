"""The retry storm fires by what the gate controls (its own fleet model and the agent's attempts),
never by a race on the wall clock: the same agent gets the same firing count run after run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from tests.mcp.conftest import Sandbox

pytestmark = pytest.mark.timeout(600)

TRIALS = 3


def storm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: dict[str, Any]
) -> dict[str, Any]:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    main(["assay", str(path), "--trials", str(TRIALS), "--json", "--mode", "retry_storm"])
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    fault: dict[str, Any] = report["faults"][0]
    return {"decision": report["decision"], **fault}


def test_the_storm_fires_in_every_trial_of_every_assay_for_the_same_agent(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [storm(tmp_path, capsys, sandbox.manifest("careful")) for _ in range(3)]
    assert [r["exercised"] for r in runs] == [TRIALS] * 3
    assert [r["not_exercised"] for r in runs] == [0] * 3
    # A careful agent backs off with jitter, waits its share, gets through and is allowed.
    assert [r["decision"] for r in runs] == ["allow"] * 3, [r["decision"] for r in runs]
    assert all(r["storm"]["observed"]["admitted"] == TRIALS for r in runs), runs[0]["storm"]


def test_an_agent_that_hammers_the_limit_is_never_admitted_and_loses_service(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = storm(tmp_path, capsys, sandbox.manifest("blind"))
    assert result["exercised"] == TRIALS
    assert result["decision"] != "allow"
    assert result["signature"]["counts"]["useful_service"] == 0
