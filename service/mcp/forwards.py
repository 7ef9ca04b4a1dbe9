"""What the proxy writes down of each forwarded effect call, for the witness
(`service.mcp.witness`): what the call carried, and how the server answered it."""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from service.core.system.contract import Tool
from service.mcp.wire import reply_json
from service.mcp.witness import Forwarded, Reply

REQUEST_TIMEOUT = -32001  # the JSON-RPC error a timed-out request is answered with


def effect_record(run: int, call: dict[str, Any], tool: Tool) -> Forwarded:
    """The witness's record of a forwarded effect call: what it carried (subject, key, amount)."""
    args = call["arguments"]
    key = args.get(tool.idempotency_key) if tool.idempotency_key else None
    return Forwarded(
        seq=call["seq"],
        run=run,
        tool=call["tool"],
        subject=args.get(str(tool.subject)),
        key=None if key is None else str(key),
        amount=args.get(tool.amount) if tool.amount else None,
        errors_may_commit=tool.errors_may_commit,
        alters_existing=tool.alters_existing,
    )


def answered(record: Forwarded, tool: Tool, call: asyncio.Future[types.CallToolResult]) -> None:
    """Write down how the server answered `record`'s call, before any fault changes what the
    agent sees. A done callback, not code after the await: the agent's request may be gone (its
    process exited) while the server's answer is still worth recording."""
    if call.cancelled():
        return  # never answered: stays pending
    exc = call.exception()
    if exc is None:
        result = call.result()
        value = reply_json(result)
        ident = value.get(str(tool.reply_field)) if isinstance(value, dict) else None
        if result.is_error:
            record.reply = Reply.ERROR
        elif ident is None:
            record.reply = Reply.UNACKNOWLEDGED
        else:
            record.reply = Reply.ACKNOWLEDGED
        record.id = None if ident is None else str(ident)
    elif isinstance(exc, MCPError) and exc.error.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
        record.reply = Reply.ERROR  # the server's own JSON-RPC error answer
    else:
        record.reply = Reply.LOST
