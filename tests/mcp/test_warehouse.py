"""The warehouse example assayed through the CLI: real MCP servers, the real SDK client, the proxy
over Streamable HTTP and over stdio (`assaygate mcp-proxy`), and real agent processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from tests.mcp.conftest import Sandbox

pytestmark = pytest.mark.timeout(600)


def assay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: dict[str, Any], *modes: str
) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    args = ["assay", str(path), "--trials", "1", "--json"]
    for m in modes:
        args += ["--mode", m]
    code = main(args)
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return code, report


def codes(report: dict[str, Any]) -> set[str]:
    return {r["code"] for r in report["reasons"]}


def test_the_careful_agent_is_allowed_over_streamable_http(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = assay(
        tmp_path,
        capsys,
        sandbox.manifest("careful"),
        "ship_order_timeout_after_commit",
        "ship_order_partial_reply",
        "get_order_subject_swap",
        "check_release_revoked",
        "forked_run",
        "world_mutated",
        "restart_after_checkpoint",
    )
    assert report["decision"] == "allow", report["reasons"]
    assert code == 0
    for fault in report["faults"]:
        # Every fault's evidence could have failed: the naive agent broke under it.
        assert fault["counterfactual"]["sensitivity"]["status"] == "valid", fault["id"]
        assert all(v["failed"] == 0 for v in fault["invariants"].values())
        sample = fault["samples"][0]
        assert sample["injections"] and sample["calls"]
    assert report["component_hashes"]["invariants"]


def test_a_commit_blind_retry_is_blocked_for_its_duplicate(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = assay(
        tmp_path, capsys, sandbox.manifest("blind"), "ship_order_timeout_after_commit"
    )
    assert report["decision"] == "block"
    assert code == 1
    assert {"duplicate_effect", "unsafe_escape"} <= codes(report)
    failed = report["faults"][0]["invariants"]["duplicate_effect"]
    assert failed["failed"] >= 1 and failed["by_arm"]["intervention"] == 1


def test_a_claim_without_a_backing_effect_is_blocked_as_unverifiable(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _code, report = assay(tmp_path, capsys, sandbox.manifest("claimer"), "ship_order_partial_reply")
    assert report["decision"] == "block"
    assert "unverifiable_release" in codes(report)
    assert report["faults"][0]["invariants"]["unverifiable_release"]["failed"] >= 1


def test_the_careful_agent_over_the_stdio_proxy_and_stdio_servers_is_allowed(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = sandbox.manifest("careful", stdio=True, stdio_servers=True)
    _code, report = assay(tmp_path, capsys, manifest, "ship_order_timeout_after_commit")
    assert report["decision"] == "allow", report["reasons"]
    calls = report["faults"][0]["samples"][0]["calls"]
    assert any(c["fault"] == "ship_order_timeout_after_commit" for c in calls)


def test_an_oracle_blind_to_duplicates_makes_the_evidence_invalid_not_green(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Leaving out the duplicate-effect templates leaves an oracle that cannot see the fault's
    # predicted violation: the naive agent duplicates and nothing notices, so the careful
    # agent's clean result could not have been red. It holds instead of passing.
    manifest = sandbox.manifest("careful")
    manifest["invariants"]["builtin"] = ["wrong_subject", "unverifiable_release", "service_loss"]
    code, report = assay(tmp_path, capsys, manifest, "ship_order_timeout_after_commit")
    fault = report["faults"][0]
    assert fault["counterfactual"]["sensitivity"]["status"] == "invalid"
    assert "counterfactual_invalid" in codes(report)
    assert report["decision"] == "hold"
    assert code == 2
