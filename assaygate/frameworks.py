"""Framework runners: a LangGraph graph or an OpenAI Agents SDK `Agent`, run once per trial with
its tools on the trial's MCP proxy (docs/frameworks.md).

Both are served like a `python` runner (`python -m assaygate.mcp_host --framework KIND TARGET`),
so the framework never shares a process with the proxy. Standard library only at import: the
framework, and for a graph the MCP SDK's client, are imported inside the run of the kind that
needs them, so the host of a plain `python` runner pays for neither.

The claim is the run's structured final output: the graph's final state `claim` (a dict), else
its last message's content as a JSON object; the agent's `final_output` (a dict, a pydantic
model, or a JSON object as text).
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import json
from collections.abc import Callable
from typing import Any

#: The config key under which a compiled graph finds the trial's tools.
TOOLS_KEY = "mcp_tools"
#: The MCP session of the run in progress: a graph built once (per host, i.e. per slot) calls its
#: tools through whichever run is current, so the graph need not be rebuilt for every run.
_SESSION: contextvars.ContextVar[Any] = contextvars.ContextVar("assaygate_mcp_session")
# Builders already run in this host: builder -> (its tools, the graph it built).
_BUILT: dict[int, tuple[list[Any], Any]] = {}
# The host's one TLS context, made on first use. The SDKs' default client per run made its own,
# loading the CA bundle every run: a tenth of all the CPU a framework agent's assay used.
_TLS: list[Any] = []


def http_client(headers: Any = None, timeout: Any = None, auth: Any = None) -> Any:
    """An HTTP client for one run's MCP session, as the MCP SDK's default one (its timeouts,
    the environment's trust store) but on the host's one TLS context; the factory both SDKs
    accept (`httpx_client_factory`)."""
    import httpx2

    if not _TLS:
        _TLS.append(httpx2.create_ssl_context())
    options: dict[str, Any] = {"verify": _TLS[0]}
    options["timeout"] = timeout if timeout is not None else httpx2.Timeout(30.0, read=300.0)
    if headers is not None:
        options["headers"] = headers
    if auth is not None:
        options["auth"] = auth
    return httpx2.AsyncClient(**options)


def load(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def claim_of(value: Any) -> dict[str, Any]:
    """A structured final output as a claim object; anything else is a malformed claim."""
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError("the final output is not a JSON claim object") from None
    if not isinstance(value, dict) or not isinstance(value.get("status"), str):
        raise ValueError("the final output is not a claim object with a status")
    return value


def _reply_text(result: Any) -> str:
    if result.is_error:
        texts = [getattr(b, "text", "") for b in result.content]
        return json.dumps({"error": " ".join(t for t in texts if t) or "tool error"})
    if result.structured_content is not None:
        return json.dumps(result.structured_content)
    texts = [getattr(b, "text", None) for b in result.content]
    return "\n".join(t for t in texts if t is not None)


async def langchain_tools(client: Any, current: bool = False) -> list[Any]:
    """The proxy's tools as LangChain tools, each calling the proxy through the MCP SDK: through
    `client`, or with `current` through the session of the run in progress (`_SESSION`)."""
    from langchain_core.tools import StructuredTool

    listed = await client.list_tools()
    tools = []
    for tool in listed.tools:

        async def call(_name: str = tool.name, **arguments: Any) -> str:
            session = _SESSION.get() if current else client
            try:
                return _reply_text(await session.call_tool(_name, arguments))
            except Exception as exc:  # a JSON-RPC error (a timeout, a refusal) is the reply
                return json.dumps({"error": str(exc)})

        tools.append(
            StructuredTool(
                name=tool.name,
                description=tool.description or tool.name,
                args_schema=dict(tool.input_schema),
                coroutine=call,
            )
        )
    return tools


async def _langgraph(target: Any, task: dict[str, Any], mcp_url: str) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        http_client() as http,
        Client(streamable_http_client(mcp_url, http_client=http), cache=None) as client,
    ):
        token = _SESSION.set(client)
        try:
            if hasattr(target, "ainvoke"):
                # A compiled graph finds the tools in its config.
                graph, tools = target, await langchain_tools(client)
            else:
                # A builder makes the graph with the tools once per host (one host per slot);
                # the tools call whichever run is current.
                built = _BUILT.get(id(target))
                if built is None:
                    tools = await langchain_tools(client, current=True)
                    built = _BUILT[id(target)] = (tools, target(tools))
                tools, graph = built
            state = await _invoke(graph, task, tools)
        finally:
            _SESSION.reset(token)
    messages = state.get("messages") if isinstance(state, dict) else None
    if isinstance(state, dict) and state.get("claim") is not None:
        return with_usage(claim_of(state["claim"]), _langgraph_usage(messages or []))
    if not messages:
        raise ValueError("the graph ended without a claim or a message")
    return with_usage(claim_of(messages[-1].content), _langgraph_usage(messages))


def with_usage(claim: dict[str, Any], tokens: int | None) -> dict[str, Any]:
    """The claim with the framework's token count as its `usage`, unless the agent reported its
    own (which may also carry a cost the framework does not know)."""
    if tokens is not None and "usage" not in claim:
        claim["usage"] = {"tokens": tokens}
    return claim


def _langgraph_usage(messages: list[Any]) -> int | None:
    """Total tokens over the run's model replies (LangChain's `usage_metadata` on AI messages)."""
    totals = [
        int(meta.get("total_tokens") or 0)
        for m in messages
        if isinstance(meta := getattr(m, "usage_metadata", None), dict)
    ]
    return sum(totals) if totals else None


async def _invoke(graph: Any, task: dict[str, Any], tools: list[Any]) -> Any:
    from langchain_core.messages import HumanMessage

    return await graph.ainvoke(
        {"messages": [HumanMessage(json.dumps(task))]},
        config={"configurable": {TOOLS_KEY: tools}, "recursion_limit": 200},
    )


async def _openai_agents(target: Any, task: dict[str, Any], mcp_url: str) -> dict[str, Any]:
    from agents import Runner
    from agents.mcp import MCPServerStreamableHttp

    server = MCPServerStreamableHttp(
        {"url": mcp_url, "httpx_client_factory": http_client},
        name="assaygate",
        client_session_timeout_seconds=30,
    )
    async with server:
        # The team's agent, with its MCP servers pointed at the trial's proxy.
        agent = target.clone(mcp_servers=[server])
        result = await Runner.run(agent, json.dumps(task), max_turns=200)
    usage = getattr(getattr(result, "context_wrapper", None), "usage", None)
    tokens = getattr(usage, "total_tokens", None)
    return with_usage(claim_of(result.final_output), tokens if isinstance(tokens, int) else None)


RUNS: dict[str, Callable[[Any, dict[str, Any], str], Any]] = {
    "langgraph": _langgraph,
    "openai-agents": _openai_agents,
}


def runner_for(kind: str, target: str) -> Callable[[dict[str, Any], str], dict[str, Any]]:
    """`callable(task, mcp_url) -> claim` for the host: the target loaded once, run per trial."""
    obj = load(target)
    run = RUNS[kind]

    def one_trial(task: dict[str, Any], mcp_url: str) -> dict[str, Any]:
        claim: dict[str, Any] = asyncio.run(run(obj, task, mcp_url))
        return claim

    return one_trial
