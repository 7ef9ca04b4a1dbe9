"""A fault the workload cannot reach is `not_applicable`, with its evidence, never a hold; a fault
the workload reaches and the agent dodges under fault stays `not_exercised`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from tests.mcp.conftest import ROOT, Sandbox

pytestmark = pytest.mark.timeout(600)

AGENT = ROOT / "tests" / "mcp" / "agents" / "readers.py"
MODE = "get_stock_stale_replay"


def assay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sandbox: Sandbox, *agent: str
) -> dict[str, Any]:
    manifest = sandbox.manifest("careful")
    manifest["target"]["runner"]["command"] = [sys.executable, str(AGENT), *agent]
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    main(["assay", str(path), "--trials", "2", "--json", "--mode", MODE])
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def test_a_careful_agent_that_reads_once_is_allowed_and_the_second_read_fault_not_applicable(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for _ in range(3):
        report = assay(tmp_path, capsys, sandbox, "once")
        assert report["decision"] == "allow", report["reasons"]
        fault = report["faults"][0]
        assert fault["exercised"] == 0
        applicability = fault["applicability"]
        assert applicability["status"] == "not_applicable"
        assert applicability["baseline_runs"] == 2 and applicability["baseline_reached"] == 0
        assert "call it twice (get_stock)" in applicability["evidence"]


def test_an_agent_that_avoids_the_tool_only_under_fault_is_still_held(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = assay(tmp_path, capsys, sandbox, "dodger", str(tmp_path / "runs"))
    assert report["decision"] == "hold"
    assert "not_exercised" in {r["code"] for r in report["reasons"]}
    fault = report["faults"][0]
    assert fault["applicability"]["status"] == "applicable"
    assert fault["applicability"]["baseline_reached"] >= 1
