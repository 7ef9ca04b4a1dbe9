"""Three agents of the warehouse team, each a command Assaygate starts once per run.

They read the task JSON on stdin, talk MCP to the URL in ASSAYGATE_MCP_URL (or, with --stdio, launch
`assaygate mcp-proxy` and talk to it over stdio), and print one claim JSON on stdout.

With --lines (the command runner's `protocol: "lines"`) the process stays warm: it reads one
`{"task", "mcp_url"}` JSON line per run and prints one claim line, keeping its event loop and
keep-alive HTTP client across runs.

    careful   binds the subject, checks authority, re-reads before the effect, uses the task's
              action id as the idempotency key, reads every effect back, denies on revocation
    blind     commit-blind retry: a fresh key on every attempt, retries on any error
    claimer   claims a shipment it never made

A real agent asks a model before each step. `WAREHOUSE_MODEL_MS=200` makes each tool call wait
that long first (a simulated model turn, for bench/agent_latency.py); every claim reports the
run's usage, `{"tokens": TOKENS_PER_STEP per call, "cost": ...}`, as a model-backed agent would,
for the assay's spend and budgets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import ssl
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

import httpx2
import uvloop
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

# The protocol revision the proxy speaks: pinning it skips the server/discover probe per run.
PROTOCOL = "2026-07-28"
# One TLS context per process: an HTTP client built per run would load the CA bundle each time
# (about 15 ms, more than the rest of a run's client setup).
_TLS = ssl.create_default_context()
_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
# A simulated model: tokens a step's turn uses and their price (USD per token).
TOKENS_PER_STEP = 250
PRICE_PER_TOKEN = 2e-6
# The steps of the run in progress (one list per run, so threads of the python runner keep apart).
_STEPS: ContextVar[list[int] | None] = ContextVar("steps", default=None)


def model_ms() -> float:
    try:
        return max(0.0, float(os.environ.get("WAREHOUSE_MODEL_MS", "0")))
    except ValueError:
        return 0.0


async def metered(agent: Any, client: Client, task: dict[str, Any]) -> dict[str, Any]:
    """Run `agent` and add the run's usage to its claim."""
    steps = [0]
    _STEPS.set(steps)
    claim: dict[str, Any] = await agent(client, task)
    tokens = steps[0] * TOKENS_PER_STEP
    claim["usage"] = {"tokens": tokens, "cost": round(tokens * PRICE_PER_TOKEN, 6)}
    return claim


@asynccontextmanager
async def connect(url: str, http: httpx2.AsyncClient | None = None) -> AsyncIterator[Client]:
    """An MCP client session over Streamable HTTP, cheap to open once per run; on `http` (a
    keep-alive client of the caller's) when given, else on a client of its own."""
    async with contextlib.AsyncExitStack() as stack:
        if http is None:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(verify=_TLS, timeout=_TIMEOUT)
            )
        transport = streamable_http_client(url, http_client=http)
        yield await stack.enter_async_context(Client(transport, mode=PROTOCOL, cache=None))


def reply(r: Any) -> Any:
    if r.is_error:
        return None
    if r.structured_content is not None:
        return r.structured_content
    for block in r.content:
        text = getattr(block, "text", None)
        if text is not None:
            try:
                return json.loads(text)
            except ValueError:
                return None
    return None


async def call(client: Client, tool: str, args: dict[str, Any]) -> Any:
    steps = _STEPS.get()
    if steps is not None:
        steps[0] += 1
    wait = model_ms()
    if wait:
        await asyncio.sleep(wait / 1000)  # the model deciding this step
    try:
        return reply(await client.call_tool(tool, args))
    except Exception:
        return None


async def careful(client: Client, task: dict[str, Any]) -> dict[str, Any]:
    order_id, key = task["order_id"], task["action_id"]
    trace = f"00-{random.getrandbits(128):032x}-{random.getrandbits(64):016x}-01"
    order = None
    for _ in range(3):  # bind identity: the reply must be about the task's order
        order = await call(client, "get_order", {"order_id": order_id})
        if isinstance(order, dict) and order.get("order_id") == order_id:
            break
    else:
        return {
            "status": "held",
            "reason": "the order read does not match the task",
            "anomaly": True,
        }
    stock = await call(client, "get_stock", {"sku": order["sku"]})
    grant = await call(client, "check_release", {"order_id": order_id})
    if not (isinstance(grant, dict) and grant.get("released") is True):
        await call(client, "log_event", {"order_id": order_id, "event": "denied", "trace": trace})
        return {"status": "denied", "reason": "not released"}
    if task["action"] == "ship":
        done = await call(client, "find_shipment", {"key": key})
        if isinstance(done, dict) and done.get("found"):  # an earlier run of this task shipped
            await call(client, "log_event", {"order_id": order_id, "event": "done", "trace": trace})
            return {"status": "completed", "effect_id": done["shipment_id"]}
    # Re-read right before the effect: the state it relies on must still hold.
    fresh = await call(client, "get_order", {"order_id": order_id})
    stock = await call(client, "get_stock", {"sku": order["sku"]})
    if not isinstance(fresh, dict) or fresh.get("status") != "open":
        await call(client, "log_event", {"order_id": order_id, "event": "denied", "trace": trace})
        return {"status": "denied", "reason": "the order changed before the effect"}
    del stock
    effect_id = None
    for attempt in range(8):
        if task["action"] == "ship":
            r = await call(
                client,
                "ship_order",
                {"order_id": order_id, "quantity": task["quantity"], "key": key},
            )
            back = await call(client, "find_shipment", {"key": key})  # read every effect back
            if isinstance(back, dict) and back.get("found"):
                if back.get("order_id") == order_id:
                    effect_id = back["shipment_id"]
                    break
        else:
            r = await call(
                client, "issue_credit", {"order_id": order_id, "amount": task["amount"], "key": key}
            )
            if isinstance(r, dict) and r.get("credit_id") and r.get("order_id") == order_id:
                effect_id = r["credit_id"]
                break
        # Rate limited or failed: back off with full jitter (the key makes the retry safe).
        await asyncio.sleep(random.uniform(0, 0.05 * 2**attempt))
    if effect_id is None:
        return {"status": "failed", "reason": "no effect could be confirmed", "anomaly": True}
    await call(client, "log_event", {"order_id": order_id, "event": "done", "trace": trace})
    return {"status": "completed", "effect_id": effect_id}


async def blind(client: Client, task: dict[str, Any]) -> dict[str, Any]:
    order_id = task["order_id"]
    await call(client, "get_order", {"order_id": order_id})
    await call(client, "check_release", {"order_id": order_id})
    for attempt in range(4):
        key = f"{task['action_id']}-{attempt}"  # a new key per attempt: commit-blind
        if task["action"] == "ship":
            r = await call(
                client,
                "ship_order",
                {"order_id": order_id, "quantity": task["quantity"], "key": key},
            )
            if isinstance(r, dict) and "shipment_id" in r:
                return {"status": "completed", "effect_id": r["shipment_id"]}
        else:
            r = await call(
                client, "issue_credit", {"order_id": order_id, "amount": task["amount"], "key": key}
            )
            if isinstance(r, dict) and "credit_id" in r:
                return {"status": "completed", "effect_id": r["credit_id"]}
    return {"status": "failed"}


async def claimer(client: Client, task: dict[str, Any]) -> dict[str, Any]:
    await call(client, "get_order", {"order_id": task["order_id"]})
    return {"status": "completed", "effect_id": "S-" + task["action_id"]}


AGENTS = {"careful": careful, "blind": blind, "claimer": claimer}


async def main(name: str, stdio: bool) -> None:
    task = json.loads(sys.stdin.read())
    url = os.environ["ASSAYGATE_MCP_URL"]
    if stdio:
        server = StdioServerParameters(
            command=sys.executable,
            args=["-m", "service.cli", "mcp-proxy"],
            env={**os.environ, "ASSAYGATE_MCP_URL": url},
        )
        async with Client(server, cache=None) as client:
            claim = await metered(AGENTS[name], client, task)
    else:
        async with connect(url) as client:
            claim = await metered(AGENTS[name], client, task)
    print(json.dumps(claim), flush=True)


class _Worker(threading.local):
    """Per host thread: one event loop and one keep-alive HTTP client, kept across runs. Each run
    still opens its own MCP session on its trial's URL; what it no longer pays for is a new loop,
    a new HTTP client and a new TCP connection to the proxy."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
        self.http: httpx2.AsyncClient | None = None


_WORKER = _Worker()


def run(task: dict[str, Any], mcp_url: str, name: str = "careful") -> dict[str, Any]:
    """The python-runner entrypoint: `agents:run_careful` etc."""

    async def go() -> dict[str, Any]:
        if _WORKER.http is None:
            _WORKER.http = httpx2.AsyncClient(verify=_TLS, timeout=_TIMEOUT)
        async with connect(mcp_url, _WORKER.http) as client:
            return await metered(AGENTS[name], client, task)

    return _WORKER.runner.run(go())


def run_careful(task: dict[str, Any], mcp_url: str) -> dict[str, Any]:
    return run(task, mcp_url, "careful")


def run_blind(task: dict[str, Any], mcp_url: str) -> dict[str, Any]:
    return run(task, mcp_url, "blind")


def lines(name: str) -> None:
    """The warm loop: a run per stdin line, a claim line per run, until stdin closes."""
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        claim = run(request["task"], request["mcp_url"], name)
        sys.stdout.write(json.dumps(claim) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if "--lines" in sys.argv[2:]:
        lines(sys.argv[1])
    else:
        uvloop.run(main(sys.argv[1], "--stdio" in sys.argv[2:]))
