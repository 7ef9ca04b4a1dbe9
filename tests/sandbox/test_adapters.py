"""The adapters a worker uses, with their tenant code in the sandbox: they still work, through the
relays only (the warehouse example's real MCP servers, its agents, the copperfin python agents)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from service.core.faults.contract_catalogue import catalogue_for
from service.core.system.contract import Hook
from service.core.system.manifest import contract_of, parse_manifest
from service.mcp.engine import McpEngine
from service.mcp.hooks import Upstreams
from service.mcp.runners import PythonRunner
from service.sandbox import Confinement
from service.targets import load_target
from tests.mcp.conftest import EXAMPLE, ROOT, wait_port
from tests.sandbox.conftest import outlived
from tests.support.service import free_port
from tests.targets.conftest import assay, example, fault, plan

T = TypeVar("T")

pytestmark = pytest.mark.timeout(300)

WAREHOUSE = Confinement(code_dir=EXAMPLE, env={"TENANT_SECRET": "tenant-secret"})
# The copperfin agents and the framework examples import from the repository's root packages.
REPOSITORY = Confinement(code_dir=ROOT)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The warehouse's MCP servers over Streamable HTTP, outside the sandbox (the team's world)."""
    db = tmp_path_factory.mktemp("warehouse") / "world.db"
    shop, admin = free_port(), free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, str(EXAMPLE / "servers.py"), "http", "--db", str(db)),
            *("--shop-port", str(shop), "--admin-port", str(admin)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(shop)
        wait_port(admin)
        yield f"http://127.0.0.1:{shop}/mcp", f"http://127.0.0.1:{admin}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def warehouse(servers: tuple[str, str], **target: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLE / "manifest.careful.json").read_text())
    data["tools"]["servers"] = {"shop": {"url": servers[0]}, "admin": {"url": servers[1]}}
    data["target"].update(target)
    return data


def test_a_sandboxed_command_agent_releases_its_claim_through_the_relayed_proxy(
    servers: tuple[str, str],
) -> None:
    data = warehouse(servers)
    data["target"]["runner"]["command"] = [sys.executable, "agents.py", "careful"]
    manifest = parse_manifest(data)
    engine = McpEngine(manifest, catalogue_for(manifest), confinement=WAREHOUSE)
    try:
        for trial in (1, 2):
            result = engine.run_trial(None, trial, trial, frozenset(), False)
            assert result.outcome.verdict == "release", result.target_error
    finally:
        engine.close()


def test_a_sandboxed_framework_agent_is_served_by_its_python_host_through_the_relays(
    servers: tuple[str, str],
) -> None:
    data = json.loads((ROOT / "examples/frameworks/manifest.langgraph.careful.json").read_text())
    data["tools"]["servers"] = {"shop": {"url": servers[0]}, "admin": {"url": servers[1]}}
    manifest = parse_manifest(data)
    engine = McpEngine(manifest, catalogue_for(manifest), confinement=REPOSITORY)
    try:
        result = engine.run_trial(None, 1, 1, frozenset(), False)
        assert result.outcome.verdict == "release", result.target_error
        sandbox = getattr(engine.runner, "sandbox", None)
        assert sandbox is not None and sandbox.proc is not None
        # /bin/sh enters the seccomp filter and the cgroup, then becomes bubblewrap.
        assert sandbox.argv[0] == "/bin/sh" and "/usr/bin/bwrap" in sandbox.argv
    finally:
        engine.close()


def test_a_sandboxed_python_target_is_assayed_as_it_is_unconfined() -> None:
    manifest = example("typed", kind="python", entrypoint="tests.targets.agents.trusting:run")
    target = load_target(manifest, confinement=REPOSITORY)
    try:
        report = assay(manifest, plan(3, "partial_success_response"), target)
    finally:
        target.close()  # type: ignore[union-attr]
    counts = fault(report, "partial_success_response")["signature"]["counts"]
    assert counts["unverifiable_release"] == 3, report["target_errors"]


def test_a_sandboxed_python_target_past_its_deadline_is_a_timeout_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    marker = f"{time.time() % 1000:.6f}"
    (code / "sleeper.py").write_text(
        "import subprocess, time\n"
        "def run(task, tools):\n"
        f"    subprocess.Popen(['sleep', '{marker}'])\n"
        "    time.sleep(1000)\n"
    )
    manifest = example("typed", kind="python", entrypoint="sleeper:run")
    target = load_target(manifest, http_timeout_s=2.0, confinement=Confinement(code_dir=code))
    try:
        report = assay(manifest, plan(1, "timeout_before_send"), target)
        assert outlived(marker) == [], "the task's child outlived its deadline"
    finally:
        target.close()  # type: ignore[union-attr]
    errors = json.dumps(report["target_errors"])
    assert "TargetTimeout" in errors, errors


def test_a_sandboxed_stdio_server_answers_and_its_hooks_run(tmp_path: Path) -> None:
    data = warehouse(("http://unused", "http://unused"))
    run = [sys.executable, "servers.py"]
    # Each stdio server has its own sandbox and so its own /tmp: the world lives there.
    data["tools"]["servers"] = {
        "shop": {"command": [*run, "shop-stdio", "--db", "/tmp/world.db"]},
        "admin": {"command": [*run, "admin-stdio", "--db", "/tmp/world.db"]},
    }
    contract = contract_of(parse_manifest(data))

    async def use() -> tuple[list[str], Any, Any]:
        upstreams = Upstreams(contract, WAREHOUSE)
        await upstreams.open()
        try:
            names = [t.name for t in await upstreams.tools()]
            task = await upstreams.hook(contract.hooks.reset, {"seed": 1, "trial_id": "t-1"})
            probe = await upstreams.hook(contract.hooks.probe, {})
            env = await upstreams.hook(
                Hook(kind="command", command=(sys.executable, "-c", _PRINT_ENV)), {"ask": 1}
            )
            return names, (task, probe), env
        finally:
            await upstreams.close()

    names, (task, probe), env = in_a_thread(use())
    assert "ship_order" in names and "get_order" in names
    assert isinstance(task, dict) and isinstance(probe.get("effects"), list)
    assert env["payload"] == {"ask": 1}
    assert env["uid"] == 65534 and env["env"]["TENANT_SECRET"] == "tenant-secret"
    assert not [k for k in env["env"] if k.startswith("ASSAYGATE_")]


def in_a_thread(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on a loop of its own thread: an earlier test in this process may have left an
    event loop marked running on the main thread."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


_PRINT_ENV = (
    "import json, os, sys; print(json.dumps({'payload': json.load(sys.stdin),"
    " 'uid': os.getuid(), 'env': dict(os.environ)}))"
)


def test_a_sandboxed_command_hook_that_fails_is_named_by_its_exit_code() -> None:
    contract = contract_of(parse_manifest(warehouse(("http://a", "http://b"))))

    async def use() -> str:
        upstreams = Upstreams(contract, WAREHOUSE)
        try:
            await upstreams.hook(Hook(kind="command", command=("sh", "-c", "exit 7")), {})
        except Exception as exc:
            return str(exc)
        return "no failure"

    assert in_a_thread(use()) == "sh exited 7"


def test_a_sandboxed_python_runner_past_its_deadline_is_ended_and_serves_the_next_run_afresh(
    tmp_path: Path,
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    marker = f"{time.time() % 1000:.6f}"
    (code / "agent.py").write_text(
        "import subprocess, time\n"
        "def run(task, mcp_url):\n"
        "    if task.get('hang'):\n"
        f"        subprocess.Popen(['sleep', '{marker}'])\n"
        "        time.sleep(1000)\n"
        "    return {'status': 'done', 'task': task}\n"
    )
    runner = PythonRunner("agent:run", confinement=Confinement(code_dir=code))
    try:
        first = runner.sandbox
        hung = runner.run({"hang": True}, "http://127.0.0.1:9/mcp", 2.0, threading.Event())
        assert hung.timed_out and hung.error == "TargetTimeout: the run passed its deadline"
        assert outlived(marker) == [], "the run's child outlived its deadline"
        assert runner.sandbox is not first
        after = runner.run({"n": 2}, "http://127.0.0.1:9/mcp", 10.0, threading.Event())
        assert after.claims == [{"status": "done", "task": {"n": 2}}], after
    finally:
        runner.close()
