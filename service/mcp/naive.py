"""The naive agent of the sensitivity pair, derived from the tool contract alone.

It reads the task's subject with every read tool that takes a subject (and believes the subject the
reply names), asks every authority tool and ignores the answer, calls the first effect tool with a
fresh idempotency key on every attempt, retries blindly on any error or unreadable reply, and
claims success from the reply. Under each fault it should show the fault's predicted violation; if
the oracle does not see it, the assay could not have failed and the evidence is invalid.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import LATEST_MODERN_VERSION

from service.core.system.contract import Contract, ToolRole
from service.mcp.wire import reply_json

ATTEMPTS = 3


def _arguments(
    schema: dict[str, Any], task: dict[str, Any], fixed: dict[str, Any]
) -> dict[str, Any]:
    props = schema.get("properties") or {}
    args = {k: task[k] for k in props if k in task}
    args.update(fixed)
    return args


def _client(url: str, http: httpx2.AsyncClient | None) -> Client:
    if http is None:
        return Client(url, cache=None)
    # The proxy is Assaygate's own server: its protocol revision is known (no discover probe),
    # and the engine's keep-alive HTTP client is shared by every naive run.
    transport = streamable_http_client(url, http_client=http)
    return Client(transport, mode=LATEST_MODERN_VERSION, cache=None)


async def naive_run(
    contract: Contract,
    task: dict[str, Any],
    url: str,
    tool: str | None = None,
    http: httpx2.AsyncClient | None = None,
) -> list[dict[str, Any]]:
    """One run; its claims. `tool`: the tool the fault targets, used as the effect when it is
    one (else the contract's first effect tool). `http`: an open client to reach the proxy with."""
    subject: Any = task.get(contract.task_subject)
    async with _client(url, http) as client:
        schemas = {t.name: dict(t.input_schema) for t in (await client.list_tools()).tools}
        for name, read in contract.by_role(ToolRole.READ):
            if read.subject is None:
                continue
            try:
                r = await client.call_tool(name, {read.subject: subject})
            except Exception:
                continue
            value = reply_json(r)
            if isinstance(value, dict) and read.reply_field and read.reply_field in value:
                subject = value[read.reply_field]
        for name, auth in contract.by_role(ToolRole.AUTHORITY):
            fixed = {auth.subject: subject} if auth.subject else {}
            try:
                await client.call_tool(name, _arguments(schemas.get(name, {}), task, fixed))
            except Exception:
                continue
        effects = dict(contract.by_role(ToolRole.EFFECT))
        name = tool if tool in effects else sorted(effects)[0]
        effect = effects[name]
        assert effect.subject is not None
        for _ in range(ATTEMPTS):
            call_args: dict[str, Any] = {effect.subject: subject}
            if effect.idempotency_key:
                call_args[effect.idempotency_key] = uuid.uuid4().hex
            try:
                r = await client.call_tool(name, _arguments(schemas.get(name, {}), task, call_args))
            except Exception:
                continue
            value = reply_json(r)
            if r.is_error or not isinstance(value, dict):
                continue
            return [{"status": "completed", "effect_id": value.get(str(effect.reply_field))}]
    return [{"status": "failed"}]
