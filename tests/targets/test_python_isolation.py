"""A python target is an adversary in its own process: it cannot reach the world it is graded on.

The tamper agents (tests/targets/agents/tamper.py) duplicate a refund on `timeout_after_commit`,
then hunt for the sandbox's `World` and `Injector` by one route each and, if they find them, delete
the duplicate, forge a readback receipt and erase the record that the fault fired. Called in the
assay's own process (the control), every route works; as a `python` target, none may.
"""

from __future__ import annotations

import importlib
import inspect
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from assaygate.host import RemoteTools
from service.core.compiled import HOT_MODULES
from service.core.faults.catalogue import FaultSpec
from service.core.trial.harness import Runtime, run_trial
from service.core.trial.record import TrialRecord
from service.core.trial.sandbox import Tools
from service.core.trial.target import Target, ToolPort
from service.targets import PythonTarget, close_target, load_target
from tests.targets.conftest import ROOT, assay, example, fault, plan

MODE = "timeout_after_commit"
ROUTES = ["via_attributes", "via_slots_and_dict", "via_gc", "via_modules", "via_frames"]
FORGED = "forged by the agent"


def _compiled_core() -> bool:
    import service.core.trial.world as world

    return not world.__file__.endswith(".py") and len(HOT_MODULES) > 0


def entrypoint(route: str) -> str:
    return f"tests.targets.agents.tamper:{route}"


def one_trial(target: Target, entry: str, key: int = 1) -> TrialRecord:
    manifest = example("typed", kind="python", entrypoint=entry)
    p = plan(1, MODE)
    spec: FaultSpec = p.faults()[0]
    return run_trial(Runtime(manifest, p.resolve_catalogue(), target), spec, key, key + 1)


def found(rec: TrialRecord) -> dict[str, Any]:
    """What the tamper agent saved about its hunt: the counts of worlds and injectors it reached."""
    return dict(rec.world.checkpoints["run-1"][-1])


def duplicates(rec: TrialRecord) -> int:
    return len(rec.world.ledger)


@pytest.fixture
def target(request: pytest.FixtureRequest) -> Any:
    """The python target for the test's route, closed after the test."""
    adapter = load_target(example("typed", kind="python", entrypoint=entrypoint(request.param)))
    yield adapter
    close_target(adapter)


PURE_CONTROL = "ASSAYGATE_TEST_PURE_CONTROL"


@pytest.fixture(scope="module")
def pure_core(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch copy of `service/` without the compiled modules: the pure-Python build."""
    scratch = tmp_path_factory.mktemp("pure-core")
    shutil.copytree(
        ROOT / "service",
        scratch / "service",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", ".compiled.json"),
    )
    return scratch


def control_in_the_pure_core(route: str, core: Path) -> None:
    """Run this control for `route` in a child whose `service` is the pure build (as the
    compiled-core test runs the core's tests against the other build)."""
    node = (
        f"{Path(__file__)}::test_control_the_same_agent_in_the_assay_process_erases_its_duplicate"
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--import-mode=append",
            "-rA",
            "--junitxml",
            str(core / f"{route}.xml"),
            f"{node}[{route}]",
        ],
        env={**os.environ, "PYTHONPATH": str(core), PURE_CONTROL: "1"},
        cwd=core,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    # One test ran there and passed: not skipped, not deselected.
    report = ET.parse(core / f"{route}.xml").getroot().find("testsuite")
    assert report is not None
    assert (report.get("tests"), report.get("skipped"), report.get("failures")) == ("1", "0", "0")


@pytest.mark.parametrize("route", ROUTES)
def test_control_the_same_agent_in_the_assay_process_erases_its_duplicate(
    route: str, request: pytest.FixtureRequest
) -> None:
    """In-process, the attack works: this is what the isolation must prevent."""
    if route in ("via_modules", "via_frames") and _compiled_core():
        # Compiled classes and frames are invisible to gc and frame walks, so in this process
        # the two routes find nothing; the control runs where they do, against the pure build.
        if os.environ.get(PURE_CONTROL):
            pytest.fail("the child was to import the pure core and imported the compiled one")
        control_in_the_pure_core(route, request.getfixturevalue("pure_core"))
        return
    agent = getattr(importlib.import_module("tests.targets.agents.tamper"), route)
    rec = one_trial(agent, entrypoint(route))
    assert found(rec)["worlds"] >= 1
    assert duplicates(rec) == 1  # the second refund was deleted from the ledger
    assert FORGED in {r.detail for r in rec.world.evidence}


@pytest.mark.parametrize(
    ("route", "target"), [(r, r) for r in ROUTES], indirect=["target"], ids=ROUTES
)
def test_a_python_target_hunting_the_world_finds_nothing_and_the_duplicate_stands(
    route: str, target: PythonTarget
) -> None:
    rec = one_trial(target, entrypoint(route))
    assert rec.target_error is None
    assert found(rec) == {"stage": "tamper", "worlds": 0, "injectors": 0}
    assert duplicates(rec) == 2
    assert FORGED not in {r.detail for r in rec.world.evidence}
    assert rec.exercised and rec.receipts  # the record of the firing survived


@pytest.mark.parametrize(
    ("route", "target"), [(r, r) for r in ROUTES], indirect=["target"], ids=ROUTES
)
def test_a_python_target_that_tries_to_delete_its_duplicate_is_blocked_for_it(
    route: str, target: PythonTarget
) -> None:
    manifest = example("typed", kind="python", entrypoint=entrypoint(route))
    report = assay(manifest, plan(8, MODE), target)
    entry = fault(report, MODE)
    assert entry["target_errors"] == 0
    assert entry["signature"]["counts"]["duplicate_effect"] == 8
    assert report["decision"] == "block"
    assert "duplicate_effect" in {r["code"] for r in report["reasons"]}


def test_the_callable_gets_the_target_interface_with_its_signatures_and_nothing_else() -> None:
    def methods(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in vars(cls).items()
            if not name.startswith("_") and inspect.isfunction(member)
        }

    # ToolPort is the interface; the sandbox's Tools (compiled or not) implements exactly it.
    core = methods(ToolPort)
    assert set(core) >= {"refund", "respond", "checkpoint_save", "new_trace", "request_id"}
    assert {n for n in dir(Tools) if not n.startswith("_")} >= set(core)
    assert methods(RemoteTools) == core
    tools = RemoteTools("http://127.0.0.1:9", "0" * 32)
    public = {n for n in dir(tools) if not n.startswith("_")}
    assert public == set(core)  # no world, no injector, no armed spec, no trace
    assert not hasattr(tools, "__dict__")


def test_the_child_process_is_gone_after_close_target() -> None:
    adapter = load_target(example("typed", kind="python", entrypoint=entrypoint("via_gc")))
    assert isinstance(adapter, PythonTarget)
    assert adapter.pid is None  # started on first use, not at load
    one_trial(adapter, entrypoint("via_gc"))
    pid = adapter.pid
    assert pid is not None and pid != os.getpid()
    assert os.path.exists(f"/proc/{pid}")
    close_target(adapter)
    assert adapter.pid is None
    with pytest.raises(ProcessLookupError):  # terminated and reaped: not even a zombie
        os.kill(pid, 0)


def test_the_assay_process_never_imports_the_user_module() -> None:
    entry = "tests.targets.agents.misbehaving:chatty"
    adapter = load_target(example("typed", kind="python", entrypoint=entry))
    try:
        rec = one_trial(adapter, entry)
    finally:
        close_target(adapter)
    # It printed on stdout at import and per task; the host's report line was not confused.
    assert rec.target_error is None
    assert [c.status for c in rec.world.claims] == ["denied"]
    assert "tests.targets.agents.misbehaving" not in sys.modules


def test_the_child_cannot_read_the_assay_process_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAYGATE_DATABASE_URL", "postgresql://assaygate:secret@db/assaygate")
    entry = "tests.targets.agents.misbehaving:snoops"
    adapter = load_target(example("typed", kind="python", entrypoint=entry))
    try:
        rec = one_trial(adapter, entry)
    finally:
        close_target(adapter)
    assert rec.world.checkpoints["run-1"][-1] == {"stage": "snoop", "leaked": []}


def test_an_exception_the_callable_raises_is_a_target_error_naming_it() -> None:
    entry = "tests.targets.agents.misbehaving:raises"
    adapter = load_target(example("typed", kind="python", entrypoint=entry))
    try:
        rec = one_trial(adapter, entry)
    finally:
        close_target(adapter)
    assert rec.target_error == "TargetRaised: ValueError: no refunds on a Tuesday"


def test_a_child_that_dies_mid_assay_gives_target_errors_with_the_cause_and_one_restart() -> None:
    entry = "tests.targets.agents.misbehaving:dies"
    adapter = load_target(example("typed", kind="python", entrypoint=entry))
    assert isinstance(adapter, PythonTarget)
    try:
        errors = [one_trial(adapter, entry, key).target_error for key in range(1, 5)]
        starts = adapter.starts
    finally:
        close_target(adapter)
    assert errors[0] == (
        "TargetUnreachable: the python target's process died during the task (exit code 3)"
    )
    assert errors[1] == errors[0]  # the restarted host died the same way
    assert (
        errors[2]
        == errors[3]
        == (
            "TargetUnreachable: the python target's process died (exit code 3); "
            "it was already restarted once"
        )
    )
    assert starts == 2


@pytest.mark.parametrize(
    ("manifest", "callable_"),
    [("typed", "run"), ("typed-repair", "typed_repair"), ("baseline", "baseline")],
)
def test_the_reference_workflow_as_a_python_target_matches_the_reference_on_every_fault(
    manifest: str, callable_: str
) -> None:
    """Every tool, typed error, trace id, crash and fork crosses the process boundary intact."""
    entry = f"tests.targets.agents.typed:{callable_}"
    as_python = example(manifest, kind="python", entrypoint=entry)
    full = plan(3)
    reference = assay(example(manifest), full)
    adapter = load_target(as_python)
    try:
        child = assay(as_python, full, adapter)
    finally:
        close_target(adapter)

    def outcomes(report: dict[str, Any]) -> dict[str, Any]:
        return {
            f["id"]: (f["exercised"], f["signature"]["counts"], f["baseline"], f["counterfactual"])
            for f in report["faults"]
        }

    assert outcomes(child) == outcomes(reference)
    assert child["decision"] == reference["decision"]
    assert all(f["target_errors"] == 0 for f in child["faults"])


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """The process has exited (reaped, or a zombie awaiting a reaper that is not ours)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rpartition(")")[2].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


ASSAY_PROCESS = """
import os, signal, sys
from service.core.trial.harness import Runtime, run_trial
from tests.targets.conftest import example, plan
from service.targets import load_target
manifest = example("typed", kind="python", entrypoint="tests.targets.agents.tamper:via_gc")
target = load_target(manifest)
p = plan(1, "timeout_after_commit")
run_trial(Runtime(manifest, p.resolve_catalogue(), target), p.faults()[0], 1, 2)
print(target.pid, flush=True)
if sys.argv[1] == "killed":
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("end", ["exits", "killed"])
def test_the_child_process_does_not_outlive_an_assay_process_that_never_closed_it(
    end: str,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", ASSAY_PROCESS, end],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    pid = int(done.stdout.split()[0])
    assert _gone(pid), f"the python host {pid} outlived its assay process ({end})"
