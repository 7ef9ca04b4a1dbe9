"""Helpers over the SDK types: the JSON a tool reply carries, and the replies the proxy makes."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from service.core.system.text import as_texts, loads_text


def reply_json(result: types.CallToolResult) -> Any:
    """The JSON value of a tool reply: its structured content, else its first text block parsed;
    None when there is none (or it does not parse). Its strings made text (`as_texts`)."""
    if result.structured_content is not None:
        return as_texts(result.structured_content)
    for block in result.content:
        if isinstance(block, types.TextContent):
            try:
                return loads_text(block.text)
            except ValueError:
                return None
    return None


def json_reply(value: Any, is_error: bool = False) -> types.CallToolResult:
    """A reply carrying `value` as JSON text (and as structured content when it is an object)."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(value, sort_keys=True))],
        structured_content=value if isinstance(value, dict) else None,
        is_error=is_error,
    )


def text_reply(text: str, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=is_error
    )
