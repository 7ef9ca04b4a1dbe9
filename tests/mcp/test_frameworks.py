"""Framework agents assayed through the CLI against the warehouse example's real MCP servers: a
LangGraph graph and an OpenAI Agents SDK agent, each driven by a deterministic scripted model
(no network, no keys), with the framework packages really installed and imported. The careful
agent is allowed; the commit-blind one is blocked for its duplicate shipment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from tests.mcp.conftest import ROOT, Sandbox
from tests.support.embedded import Embedded, embedded_service, tenant_code_worker

pytestmark = pytest.mark.timeout(600)

FRAMEWORKS = ROOT / "examples" / "frameworks"
CAREFUL_MODES = [
    "ship_order_timeout_after_commit",
    "ship_order_partial_reply",
    "get_order_subject_swap",
    "check_release_revoked",
    "forked_run",
]


def framework_manifest(sandbox: Sandbox, framework: str, agent: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (FRAMEWORKS / f"manifest.{framework}.{agent}.json").read_text()
    )
    data["tools"]["servers"] = {"shop": {"url": sandbox.shop}, "admin": {"url": sandbox.admin}}
    return data


def assay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: dict[str, Any], modes: list[str]
) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    args = ["assay", str(path), "--trials", "1", "--json"]
    for m in modes:
        args += ["--mode", m]
    code = main(args)
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return code, report


@pytest.mark.parametrize("framework", ["langgraph", "openai-agents"])
def test_the_careful_framework_agent_is_allowed(
    framework: str, sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = framework_manifest(sandbox, framework, "careful")
    code, report = assay(tmp_path, capsys, manifest, CAREFUL_MODES)
    assert report["decision"] == "allow", report["reasons"]
    assert code == 0
    assert not report["target_errors"].get("total"), report["target_errors"]
    for fault in report["faults"]:
        assert fault["samples"][0]["calls"], "the framework's tools reached the proxy"


@pytest.mark.parametrize("framework", ["langgraph", "openai-agents"])
def test_the_defective_framework_agent_is_blocked_for_its_duplicate(
    framework: str, sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = framework_manifest(sandbox, framework, "defective")
    code, report = assay(tmp_path, capsys, manifest, ["ship_order_timeout_after_commit"])
    assert report["decision"] == "block"
    assert code == 1
    assert "duplicate_effect" in {r["code"] for r in report["reasons"]}


def test_a_framework_runner_without_module_and_attribute_is_one_error_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sandbox: Sandbox
) -> None:
    manifest = framework_manifest(sandbox, "langgraph", "careful")
    manifest["target"]["runner"]["entrypoint"] = "no_colon_here"
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    assert main(["assay", str(path), "--trials", "1"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "target" in err and "module:attribute" in err


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    data_dir = tmp_path_factory.mktemp("frameworks-service")
    with (
        embedded_service(
            [sys.executable, "-m", "service.cli"], data_dir, {"PYTHONPATH": str(ROOT)}
        ) as running,
        # Framework runners are the tenant's code: allowed, and run on the tenant's own worker.
        tenant_code_worker(running),
    ):
        yield running


@pytest.mark.parametrize("framework", ["langgraph", "openai-agents"])
def test_through_the_service_the_careful_agent_is_allowed_and_the_defective_one_blocked(
    framework: str, sandbox: Sandbox, service: Embedded, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    env.update(ASSAYGATE_URL=service.url, ASSAYGATE_API_KEY=service.key, PYTHONPATH=str(ROOT))
    for agent, modes, expected in (
        ("careful", CAREFUL_MODES[:2], 0),
        ("defective", ["ship_order_timeout_after_commit"], 1),
    ):
        body = {
            "manifest": framework_manifest(sandbox, framework, agent),
            "plan": {"modes": modes, "trials": 1},
        }
        path = tmp_path / f"{agent}.json"
        path.write_text(json.dumps(body))
        junit = tmp_path / f"{agent}.xml"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "service.cli",
                "submit",
                str(path),
                "--wait",
                "--junit",
                *[str(junit)],
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == expected, done.stdout[-2000:] + done.stderr
        names = {c.get("name") for c in ET.parse(junit).getroot().iter("testcase")}
        assert set(modes) <= names
