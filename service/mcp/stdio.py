"""`assaygate mcp-proxy`: the proxy over stdio, for an agent that launches its tool server.

The agent starts this command as its MCP server (stdio). It relays every request, through the
official SDK on both sides, to the trial's Streamable HTTP proxy URL in `ASSAYGATE_MCP_URL` (the
command runner sets it), so faults, logs and receipts are the HTTP proxy's: one proxy, two doors.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

URL_ENV = "ASSAYGATE_MCP_URL"


async def serve(url: str) -> None:
    async with Client(url, cache=None) as upstream:

        async def list_tools(
            ctx: Any, params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            return await upstream.list_tools()

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return await upstream.call_tool(params.name, dict(params.arguments or {}))

        server = Server("assaygate-proxy", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


def main(url: str | None = None) -> int:
    target = url or os.environ.get(URL_ENV)
    if not target:
        raise SystemExit(f"assaygate mcp-proxy: set {URL_ENV} (the trial's proxy URL) or --url")
    anyio.run(serve, target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
