"""A python target written against any import path the docs have named runs through the real
python target: the public `assaygate.target`, the earlier docs' `service.core.sandbox` (with its
deprecation said on the assay's stderr), and a team package that is itself named `service`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.sandbox import Confinement
from service.targets import load_target
from tests.targets.conftest import assay, example, fault, plan

# A careful agent: one refund keyed by the logical action, read back after a typed tool error.
AGENT = """
{imports}


def run(task: Task, tools: Tools) -> None:
    action_id = f"{{task.order_id}}:refund:{{task.run_id}}"
    order = tools.orders_read(task.order_id)
    if order is None or order["status"] != "eligible":
        tools.record("denial", action_id, None, None, "not eligible")
        tools.respond("denied", action_id, None)
        return
    action = tools.propose(task.order_id, task.tenant, task.grant_id, order["amount"])
    trace = tools.new_trace()
    tools.record("decision", action_id, trace, None, "refund")
    try:
        tools.refund(action["subject"], action["tenant"], action["amount"], action_id,
                     action_id, trace, action["grant_id"])
    except ToolError:
        pass
    found = tools.lookup(action_id)
    if not found:
        tools.record("failure", action_id, trace, None, "no ledger entry")
        tools.respond("failed", action_id, None)
        return
    ref = found[0]["id"]
    tools.record("effect", action_id, found[0]["trace_id"], ref, "ok")
    tools.record("readback", action_id, found[0]["trace_id"], ref, "read back")
    tools.respond("completed", action_id, ref)
"""
PUBLIC = "from assaygate.target import Task, ToolError, Tools"
EARLIER_DOCS = "from service.core.sandbox import Task, ToolError, Tools"


def _write(code: Path, module: str, imports: str) -> str:
    """The agent as `module` (dotted: its packages are made) under `code`; its entrypoint."""
    *packages, name = module.split(".")
    folder = code
    for package in packages:
        folder = folder / package
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    (folder / f"{name}.py").write_text(AGENT.format(imports=imports))
    return f"{module}:run"


def _assay(entrypoint: str, confinement: Confinement | None = None) -> dict[str, Any]:
    manifest = example("typed", kind="python", entrypoint=entrypoint)
    target = load_target(manifest, confinement=confinement)
    try:
        return assay(manifest, plan(3, "timeout_after_commit"), target)
    finally:
        target.close()  # type: ignore[union-attr]


def _ran_clean(report: dict[str, Any]) -> None:
    assert report["target_errors"]["total"] == 0, json.dumps(report["target_errors"])
    assert report["overall"]["trials"] == 3
    counts = fault(report, "timeout_after_commit")["signature"]["counts"]
    assert counts["duplicate_effect"] == 0


def test_a_target_written_against_the_public_package_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    _ran_clean(_assay(_write(tmp_path, "public_agent", PUBLIC)))


def test_a_target_written_against_the_earlier_docs_path_runs_and_is_told_it_is_deprecated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    _ran_clean(_assay(_write(tmp_path, "earlier_agent", EARLIER_DOCS)))
    err = capfd.readouterr().err
    assert "DeprecationWarning: service.core.sandbox is deprecated" in err, err
    assert "assaygate.target" in err


def test_a_team_package_named_service_is_the_teams_own_locally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As a team runs `assaygate assay` from its own folder: the host's path starts there.
    monkeypatch.chdir(tmp_path)
    _ran_clean(_assay(_write(tmp_path, "service.refunds.agent", PUBLIC)))


@pytest.mark.timeout(300)
def test_in_the_sandbox_the_deprecation_reaches_the_adapter_not_only_the_workers_stderr(
    tmp_path: Path,
) -> None:
    """A worker's stderr is no author's terminal: the adapter holds what the import said, and
    the worker records it in the assay's events (`target.deprecated`, issue 47)."""
    code = tmp_path / "code"
    code.mkdir(mode=0o755)
    entrypoint = _write(code, "earlier_agent", EARLIER_DOCS)
    target = load_target(
        example("typed", kind="python", entrypoint=entrypoint),
        confinement=Confinement(code_dir=code),
    )
    try:
        (said,) = target.deprecated  # type: ignore[union-attr]
    finally:
        target.close()  # type: ignore[union-attr]
    assert "earlier_agent.py:" in said
    assert "DeprecationWarning: service.core.sandbox is deprecated" in said
    clean = load_target(
        example("typed", kind="python", entrypoint=_write(code, "now", PUBLIC)),
        confinement=Confinement(code_dir=code),
    )
    try:
        assert clean.deprecated == ()  # type: ignore[union-attr]
    finally:
        clean.close()  # type: ignore[union-attr]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("package", ["service", "worker"])
def test_a_team_package_named_like_the_gates_is_the_teams_own_in_the_sandbox(
    tmp_path: Path, package: str
) -> None:
    code = tmp_path / "code"
    code.mkdir(mode=0o755)  # the sandbox's user reads it; pytest's tmp_path is the runner's only
    entrypoint = _write(code, f"{package}.refunds", PUBLIC)
    _ran_clean(_assay(entrypoint, Confinement(code_dir=code)))
