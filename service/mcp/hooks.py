"""The team's upstream MCP servers and the world hooks (reset, probe, mutate) of their sandbox.

Every connection uses the official SDK client: Streamable HTTP for a `url`, a stdio subprocess for a
`command`. Hooks are an MCP tool of a sandbox admin server, an HTTP POST, or a command that reads
JSON on stdin and writes JSON on stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
from contextlib import AsyncExitStack
from typing import Any, TextIO

import httpx
import mcp_types as types
from mcp import Client, StdioServerParameters, stdio_client

from service.core.contract import Contract, Hook, Upstream
from service.mcp.wire import reply_json

HOOK_TIMEOUT_S = 30.0


class HookFailed(Exception):
    """A world hook failed or answered something that is not the JSON it owes."""


def _client(up: Upstream) -> Client:
    if up.url is not None:
        return Client(up.url, cache=None)
    assert up.command is not None
    cmd = list(up.command)
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    # The server's stderr goes nowhere: a worker's own stderr may not be a real file.
    return Client(stdio_client(params, errlog=_devnull()), cache=None)


def _devnull() -> TextIO:
    return open(os.devnull, "w")


class Upstreams:
    """One open SDK client per upstream server, entered on the engine's event loop."""

    def __init__(self, contract: Contract) -> None:
        self.contract = contract
        self.clients: dict[str, Client] = {}
        self._stack = AsyncExitStack()
        self._tools: list[types.Tool] | None = None
        self._schemas: dict[str, dict[str, Any]] | None = None
        self._http: httpx.AsyncClient | None = None

    async def open(self) -> None:
        for name, up in sorted(self.contract.servers.items()):
            self.clients[name] = await self._stack.enter_async_context(_client(up))
        self._http = await self._stack.enter_async_context(
            httpx.AsyncClient(timeout=HOOK_TIMEOUT_S)
        )

    async def close(self) -> None:
        await self._stack.aclose()

    async def tools(self) -> list[types.Tool]:
        """The tools of every server the contract's tools live on, schemas unchanged."""
        if self._tools is None:
            servers = sorted({t.server for t in self.contract.tools.values()})
            out: list[types.Tool] = []
            for s in servers:
                out.extend((await self.clients[s].list_tools()).tools)
            self._tools = out
        return self._tools

    def input_schema(self, tool: str) -> dict[str, Any] | None:
        """A listed tool's input schema (None before the listing is fetched or for an unknown
        tool: the SDK then skips its header check, as when a listing fails)."""
        if self._schemas is None:
            if self._tools is None:
                return None
            self._schemas = {t.name: dict(t.input_schema) for t in self._tools}
        return self._schemas.get(tool)

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        t = self.contract.tools.get(tool)
        if t is not None:
            return await self.clients[t.server].call_tool(tool, arguments)
        # A tool the contract does not list: forwarded to the server that lists it.
        for s in sorted({x.server for x in self.contract.tools.values()}):
            names = {x.name for x in (await self.clients[s].list_tools()).tools}
            if tool in names:
                return await self.clients[s].call_tool(tool, arguments)
        raise KeyError(tool)

    async def hook(self, hook: Hook, payload: dict[str, Any]) -> Any:
        """Run a world hook; its JSON answer."""
        try:
            if hook.kind == "mcp":
                assert hook.server is not None and hook.tool is not None
                result = await self.clients[hook.server].call_tool(hook.tool, payload)
                if result.is_error:
                    raise HookFailed(f"{hook.tool} answered an error: {reply_text(result)}")
                return reply_json(result)
            if hook.kind == "http":
                assert hook.url is not None and self._http is not None
                r = await self._http.post(hook.url, json=payload)
                r.raise_for_status()
                return r.json()
            assert hook.command is not None
            proc = await asyncio.create_subprocess_exec(
                *hook.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            out, _ = await asyncio.wait_for(
                proc.communicate(json.dumps(payload).encode()), HOOK_TIMEOUT_S
            )
            if proc.returncode != 0:
                raise HookFailed(f"{hook.command[0]} exited {proc.returncode}")
            return json.loads(out)
        except HookFailed:
            raise
        except Exception as exc:
            raise HookFailed(f"{hook.kind} hook failed: {type(exc).__name__}: {exc}") from exc


def reply_text(result: types.CallToolResult) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, types.TextContent))[:500]
