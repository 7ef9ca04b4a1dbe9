"""A careful agent can earn `allow`: the careful examples (the warehouse command agent, the
LangGraph and OpenAI Agents SDK agents) over the whole catalogue their contract implies, at 2
trials a fault, three runs in a row, as docs/mcp.md and docs/frameworks.md say they do.

The warehouse command agent's first run is the committed manifest exactly (an interpreter per
run, as docs/mcp.md runs it); its next two run the same agent warm (`agents.py careful --lines`,
the runner of `manifest.slots.json`): the same code deciding the same tasks, without the second
and a half of interpreter start that made this one test take seven minutes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from tests.mcp.conftest import ROOT, Sandbox

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

CAREFUL = {
    "warehouse command agent": ROOT / "examples" / "mcp-warehouse" / "manifest.careful.json",
    "langgraph": ROOT / "examples" / "frameworks" / "manifest.langgraph.careful.json",
    "openai-agents": ROOT / "examples" / "frameworks" / "manifest.openai-agents.careful.json",
}


@pytest.mark.parametrize("example", sorted(CAREFUL))
def test_the_careful_example_is_allowed_at_two_trials_a_fault_three_runs_in_a_row(
    example: str, sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data: dict[str, Any] = json.loads(CAREFUL[example].read_text())
    # Only the URLs move: the warehouse example's declared builds stay and must be corroborated.
    servers = data["tools"]["servers"]
    servers["shop"] = {**servers["shop"], "url": sandbox.shop}
    servers["admin"] = {**servers["admin"], "url": sandbox.admin}
    path = tmp_path / "manifest.json"
    for run in range(3):
        if run == 1 and data["target"]["runner"].get("kind") == "command":
            runner = data["target"]["runner"]
            runner["command"] = [*runner["command"], "--lines"]
            runner["protocol"] = "lines"
        path.write_text(json.dumps(data))
        code = main(["assay", str(path), "--trials", "2", "--seed", str(run + 1), "--json"])
        report: dict[str, Any] = json.loads(capsys.readouterr().out)
        assert report["decision"] == "allow", (run, report["reasons"])
        assert code == 0
        # Every fault either fired or is shown not to apply to this workload, with its evidence.
        for fault in report["faults"]:
            applies = (fault.get("applicability") or {}).get("status") != "not_applicable"
            assert fault["exercised"] > 0 or not applies, fault["id"]
