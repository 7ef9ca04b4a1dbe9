"""Warehouse agents that differ from the careful example only in how they wait.

impatient  the careful agent, except that it gives up on a `ship_order` call after half a second
           and reads the shipment back instead: a call it abandoned may still be in flight (and
           commit) when the world is probed
hinted     checks authority, then calls the task's effect under the task's key and, when
           refused, waits exactly the `retry_after_ms` the refusal names (no jitter, no back-off
           of its own) before trying again; reads a shipment back and logs the decision

python paced.py impatient|hinted   (the task on stdin, the proxy in ASSAYGATE_MCP_URL)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "mcp-warehouse"))

from agents import call, careful, connect, metered, reply
from mcp import Client

PATIENCE_S = 0.5
ATTEMPTS = 8


class _Impatient:
    """The agent's MCP client, which stops waiting for a shipment after PATIENCE_S."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call_tool(self, tool: str, args: dict[str, Any]) -> Any:
        if tool == "ship_order":
            return await asyncio.wait_for(self.client.call_tool(tool, args), PATIENCE_S)
        return await self.client.call_tool(tool, args)


async def impatient(client: Client, task: dict[str, Any]) -> dict[str, Any]:
    return await careful(_Impatient(client), task)  # type: ignore[arg-type]


def _hint(result: Any) -> float | None:
    """The refusal's `retry_after_ms`, in seconds (None: no hint)."""
    if not result.is_error or result.structured_content is None:
        return None
    wait = result.structured_content.get("retry_after_ms")
    return wait / 1000 if isinstance(wait, int | float) else None


async def hinted(client: Client, task: dict[str, Any]) -> dict[str, Any]:
    order_id, key = task["order_id"], task["action_id"]
    trace = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    grant = await call(client, "check_release", {"order_id": order_id})
    if not (isinstance(grant, dict) and grant.get("released") is True):
        await call(client, "log_event", {"order_id": order_id, "event": "denied", "trace": trace})
        return {"status": "denied", "reason": "not released"}
    ship = task["action"] == "ship"
    tool, field = ("ship_order", "shipment_id") if ship else ("issue_credit", "credit_id")
    args = {"order_id": order_id, "key": key}
    args |= {"quantity": task["quantity"]} if ship else {"amount": task["amount"]}
    effect_id = None
    for _ in range(ATTEMPTS):
        result = await client.call_tool(tool, args)
        value = reply(result)
        if isinstance(value, dict) and value.get(field) and value.get("order_id") == order_id:
            effect_id = value[field]
            break
        wait = _hint(result)
        if wait is None:
            return {"status": "failed", "reason": "refused without a hint", "anomaly": True}
        await asyncio.sleep(wait)
    if effect_id is None:
        return {"status": "failed", "reason": "never admitted", "anomaly": True}
    if ship:
        back = await call(client, "find_shipment", {"key": key})
        if not (isinstance(back, dict) and back.get("shipment_id") == effect_id):
            return {"status": "failed", "reason": "the shipment did not read back"}
    await call(client, "log_event", {"order_id": order_id, "event": "done", "trace": trace})
    return {"status": "completed", "effect_id": effect_id}


AGENTS = {"impatient": impatient, "hinted": hinted}


async def main(name: str) -> None:
    task = json.loads(sys.stdin.read())
    async with connect(os.environ["ASSAYGATE_MCP_URL"]) as client:
        claim = await metered(AGENTS[name], client, task)
    print(json.dumps(claim), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
