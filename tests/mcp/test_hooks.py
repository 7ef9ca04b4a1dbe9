"""World hooks run on the engine's own loop (uvloop, on a thread of its own): a command hook is a
real child process whose JSON answer comes back, and one that fails is a HookFailed naming why."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from service.core.system.contract import Hook
from service.core.system.manifest import contract_of, parse_manifest
from service.mcp.engine import Loop
from service.mcp.hooks import HookFailed, Upstreams
from tests.mcp.conftest import EXAMPLE

ECHO = "import sys, json; print(json.dumps({'task': json.load(sys.stdin)}))"


@pytest.fixture
def upstreams() -> Iterator[tuple[Loop, Upstreams]]:
    manifest = parse_manifest(json.loads((EXAMPLE / "manifest.careful.json").read_text()))
    loop = Loop()
    try:
        yield loop, Upstreams(contract_of(manifest))
    finally:
        loop.stop()


def test_a_command_reset_hook_answers_the_task_it_was_sent(
    upstreams: tuple[Loop, Upstreams],
) -> None:
    loop, up = upstreams
    hook = Hook(kind="command", command=(sys.executable, "-c", ECHO))
    answer = loop.run(up.hook(hook, {"seed": 7, "trial_id": "t-1"}), 30)
    assert answer == {"task": {"seed": 7, "trial_id": "t-1"}}


def test_a_command_hook_that_exits_non_zero_fails_naming_its_exit_code(
    upstreams: tuple[Loop, Upstreams],
) -> None:
    loop, up = upstreams
    hook = Hook(kind="command", command=(sys.executable, "-c", "raise SystemExit(3)"))
    with pytest.raises(HookFailed, match="exited 3"):
        loop.run(up.hook(hook, {}), 30)
