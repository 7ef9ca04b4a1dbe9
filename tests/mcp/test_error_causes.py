"""A target error says what failed, not only how often: the cause reaches the JSON report, the
gate's reasons, JUnit, the summary and stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.cli import main
from tests.mcp.conftest import Sandbox

pytestmark = pytest.mark.timeout(300)

CAUSE = "the final output is not a claim object"


def test_an_agent_answering_prose_is_held_with_its_cause_in_every_report(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = sandbox.manifest("careful")
    manifest["target"]["runner"] = {"kind": "python", "entrypoint": "tests.mcp.agents.prose:run"}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    args = ["assay", str(path), "--trials", "1", "--mode", "ship_order_timeout_after_commit"]
    code = main([*args, "--json", "--junit", str(junit), "--summary", str(summary)])
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert code != 0 and report["decision"] != "allow"
    causes = report["target_errors"]["causes"]["TargetFailed"]
    assert any(CAUSE in c for c in causes), causes
    fault = report["faults"][0]
    assert any(CAUSE in c for c in fault["error_causes"]["TargetFailed"])
    reason = next(r for r in report["reasons"] if r["code"] == "target_errors")
    assert CAUSE in reason["message"]
    assert CAUSE in junit.read_text()
    assert CAUSE in summary.read_text()
    assert CAUSE in out.err
