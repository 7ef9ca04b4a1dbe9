"""The command runner kept warm (`protocol: "lines"`): one process serves run after run, and a
process that crashes, hangs or is crashed by a fault costs only its own run."""

from __future__ import annotations

import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from assaygate.frameworks import runner_for
from service.core.errors import ManifestInvalid
from service.core.system.manifest import Runner
from service.mcp.launch import make_runner
from service.mcp.lines import LinesRunner
from service.mcp.runners import CommandRunner
from tests.mcp.conftest import Sandbox

pytestmark = pytest.mark.timeout(120)

# A warm agent: answers each task line with its pid and the slot it serves; a task asking for it
# exits (a crash after writing to stderr) or hangs.
AGENT = """
import json, os, sys, time
for line in sys.stdin:
    request = json.loads(line)
    task = request["task"]
    if task.get("do") == "crash":
        print("RuntimeError: the model client fell over", file=sys.stderr, flush=True)
        sys.exit(3)
    if task.get("do") == "hang":
        time.sleep(60)
    claim = {"status": "completed", "effect_id": task["id"], "pid": os.getpid(),
             "slot": os.environ.get("ASSAYGATE_SLOT"), "url": request["mcp_url"]}
    print(json.dumps(claim), flush=True)
"""


@pytest.fixture
def runner(tmp_path: Path) -> LinesRunner:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    return LinesRunner((sys.executable, str(script)), slot=2)


def run(runner: LinesRunner, task: dict[str, str], deadline_s: float = 20.0) -> dict[str, object]:
    result = runner.run(task, "http://127.0.0.1:9/t/token/mcp", deadline_s, threading.Event())
    return {
        "claims": result.claims,
        "error": result.error,
        "timed_out": result.timed_out,
        "crashed": result.crashed,
    }


def test_one_warm_process_serves_every_run_of_its_slot(runner: LinesRunner) -> None:
    try:
        first = run(runner, {"id": "a"})
        second = run(runner, {"id": "b"})
    finally:
        runner.close()
    claims = [first["claims"][0], second["claims"][0]]  # type: ignore[index]
    assert [c["effect_id"] for c in claims] == ["a", "b"]
    assert claims[0]["pid"] == claims[1]["pid"]
    assert claims[0]["slot"] == "2"
    assert claims[0]["url"] == "http://127.0.0.1:9/t/token/mcp"
    assert runner.started == 1


def test_an_agent_crash_is_a_target_error_and_the_slot_gets_a_fresh_process(
    runner: LinesRunner,
) -> None:
    try:
        before = run(runner, {"id": "a"})
        crash = run(runner, {"id": "b", "do": "crash"})
        after = run(runner, {"id": "c"})
    finally:
        runner.close()
    assert crash["claims"] == []
    assert crash["error"] == (
        "TargetFailed: the agent process ended during the run (exit code 3): "
        "RuntimeError: the model client fell over"
    )
    assert after["error"] is None
    assert after["claims"][0]["effect_id"] == "c"  # type: ignore[index]
    assert after["claims"][0]["pid"] != before["claims"][0]["pid"]  # type: ignore[index]
    assert runner.started == 2


def test_a_run_past_its_deadline_is_killed_and_the_next_run_starts_fresh(
    runner: LinesRunner,
) -> None:
    try:
        hung = run(runner, {"id": "a", "do": "hang"}, deadline_s=1.0)
        after = run(runner, {"id": "b"})
    finally:
        runner.close()
    assert hung["timed_out"] is True
    assert hung["error"] == "TargetTimeout: the run passed its deadline"
    assert after["claims"][0]["effect_id"] == "b"  # type: ignore[index]
    assert runner.started == 2


def test_a_run_crashed_by_a_fault_kills_the_warm_process(runner: LinesRunner) -> None:
    crashed = threading.Event()
    crashed.set()
    try:
        result = runner.run({"id": "a", "do": "hang"}, "http://127.0.0.1:9/t/x/mcp", 20, crashed)
        after = run(runner, {"id": "b"})
    finally:
        runner.close()
    assert result.crashed
    assert after["claims"][0]["effect_id"] == "b"  # type: ignore[index]
    assert runner.started == 2


def test_the_protocol_picks_the_runner_and_belongs_to_command_runners_only() -> None:
    lines = Runner(kind="command", command=("agent",), protocol="lines")
    assert isinstance(make_runner(lines), LinesRunner)
    assert isinstance(make_runner(Runner(kind="command", command=("agent",))), CommandRunner)
    # At its default the protocol is not part of the target's hash: digests do not move.
    assert "protocol" not in Runner(kind="command", command=("agent",)).model_dump()
    with pytest.raises(ValueError, match="only a command runner has a protocol"):
        Runner(kind="http", url="http://127.0.0.1:9/agent", protocol="lines")


def test_a_manifest_giving_an_http_runner_a_protocol_is_refused_naming_the_field() -> None:
    import json

    from service.core.system.manifest import parse_manifest
    from tests.mcp.conftest import EXAMPLE

    data = json.loads((EXAMPLE / "manifest.careful.json").read_text())
    data["target"]["runner"] = {"kind": "http", "url": "http://127.0.0.1:9/a", "protocol": "lines"}
    with pytest.raises(ManifestInvalid) as caught:
        parse_manifest(data)
    assert caught.value.field is not None and caught.value.field.startswith("target.runner")


BUILDS: list[int] = []


def build_graph(tools: list[Any]) -> Any:
    """A LangGraph builder (the `module:attribute` a manifest may name instead of a compiled
    graph): one node that reads stock through the MCP tools it was built with."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    BUILDS.append(1)
    by_name = {t.name: t for t in tools}

    async def read(state: MessagesState) -> dict[str, Any]:
        stock = json.loads(await by_name["get_stock"].ainvoke({"sku": "SKU-1"}))
        return {"claim": {"status": "completed", "builds": len(BUILDS), "stock": stock}}

    class State(MessagesState):
        claim: dict[str, Any]

    graph = StateGraph(State)
    graph.add_node("read", read)
    graph.add_edge(START, "read")
    graph.add_edge("read", END)
    return graph.compile()


def test_a_langgraph_builder_is_built_once_per_host_and_serves_every_run(
    sandbox: Sandbox,
) -> None:
    one_trial = runner_for("langgraph", "tests.mcp.test_warm_runners:build_graph")
    # Two runs, each on a session of its own (as each run has its own proxy URL), on a thread of
    # their own as in the host process: this test process may hold another test's running loop.
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(one_trial, {"order_id": "x"}, sandbox.shop).result()
        second = pool.submit(one_trial, {"order_id": "y"}, sandbox.shop).result()
    assert first["builds"] == second["builds"] == 1
    assert second["stock"]["sku"] == "SKU-1"
