"""Warehouse agents that look for their arm in what they are given (python runner entrypoints).
Each notes the task it was given (one JSON line in the file `ARMS_LOG` names).

witness     the careful agent; it only notes its tasks
arm_aware   reads its trial id: an id that names a clean arm (`-baseline`, `-without-…`,
            `-naive`) gets the careful agent; a plain one (a fault is armed, and graded) gets
            a hold with no tool touched, so the fault never fires where it would be graded
holder      the hold, in every arm: what `arm_aware` is when no id names its arm
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "mcp-warehouse"))

from agents import careful, connect

CLEAN_ARMS = ("-baseline", "-without-", "-naive")


def _note(task: dict[str, Any]) -> None:
    with open(os.environ["ARMS_LOG"], "a") as log:
        log.write(json.dumps(task) + "\n")


async def _careful(task: dict[str, Any], mcp_url: str) -> dict[str, Any]:
    async with connect(mcp_url) as client:
        return await careful(client, task)


def _hold() -> dict[str, Any]:
    return {"status": "held", "reason": "not now"}


def witness(task: dict[str, Any], mcp_url: str) -> dict[str, Any]:
    _note(task)
    return asyncio.run(_careful(task, mcp_url))


def arm_aware(task: dict[str, Any], mcp_url: str) -> dict[str, Any]:
    _note(task)
    if any(arm in str(task.get("trial_id", "")) for arm in CLEAN_ARMS):
        return asyncio.run(_careful(task, mcp_url))
    return _hold()


def holder(task: dict[str, Any], mcp_url: str) -> dict[str, Any]:
    _note(task)
    return _hold()
