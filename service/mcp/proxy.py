"""Assaygate's MCP proxy: the agent's only way to its tools during a trial.

One low-level SDK `Server` serves Streamable HTTP at `/t/{token}/mcp`: the token names one run of
the agent in one trial. It lists the upstream servers' tools with their schemas unchanged and
forwards each call to the team's sandbox server, applying the armed fault by the tool's role in the
contract (`HANDLERS`, one per MCP registry entry). Every call is logged for the invariants; a
receipt is written (through the core's `Injector`) only after a disturbance took effect.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError

from service.core.faults.catalogue import FaultSpec
from service.core.faults.disturbance import Disturbance
from service.core.faults.injector import Injector
from service.core.system.contract import Contract, ToolRole
from service.core.system.egress import GATE_LOOPBACK_HOST
from service.mcp.cost import MAX_CALLS
from service.mcp.forwards import REQUEST_TIMEOUT, answered, effect_record
from service.mcp.hooks import Upstreams
from service.mcp.limiter import Limiter
from service.mcp.wire import json_reply, reply_json, text_reply
from service.mcp.witness import Forwarded

__all__ = ["DRAIN_S", "REQUEST_TIMEOUT", "Limiter", "Proxy", "TrialState"]

INVALID_REQUEST = -32600
# How long the proxy waits, after the agent's last run, for forwards still in flight before it
# cancels them and the world is probed: a call the agent abandoned may still commit, and one that
# commits after the probe is seen by no witness.
DRAIN_S = 5.0


@dataclass
class TrialState:
    """What the proxy knows of one trial: the fault, the calls of every run, what fired."""

    target: str | None
    contract: Contract
    injector: Injector
    subject: str
    others: list[str]
    mutate: Callable[[], Awaitable[None]] | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)
    first_replies: dict[str, types.CallToolResult] = field(default_factory=dict)
    limiter: Limiter | None = None
    storm_spec: FaultSpec | None = None
    # Storm observations of the graded run: attempt times, the attempt admitted.
    storm_attempts: list[float] = field(default_factory=list)
    storm_admitted: int | None = None
    read_done: bool = False
    crashed: threading.Event = field(default_factory=threading.Event)
    # The proxy's own record of every effect call it forwarded, in every run, with what the
    # server answered: the second witness the probed world must agree with (service.mcp.witness).
    forwarded_effects: list[Forwarded] = field(default_factory=list)
    # Upstream calls not answered yet; after `drain` nothing more is forwarded.
    inflight: set[asyncio.Future[types.CallToolResult]] = field(default_factory=set)
    drained: bool = False
    step: int = 0

    def tick(self) -> int:
        self.step += 1
        return self.step

    async def drain(self, timeout_s: float = DRAIN_S) -> None:
        """Let the upstream calls still in flight answer, for at most `timeout_s`, then cancel
        the rest: the world is probed next, and a call answered later would never be graded. A
        cancelled effect call stays `pending`, which the witness counts as a disagreement."""
        self.drained = True
        if not self.inflight:
            return
        _done, late = await asyncio.wait(set(self.inflight), timeout=timeout_s)
        for call in late:
            call.cancel()
        if late:
            await asyncio.wait(late, timeout=1.0)


@dataclass
class Run:
    trial: TrialState
    number: int
    dead: bool = False


Forward = Callable[[], Awaitable[types.CallToolResult]]
Handler = Callable[
    [TrialState, Run, FaultSpec, dict[str, Any], Forward], Awaitable[types.CallToolResult | None]
]


def _settled(t: TrialState, call: asyncio.Future[types.CallToolResult]) -> None:
    t.inflight.discard(call)
    if not call.cancelled():
        call.exception()  # retrieved here: the agent that asked may have hung up


def _timeout(message: str) -> MCPError:
    return MCPError(REQUEST_TIMEOUT, message)


def _fire(trial: TrialState, spec: FaultSpec, call: dict[str, Any]) -> None:
    trial.injector.fire(spec, f"{call['tool']}#{call['seq']}", trial.tick())
    call["fault"] = spec.id


async def _timeout_before_send(
    t: TrialState, r: Run, spec: FaultSpec, call: dict[str, Any], fwd: Forward
) -> types.CallToolResult | None:
    _fire(t, spec, call)
    raise _timeout("request timed out")


async def _timeout_after_commit(
    t: TrialState, r: Run, spec: FaultSpec, call: dict[str, Any], fwd: Forward
) -> types.CallToolResult | None:
    result = await fwd()
    if result.is_error:  # nothing committed: the disturbance did not take effect
        return result
    _fire(t, spec, call)
    raise _timeout("request timed out")


async def _partial(
    t: TrialState, r: Run, spec: FaultSpec, call: dict[str, Any], fwd: Forward
) -> types.CallToolResult | None:
    result = await fwd()
    value = reply_json(result)
    field_ = t.contract.tools[call["tool"]].reply_field
    if result.is_error or not isinstance(value, dict) or field_ not in value:
        return result
    _fire(t, spec, call)
    return json_reply({k: v for k, v in value.items() if k != field_} | {"status": "ok"})


async def _malformed(
    t: TrialState, r: Run, spec: FaultSpec, call: dict[str, Any], fwd: Forward
) -> types.CallToolResult | None:
    result = await fwd()
    if result.is_error:
        return result
    _fire(t, spec, call)
    text = result.content[0].text if result.content and hasattr(result.content[0], "text") else ""
    return text_reply(str(text)[: max(1, len(str(text)) // 2)] + "\x00<!-- upstream 502 -->")


async def _reject(
    t: TrialState, r: Run, spec: FaultSpec, call: dict[str, Any], fwd: Forward
) -> types.CallToolResult | None:
    _fire(t, spec, call)
    return json_reply({"error": "rejected", "written": False, "retryable": True}, is_error=True)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p.title() for p in rest) + ("V2" if not rest else "")


async def _drift(
    t: TrialState, r: Run, spec: FaultSpec, call: dict[str, Any], fwd: Forward
) -> types.CallToolResult | None:
    result = await fwd()
    value = reply_json(result)
    if result.is_error or not isinstance(value, dict):
        return result
    _fire(t, spec, call)
    return json_reply(
        {_camel(k): (str(v) if isinstance(v, int | float) else v) for k, v in value.items()}
    )


async def _storm(
    t: TrialState, r: Run, spec: FaultSpec, call: dict[str, Any], fwd: Forward
) -> types.CallToolResult | None:
    assert t.limiter is not None
    now = time.monotonic()
    t.storm_attempts.append(now)
    if t.storm_admitted is not None:
        return await fwd()
    if t.limiter.admit(now):
        t.storm_admitted = len(t.storm_attempts)
        return await fwd()
    if spec.id not in t.injector.fired:
        _fire(t, spec, call)
    # The hint is the model's own: the wait that gets this run admitted, never a wait that would
    # be refused again.
    wait = t.limiter.retry_after_ms(now)
    return json_reply({"error": "rate_limited", "retry_after_ms": wait}, is_error=True)


async def _stale(
    t: TrialState, r: Run, spec: FaultSpec, call: dict[str, Any], fwd: Forward
) -> types.CallToolResult | None:
    first = t.first_replies.get(call["tool"])
    if first is None:
        result = await fwd()
        t.first_replies[call["tool"]] = result
        return result
    _fire(t, spec, call)
    return first


async def _swap(
    t: TrialState, r: Run, spec: FaultSpec, call: dict[str, Any], fwd: Forward
) -> types.CallToolResult | None:
    result = await fwd()
    value = reply_json(result)
    field_ = t.contract.tools[call["tool"]].reply_field
    if result.is_error or not isinstance(value, dict) or field_ not in value:
        return result
    other = next((s for s in t.others if s != value[field_]), f"{value[field_]}-other")
    _fire(t, spec, call)
    return json_reply({**value, str(field_): other})


def _authority(status: str) -> Handler:
    async def handler(
        t: TrialState, r: Run, spec: FaultSpec, call: dict[str, Any], fwd: Forward
    ) -> types.CallToolResult | None:
        result = await fwd()
        value = reply_json(result)
        field_ = t.contract.tools[call["tool"]].reply_field
        if result.is_error or not isinstance(value, dict) or not value.get(str(field_)):
            return result  # already refused: nothing to revoke
        _fire(t, spec, call)
        call["granted"] = False
        return json_reply({**value, str(field_): False, "status": status})

    return handler


async def _drop(
    t: TrialState, r: Run, spec: FaultSpec, call: dict[str, Any], fwd: Forward
) -> types.CallToolResult | None:
    _fire(t, spec, call)
    call["forwarded"] = False
    return json_reply({"ok": True})


async def _strip(
    t: TrialState, r: Run, spec: FaultSpec, call: dict[str, Any], fwd: Forward
) -> types.CallToolResult | None:
    trace = t.contract.tools[call["tool"]].trace
    if trace is None or trace not in call["arguments"]:
        return None
    call["arguments"].pop(trace)
    _fire(t, spec, call)
    return await fwd()


async def _checkpoint(
    t: TrialState, r: Run, spec: FaultSpec, call: dict[str, Any], fwd: Forward
) -> types.CallToolResult | None:
    result = await fwd()
    if result.is_error:
        return result
    _fire(t, spec, call)
    r.dead = True
    t.crashed.set()
    raise _timeout("connection lost: the agent run was restarted")


_M = "mcp.effect"
HANDLERS: dict[tuple[str, Disturbance, str], Handler] = {
    (_M, Disturbance.TIMEOUT, "before_send"): _timeout_before_send,
    (_M, Disturbance.TIMEOUT, "after_commit_before_receipt"): _timeout_after_commit,
    (_M, Disturbance.PARTIAL_REPLY, "after_commit_before_receipt"): _partial,
    (_M, Disturbance.MALFORMED_REPLY, "after_commit_before_receipt"): _malformed,
    (_M, Disturbance.REJECT, "before_commit"): _reject,
    (_M, Disturbance.DRIFT_SCHEMA, "after_commit_before_receipt"): _drift,
    (_M, Disturbance.RATE_LIMIT_STORM, "before_commit"): _storm,
    ("mcp.read", Disturbance.STALE_REPLAY, "after_first_read"): _stale,
    ("mcp.read", Disturbance.SWAP_SUBJECT, "during_context_assembly"): _swap,
    ("mcp.authority", Disturbance.REVOKE_GRANT, "after_approval_before_effect"): _authority(
        "revoked"
    ),
    ("mcp.authority", Disturbance.EXPIRE_GRANT, "after_approval_before_effect"): _authority(
        "expired"
    ),
    ("mcp.evidence", Disturbance.DROP_WRITE, "after_effect"): _drop,
    ("mcp.evidence", Disturbance.STRIP_TRACE, "between_authority_and_tool"): _strip,
    ("mcp.state", Disturbance.CRASH_AND_ROLLBACK, "after_checkpoint"): _checkpoint,
    # Applied by the engine around the runs, not at a call: a second run, the mutate hook.
    ("mcp.state", Disturbance.FORK_RUN, "second_run"): None,  # type: ignore[dict-item]
    ("mcp.state", Disturbance.ADVANCE_VERSION, "after_read_before_write"): None,  # type: ignore[dict-item]
}


class Proxy:
    """The proxy's HTTP server, on the engine's event loop, and its runs by token."""

    def __init__(self, upstreams: Upstreams) -> None:
        self.upstreams = upstreams
        self.runs: dict[str, Run] = {}
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        # The input schema lookup answers the transport's per-call `Mcp-Param-*` header check
        # from the upstream listing cached at start; without it the SDK runs the whole tools/list
        # handler (and serialises every schema) once per proxied call.
        self.mcp = Server(
            "assaygate-proxy",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            get_tool_input_schema=self.upstreams.input_schema,
        )

    async def start(self) -> None:
        await self.upstreams.tools()  # the listing every run is served, fetched once
        # The SDK's DNS-rebinding guard, for the gate's own loopback address as well.
        names = ("127.0.0.1", "localhost", "[::1]", GATE_LOOPBACK_HOST)
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{n}:*" for n in names],
            allowed_origins=[f"http://{n}:*" for n in names],
        )
        app = self.mcp.streamable_http_app(
            streamable_http_path="/t/{token}/mcp",
            stateless_http=True,
            json_response=True,
            transport_security=security,
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The gate's own loopback address: no egress allowance reaches another trial's proxy.
        sock.bind((GATE_LOOPBACK_HOST, 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            await asyncio.sleep(0.01)
            if self._task.done():
                self._task.result()

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task

    def open_run(self, trial: TrialState, number: int) -> str:
        token = secrets.token_urlsafe(18)
        self.runs[token] = Run(trial, number)
        return token

    def close_run(self, token: str) -> None:
        self.runs.pop(token, None)

    def url(self, token: str) -> str:
        return f"http://{GATE_LOOPBACK_HOST}:{self.port}/t/{token}/mcp"

    def _run_of(self, ctx: Any) -> Run:
        request = getattr(ctx, "request", None)
        path = str(request.url.path) if request is not None else ""
        parts = path.strip("/").split("/")
        run = self.runs.get(parts[1]) if len(parts) >= 3 and parts[0] == "t" else None
        if run is None:
            raise MCPError(-32602, "unknown or finished trial")
        return run

    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._run_of(ctx)
        return types.ListToolsResult(tools=await self.upstreams.tools())

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        run = self._run_of(ctx)
        return await self.call(run, params.name, dict(params.arguments or {}))

    async def call(self, run: Run, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        t = run.trial
        if run.dead:
            raise _timeout("connection lost: the agent run was restarted")
        if len(t.calls) >= MAX_CALLS:
            # The invariants' cost is priced for at most MAX_CALLS calls (service/mcp/cost.py).
            raise MCPError(
                INVALID_REQUEST, f"this trial's limit of {MAX_CALLS} tool calls is reached"
            )
        tool = t.contract.tools.get(name)
        role = tool.role if tool is not None else None
        call: dict[str, Any] = {
            "seq": len(t.calls),
            "run": run.number,
            "tool": name,
            "role": role.value if role is not None else "unknown",
            "arguments": dict(arguments),
            "forwarded": False,
            "granted": True,
            "error": None,
            "fault": None,
            "reply": None,
        }
        t.calls.append(call)

        async def forward() -> types.CallToolResult:
            if t.drained:
                raise _timeout("the trial is over: nothing more is forwarded")
            call["forwarded"] = True
            upstream = asyncio.ensure_future(self.upstreams.call(name, call["arguments"]))
            t.inflight.add(upstream)
            upstream.add_done_callback(lambda done: _settled(t, done))
            if role is ToolRole.EFFECT and tool is not None:
                record = effect_record(run.number, call, tool)
                t.forwarded_effects.append(record)
                upstream.add_done_callback(lambda done: answered(record, tool, done))
            # Shielded: an agent that hangs up does not cancel the server's work under it; the
            # drain waits for it (or cancels it) before the probe.
            return await asyncio.shield(upstream)

        try:
            result = await self._apply(t, run, call, role, forward)
        except MCPError as exc:
            call["error"] = exc.error.message
            raise
        except KeyError:
            call["error"] = "unknown tool"
            raise MCPError(-32602, f"unknown tool {name!r}") from None
        value = reply_json(result)
        call["reply"] = value
        if result.is_error:
            call["error"] = call["error"] or "tool error"
        if role is ToolRole.AUTHORITY and tool is not None and call["fault"] is None:
            call["granted"] = bool(isinstance(value, dict) and value.get(str(tool.reply_field)))
        if role is ToolRole.READ and not t.read_done:
            t.read_done = True
            spec = t.injector.take("mcp.state")
            if (
                spec is not None
                and spec.disturbance is Disturbance.ADVANCE_VERSION
                and t.mutate is not None
            ):
                await t.mutate()
                _fire(t, spec, call)
        return result

    async def _apply(
        self,
        t: TrialState,
        run: Run,
        call: dict[str, Any],
        role: ToolRole | None,
        forward: Forward,
    ) -> types.CallToolResult:
        if role is None:
            return await forward()
        if t.storm_spec is not None and call["tool"] == t.storm_spec.target:
            result = await _storm(t, run, t.storm_spec, call, forward)
            assert result is not None
            return result
        boundary = "mcp." + role.value
        spec = t.injector.take(boundary, "any" if role is ToolRole.EVIDENCE else None)
        if spec is None:
            spec = t.injector.take("mcp.state")
            if spec is not None and spec.disturbance is not Disturbance.CRASH_AND_ROLLBACK:
                spec = None
        if spec is not None and spec.target == call["tool"]:
            handler = HANDLERS.get((spec.boundary, spec.disturbance, spec.phase))
            if handler is not None:
                result = await handler(t, run, spec, call, forward)
                if result is not None:
                    return result
        return await forward()
