"""Sequential plans and budgets on the warehouse example's real MCP servers: the plan is the
default for an mcp target and decides as the fixed plan does; every budget stops the assay with
the reason `budget` (a hold, never allow); usage is read from the command agent's claims and from
each framework (LangGraph's usage_metadata, the OpenAI Agents SDK's context_wrapper.usage).

The command agent runs warm (`protocol: "lines"`) where a test's claim is the plan, the spend or a
budget: those read the same claims either way, and a warm agent spares an interpreter start per
run (tests/mcp/test_careful_examples.py runs the interpreter-per-run protocol)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from service.core.faults.contract_catalogue import catalogue_for
from service.core.faults.plan import validate_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import parse_manifest
from service.mcp.engine import McpEngine
from tests.mcp.conftest import ROOT, Sandbox

pytestmark = pytest.mark.timeout(900)

MODES = ["ship_order_timeout_after_commit", "get_order_subject_swap"]
FRAMEWORKS = ROOT / "examples" / "frameworks"


def assay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: dict[str, Any], *args: str
) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    cli = ["assay", str(path), "--json", *args]
    for mode in MODES:
        cli += ["--mode", mode]
    code = main(cli)
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return code, report


def test_an_mcp_assay_runs_the_sequential_plan_and_reports_its_spend_per_arm(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = assay(tmp_path, capsys, sandbox.manifest("careful", warm=True), "--trials", "2")
    assert (code, report["decision"]) == (0, "allow"), report["reasons"]
    assert report["rule"] == "sequential"
    spend = report["spend"]
    assert spend["rule"] == "sequential"
    runs = spend["arms"]["intervention"]["runs"] + spend["arms"]["baseline"]["runs"]
    assert runs <= spend["total"]["runs"]
    # The careful agent reports its model usage in every claim.
    assert spend["arms"]["intervention"]["tokens"] > 0
    assert spend["arms"]["baseline"]["cost"] > 0
    assert spend["total"]["seconds"] > 0
    for fault in report["faults"]:
        assert fault["stop"]["code"] in ("decided", "max_runs")
        assert fault["spend"]["intervention"]["runs"] == fault["planned"]


def test_the_sequential_plan_blocks_the_blind_agent_as_the_fixed_plan_does_in_fewer_runs(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blind = sandbox.manifest("blind", warm=True)
    _, fixed = assay(tmp_path, capsys, blind, "--trials", "4", "--rule", "fixed")
    _, sequential = assay(tmp_path, capsys, blind, "--trials", "4")
    assert fixed["decision"] == sequential["decision"] == "block"
    assert "rule" not in fixed and sequential["rule"] == "sequential"
    stops = {f["id"]: f["stop"] for f in sequential["faults"]}
    assert stops["ship_order_timeout_after_commit"]["code"] == "violation"
    assert stops["ship_order_timeout_after_commit"]["trials"] == 1
    assert sequential["trials_executed"] < fixed["trials_executed"]


@pytest.mark.parametrize(
    ("flag", "value", "what"),
    [
        ("--max-runs", "2", "agent runs"),
        ("--max-seconds", "0.05", "seconds"),
        ("--max-tokens", "100", "tokens"),
        ("--max-cost", "0.0001", "cost"),
    ],
)
def test_each_budget_stops_the_assay_with_the_reason_budget_and_holds(
    flag: str,
    value: str,
    what: str,
    sandbox: Sandbox,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    manifest = sandbox.manifest("careful", warm=True)
    code, report = assay(tmp_path, capsys, manifest, "--trials", "3", flag, value)
    assert report["decision"] == "hold"
    assert code == 2
    budget = [r for r in report["reasons"] if r["code"] == "budget"]
    assert len(budget) == 1 and budget[0]["severity"] == "hold"
    assert what in budget[0]["message"]
    assert report["stopped"].startswith("budget:")


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_a_bad_budget_is_one_error_line_naming_the_flag(
    value: str, sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(sandbox.manifest("careful")))
    code = main(["assay", str(path), "--max-runs", value])
    # Not an assay that ran: the usage-error exit (argparse's 2) or the CLI's error exit (3).
    assert code in (2, 3)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max-runs" in err[0].replace("_", "-")


@pytest.mark.parametrize("framework", ["langgraph", "openai-agents"])
def test_the_framework_runner_reads_usage_from_the_framework(
    framework: str, sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data: dict[str, Any] = json.loads(
        (FRAMEWORKS / f"manifest.{framework}.careful.json").read_text()
    )
    data["tools"]["servers"] = {"shop": {"url": sandbox.shop}, "admin": {"url": sandbox.admin}}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(data))
    code = main(
        ["assay", str(path), "--json", "--trials", "1", "--mode", "ship_order_timeout_after_commit"]
    )
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert code == 0, report["reasons"]
    tokens = report["spend"]["arms"]["intervention"]["tokens"]
    # The scripted model reports 100 tokens a turn (examples/frameworks/scripted.py).
    assert tokens > 0 and tokens % 100 == 0
    claim = report["faults"][0]["samples"][0]["claim"]
    assert claim["usage"]["tokens"] == tokens


USAGE = ROOT / "tests" / "mcp" / "agents" / "usage.py"


@pytest.mark.parametrize("bad", ["negative", "string"])
def test_usage_a_cost_budget_cannot_count_holds_with_the_reason_usage_invalid(
    bad: str, sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A negative cost would buy the agent more budget, a string would spend none: either way
    # the budget cannot be kept, so the gate holds instead of counting it as nothing.
    manifest = sandbox.manifest("careful")
    manifest["target"]["runner"]["command"] = [sys.executable, str(USAGE), bad]
    code, report = assay(tmp_path, capsys, manifest, "--trials", "3", "--max-cost", "5")
    assert (code, report["decision"]) == (2, "hold")
    invalid = [r for r in report["reasons"] if r["code"] == "usage_invalid"]
    assert len(invalid) == 1 and invalid[0]["severity"] == "hold"
    assert report["stopped"].startswith("usage_invalid: ")


def test_what_the_team_pays_is_counted_apart_from_the_gates_own_naive_agent(
    sandbox: Sandbox,
) -> None:
    # The fixed plan runs the sensitivity pair's naive agent in every trial: the gate's own
    # runs, which the team does not pay for (a run budget does not count them either:
    # tests/core/shards/test_budgets.py).
    manifest = parse_manifest(sandbox.manifest("careful", warm=True))
    plan = {"modes": MODES[:1], "trials": 2, "rule": "fixed", "catalogue": catalogue_for(manifest)}

    engine = McpEngine(manifest)
    try:
        parsed = validate_plan(plan)
        report = run_assay(manifest, parsed, target=engine, clock=time.monotonic).to_dict()
        activity = engine.activity()
    finally:
        engine.close()
    spend = report["spend"]
    assert spend["gate"]["runs"] == spend["arms"]["sensitivity"]["runs"] == 2
    assert spend["team"]["runs"] == spend["total"]["runs"] - 2 == 4
    assert spend["team"]["tokens"] == spend["total"]["tokens"] > 0
    # Progress counts them apart too: the engine's runs are the team's, the naive ones the gate's.
    assert (activity["runs_done"], activity.get("gate_runs_done")) == (4, 2)
