"""A careful agent can earn `allow`: the careful examples (the warehouse command agent, the
LangGraph and OpenAI Agents SDK agents) over the whole catalogue their contract implies, at 2
trials a fault, three runs in a row, as docs/mcp.md and docs/frameworks.md say they do.

The warehouse command agent also runs once as the committed manifest exactly (an interpreter per
run, as docs/mcp.md runs it), at one trial a fault; its three runs at 2 trials run the same agent
warm (`agents.py careful --lines`, the runner of `manifest.slots.json`): the same code deciding the
same tasks, without the second of interpreter start per run (about a hundred starts at 2 trials,
which made this the suite's costliest test)."""

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


def runs_of(data: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
    """The manifests to assay, each with its trials a fault: three runs at 2 trials; a command
    agent's first is the committed runner at one trial, then three warm at 2."""
    runner = data["target"]["runner"]
    if runner.get("kind") != "command":
        return [(data, 2)] * 3
    # What the interpreter-per-run run adds is the `once` protocol (task on stdin, URL in the
    # environment, claim on stdout) carrying every fault of the catalogue to a decision: one
    # trial a fault shows that, and every fault still has to fire or be shown not to apply. The
    # two-trial record it would add is the same agent's decisions, which the warm runs hold to.
    warm = json.loads(json.dumps(data))
    warm["target"]["runner"] = {**runner, "command": [*runner["command"], "--lines"]}
    warm["target"]["runner"]["protocol"] = "lines"
    return [(data, 1), (warm, 2), (warm, 2), (warm, 2)]


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
    runs = runs_of(data)
    assert sum(trials == 2 for _, trials in runs) == 3
    for run, (manifest, trials) in enumerate(runs):
        path.write_text(json.dumps(manifest))
        code = main(["assay", str(path), "--trials", str(trials), "--seed", str(run + 1), "--json"])
        report: dict[str, Any] = json.loads(capsys.readouterr().out)
        assert report["decision"] == "allow", (run, report["reasons"])
        assert code == 0
        # Every fault either fired or is shown not to apply to this workload, with its evidence.
        for fault in report["faults"]:
            applies = (fault.get("applicability") or {}).get("status") != "not_applicable"
            assert fault["exercised"] > 0 or not applies, fault["id"]
