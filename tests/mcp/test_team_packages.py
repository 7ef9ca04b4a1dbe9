"""An MCP runner's agent in a team package named like Assaygate's own (`service`, `worker`) is the
team's: the host of the `python`, `langgraph` and `openai-agents` runners (`assaygate.mcp_host`)
imports nothing of the service, so the team's package is the one imported, by `assaygate assay`
from the team's folder and in the sandbox of a tenant's worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from service.core.faults.contract_catalogue import catalogue_for
from service.core.system.manifest import parse_manifest
from service.mcp.engine import McpEngine
from service.mcp.runners import HOST_MODULE
from service.sandbox import Confinement
from tests.mcp.conftest import EXAMPLE, ROOT, Sandbox

pytestmark = pytest.mark.timeout(300)

FRAMEWORKS = ROOT / "examples" / "frameworks"
# The `assaygate` command a team runs (its first import path is the command's folder, not the
# team's: the team's folder reaches the runner's host as its working directory).
ASSAYGATE = str(Path(sys.executable).parent / "assaygate")
MODE = "ship_order_timeout_after_commit"
# Each runner kind: its entrypoint in the team's package `{package}`. The team's MCP agent is its
# package's `mcp` module: beside a host under `service.mcp` it would hide the host's package.
ENTRYPOINTS = {
    "python": "{package}.mcp:run_careful",
    "langgraph": "{package}.graph:careful",
    "openai-agents": "{package}.sdk_agent:careful",
}


def team_code(code: Path, package: str) -> None:
    """The warehouse agents as the team's package `package`: the example's command agent (a
    `python` runner's callable), its LangGraph graph and its OpenAI Agents SDK agent (both with
    the scripted model)."""
    folder = code / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "mcp.py").write_text((EXAMPLE / "agents.py").read_text())
    (folder / "scripted.py").write_text((FRAMEWORKS / "scripted.py").read_text())
    for example, module in (
        ("warehouse_langgraph", "graph"),
        ("warehouse_openai_agents", "sdk_agent"),
    ):
        source = (FRAMEWORKS / f"{example}.py").read_text()
        own = source.replace("from examples.frameworks.scripted", f"from {package}.scripted")
        assert own != source, "the agent imports the scripted model from the team's package"
        (folder / f"{module}.py").write_text(own)


def manifest(sandbox: Sandbox, kind: str, package: str) -> dict[str, Any]:
    data = sandbox.manifest("careful")
    entrypoint = ENTRYPOINTS[kind].format(package=package)
    data["target"]["runner"] = {"kind": kind, "entrypoint": entrypoint, "deadline_s": 60}
    return data


@pytest.mark.parametrize("kind", list(ENTRYPOINTS))
@pytest.mark.parametrize("package", ["service", "worker"])
def test_assay_from_the_teams_folder_runs_its_agent_in_a_package_named_like_the_gates(
    sandbox: Sandbox, tmp_path: Path, kind: str, package: str
) -> None:
    team_code(tmp_path, package)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest(sandbox, kind, package)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [ASSAYGATE, "assay", str(path), "--trials", "1", "--mode", MODE, "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.stdout, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert not report["target_errors"].get("total"), report["target_errors"]
    assert report["decision"] == "allow", report["reasons"]
    assert done.returncode == 0
    assert report["faults"][0]["samples"][0]["calls"], "the team's agent reached the proxy"


@pytest.mark.parametrize("kind", list(ENTRYPOINTS))
@pytest.mark.parametrize("package", ["service", "worker"])
def test_in_the_sandbox_the_runner_serves_the_agent_of_a_team_package_named_like_the_gates(
    sandbox: Sandbox, tmp_path: Path, kind: str, package: str
) -> None:
    code = tmp_path / "code"
    code.mkdir(mode=0o755)  # the sandbox's user reads it; pytest's tmp_path is the runner's only
    team_code(code, package)
    parsed = parse_manifest(manifest(sandbox, kind, package))
    engine = McpEngine(parsed, catalogue_for(parsed), confinement=Confinement(code_dir=code))
    try:
        result = engine.run_trial(None, 1, 1, frozenset(), False)
        assert result.outcome.verdict == "release", result.target_error
        runner_sandbox = getattr(engine.runner, "sandbox", None)
        assert runner_sandbox is not None, "the runner's host ran in the sandbox"
        assert HOST_MODULE in runner_sandbox.argv
    finally:
        engine.close()
