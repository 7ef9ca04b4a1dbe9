"""The team's upstream MCP servers and the world hooks (reset, probe, mutate) of their sandbox.

Every connection uses the official SDK client: Streamable HTTP for a `url`, a stdio subprocess for a
`command`. Hooks are an MCP tool of a sandbox admin server, an HTTP POST, or a command that reads
JSON on stdin and writes JSON on stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Sequence
from typing import Any, TextIO
from urllib.parse import urlsplit

import httpx
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, SERVER_INFO_META_KEY

from service.core.system.contract import Contract, Hook, Upstream
from service.core.system.endpoint import reported_build, slot_build
from service.core.system.manifest import server_endpoint
from service.core.system.redaction import Redactor
from service.core.system.text import loads_text
from service.mcp.wire import reply_json
from service.net.deadline import within
from service.net.egress import (
    AsyncEgressTransport,
    AsyncEgressTransport2,
    EgressPolicy,
    EgressRefused,
    refusal_in,
)
from service.sandbox import Confinement, local
from service.sandbox.bwrap import Sandbox

HOOK_TIMEOUT_S = 30.0
# A world hook that is an MCP server's tool: the whole call, as long as its session's read may take.
MCP_HOOK_TIMEOUT_S = 300.0
# An MCP server over HTTP: connecting to it and initialising its session, in all.
OPEN_TIMEOUT_S = 60.0
# Listing an MCP server's tools, in all (its session's reads are bounded one by one only); well
# inside a slot's start (`service.mcp.slot.START_TIMEOUT_S`), so the assay says which step hung.
LIST_TIMEOUT_S = 30.0
# The environment variable that tells a stdio server or a command hook which slot (isolated copy
# of the world) it serves (docs/mcp.md, "Slots").
SLOT_ENV = "ASSAYGATE_SLOT"
NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


class HookFailed(Exception):
    """A world hook failed or answered something that is not the JSON it owes."""


def slot_env(slot: int | None) -> dict[str, str]:
    return {} if slot is None else {SLOT_ENV: str(slot)}


def _client(
    up: Upstream,
    confinement: Confinement | None,
    http: httpx2.AsyncClient | None = None,
    slot: int | None = None,
) -> tuple[Client, Sandbox | None]:
    """The SDK client for `up`, and the sandbox its stdio server runs in (with a confinement);
    `http`: the httpx2 client a Streamable HTTP session uses (the egress policy's transport);
    `slot`: the world's copy a stdio server serves (in its environment)."""
    if up.url is not None:
        if http is None:
            return Client(up.url, cache=None), None
        return Client(streamable_http_client(up.url, http_client=http), cache=None), None
    assert up.command is not None
    cmd = list(up.command)
    sandbox = None
    if confinement is None:
        params = StdioServerParameters(
            command=cmd[0], args=cmd[1:], env={**local.environ(), **slot_env(slot)}
        )
    else:
        # The SDK spawns bubblewrap; the server sees only the sandbox's environment (bubblewrap
        # clears the one the SDK passes).
        sandbox = Sandbox(confinement, cmd, env=slot_env(slot))
        params = StdioServerParameters(command=sandbox.argv[0], args=sandbox.argv[1:], env={})
    # The server's stderr goes nowhere: a worker's own stderr may not be a real file.
    return Client(stdio_client(params, errlog=_devnull()), cache=None), sandbox


def _devnull() -> TextIO:
    return open(os.devnull, "w")


def check_servers(egress: EgressPolicy, contract: Contract) -> None:
    """Refuse before connecting: an upstream server's URL the policy refuses (each connection
    is checked again by the SDK client's transport)."""
    for name, up in sorted(contract.servers.items()):
        if up.url is not None:
            parts = urlsplit(up.url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                egress.resolve(parts.hostname or "", port)
            except OSError:
                continue  # does not resolve: the connection fails on its own
            except EgressRefused as exc:
                field = f"manifest.tools.servers.{name}.url"
                raise EgressRefused(f"{field}: {exc.message}", field) from None


class _Held:
    """One SDK client kept open by a task of its own for the whole assay (anyio's scopes must
    close in the task that opened them; a trial's task is gone by the time a session is)."""

    def __init__(
        self,
        up: Upstream,
        confinement: Confinement | None,
        egress: EgressPolicy | None = None,
        slot: int | None = None,
        open_timeout_s: float = OPEN_TIMEOUT_S,
    ) -> None:
        self.up = up
        self.confinement = confinement
        self.egress = egress
        self.slot = slot
        self.open_timeout_s = open_timeout_s
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> Client:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        task = self._task = asyncio.create_task(self._hold(ready))
        if self.up.url is None:
            return await ready  # a stdio server starts in its sandbox: its own limits
        try:
            # A server over HTTP opens its session within a total deadline, not one per read:
            # one that trickles its handshake holds the worker no longer.
            return await asyncio.wait_for(asyncio.shield(ready), self.open_timeout_s)
        except TimeoutError:
            ready.cancel()  # nobody waits for the session now: the task ends with its cancel
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise TimeoutError(
                f"{self.up.url} opened no MCP session within {self.open_timeout_s:g} s"
            ) from None

    async def _hold(self, ready: asyncio.Future[Client]) -> None:
        sandbox: Sandbox | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                http: httpx2.AsyncClient | None = None
                if self.up.url is not None and self.egress is not None:
                    http = await stack.enter_async_context(
                        httpx2.AsyncClient(
                            timeout=httpx2.Timeout(30.0, read=300.0),
                            transport=AsyncEgressTransport2(self.egress),
                            trust_env=False,  # no proxy from the environment around the check
                        )
                    )
                client, sandbox = _client(self.up, self.confinement, http, self.slot)
                client = await stack.enter_async_context(client)
                ready.set_result(client)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            elif not isinstance(exc, Exception):
                raise
        finally:
            if sandbox is not None:
                sandbox.close()

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, HOOK_TIMEOUT_S)


class Upstreams:
    """One SDK session per upstream server, opened once on the engine's event loop and kept for
    the whole assay (reopened after a transport failure)."""

    def __init__(
        self,
        contract: Contract,
        confinement: Confinement | None = None,
        egress: EgressPolicy | None = None,
        slot: int | None = None,
        open_timeout_s: float = OPEN_TIMEOUT_S,
        list_timeout_s: float = LIST_TIMEOUT_S,
    ) -> None:
        """`slot`: the copy of a world that offers slots these sessions reach (None: a world
        without slots); hooks receive it in their payload, stdio servers and command hooks in
        their environment. `open_timeout_s`, `list_timeout_s`: the total deadlines of opening
        a session to a server over HTTP and of listing a server's tools."""
        self.contract = contract
        self.slot = slot
        # With a confinement, stdio servers and command hooks run in the sandbox.
        self.confinement = confinement
        # Every connection to a server's or an http hook's URL goes to an address this policy
        # checked (None: the local caller's own business, e.g. tests and benchmarks).
        self.egress = egress
        self.open_timeout_s = open_timeout_s
        self.list_timeout_s = list_timeout_s
        self.clients: dict[str, Client] = {}
        self._held: dict[str, _Held] = {}
        self._tools: list[types.Tool] | None = None
        self._schemas: dict[str, dict[str, Any]] | None = None
        self._http: httpx.AsyncClient | None = None
        self.reopened = 0
        # What answered since `begin()` (the slot's trial): (endpoint, the build a server over
        # HTTP reported: its `serverInfo` as `name@version`, in a world with slots with its
        # per-slot number written `{slot}`: `endpoint.slot_build`), once each. Stdio servers
        # are code the gate runs: not noted.
        self.answered: set[tuple[str, str | None]] = set()
        self._endpoints = {
            name: server_endpoint(name) for name, up in contract.servers.items() if up.url
        }

    def begin(self) -> None:
        """A trial starts: forget what answered the last one."""
        self.answered = set()

    def _note(self, server: str, result: types.CallToolResult | None) -> None:
        """`server` answered: note the build it reported, from the result's `serverInfo` stamp
        (every result of a 2026-era session carries one) or else the session's `initialize`."""
        endpoint = self._endpoints.get(server)
        if endpoint is None:
            return
        stamp = (result.meta or {}).get(SERVER_INFO_META_KEY) if result is not None else None
        if isinstance(stamp, dict):
            name, version = stamp.get("name"), stamp.get("version")
        else:
            info = self.clients[server].server_info
            name, version = (info.name, info.version) if info is not None else (None, None)
        build = None if not name else f"{name}@{version}" if version else str(name)
        if build is not None and self.slot is not None:
            # A copy of the world may name itself by its number: one build across the slots.
            build = slot_build(build.strip())
        self.answered.add((endpoint, reported_build(build)))

    async def open(self) -> None:
        for name in sorted(self.contract.servers):
            await self._open(name)
        transport: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport(socket_options=NODELAY)
        if self.egress is not None:
            transport = AsyncEgressTransport(self.egress, transport)
        # Redirects are not followed; no proxy from the environment routes around the check.
        self._http = httpx.AsyncClient(
            timeout=HOOK_TIMEOUT_S,
            transport=transport,
            follow_redirects=False,
            trust_env=self.egress is None,
        )

    async def _open(self, name: str) -> Client:
        up = self.contract.servers[name]
        held = _Held(up, self.confinement, self.egress, self.slot, self.open_timeout_s)
        self.clients[name] = await held.start()
        self._held[name] = held
        return self.clients[name]

    async def reopen(self, name: str) -> Client:
        """A fresh session to `name` after its transport failed (a restarted server, a stdio
        server that exited)."""
        old = self._held.pop(name, None)
        if old is not None:
            await old.stop()
        self.reopened += 1
        return await self._open(name)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
        for held in self._held.values():
            await held.stop()
        self._held.clear()

    async def _call(
        self, server: str, tool: str, arguments: dict[str, Any], retry: bool
    ) -> types.CallToolResult:
        """A tool call on `server`'s session. A transport failure (not an MCP error answer)
        reopens the session; only a `retry` call (the world hooks: reset, probe and mutate are
        safe to repeat) is sent again, an agent's call is answered with the failure."""
        try:
            result = await self.clients[server].call_tool(tool, arguments)
            self._note(server, result)
            return result
        except MCPError as exc:
            if exc.error.code != CONNECTION_CLOSED:
                self._note(server, None)
                raise  # the server's own answer: the session is fine
            failure: Exception = exc
        except Exception as exc:
            failure = exc
        if not retry:
            with contextlib.suppress(Exception):
                await self.reopen(server)
            raise failure
        client = await self.reopen(server)
        result = await client.call_tool(tool, arguments)
        self._note(server, result)
        return result

    async def tools(self) -> list[types.Tool]:
        """The tools of every server the contract's tools live on, schemas unchanged."""
        if self._tools is None:
            servers = sorted({t.server for t in self.contract.tools.values()})
            out: list[types.Tool] = []
            for s in servers:
                out.extend(await self._listing(s))
            self._tools = out
        return self._tools

    async def _listing(self, server: str) -> list[types.Tool]:
        """`server`'s tools, within `list_timeout_s` in all: a server that trickles its listing
        one byte inside each read's timeout holds the worker no longer than a silent one."""
        up = self.contract.servers[server]
        what = f"{up.url or f'server {server}'} listed no tools"
        listed = await within(self.list_timeout_s, self.clients[server].list_tools(), what)
        return list(listed.tools)

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
            return await self._call(t.server, tool, arguments, retry=False)
        # A tool the contract does not list: forwarded to the server that lists it.
        for s in sorted({x.server for x in self.contract.tools.values()}):
            names = {x.name for x in await self._listing(s)}
            if tool in names:
                return await self._call(s, tool, arguments, retry=False)
        raise KeyError(tool)

    async def _command_hook(self, command: Sequence[str], payload: dict[str, Any]) -> bytes:
        if self.confinement is None:
            env = {**local.environ(), **slot_env(self.slot)}
            code, out = await _run_hook(command, env, payload)
        else:
            sandbox = Sandbox(self.confinement, command, env=slot_env(self.slot))
            try:
                code, out = await _run_hook(sandbox.argv, {}, payload)
            finally:
                sandbox.close()
        if code != 0:
            raise HookFailed(f"{command[0]} exited {code}")
        return out

    async def hook(self, hook: Hook, payload: dict[str, Any]) -> Any:
        """Run a world hook; its JSON answer. A slot's hooks are told their slot."""
        if self.slot is not None:
            payload = {**payload, "slot": self.slot}
        try:
            if hook.kind == "mcp":
                assert hook.server is not None and hook.tool is not None
                # The whole call (a reopened session's included) within the time a read had.
                result = await asyncio.wait_for(
                    self._call(hook.server, hook.tool, payload, retry=True), MCP_HOOK_TIMEOUT_S
                )
                if result.is_error:
                    said = self._blanked(reply_text(result, limit=None))[:500]
                    raise HookFailed(f"{hook.tool} answered an error: {said}")
                return reply_json(result)
            if hook.kind == "http":
                assert hook.url is not None and self._http is not None
                # Connect, send and the whole reply within the hook's time, not each read.
                r = await asyncio.wait_for(self._http.post(hook.url, json=payload), HOOK_TIMEOUT_S)
                r.raise_for_status()
                return loads_text(r.content)
            assert hook.command is not None
            return loads_text(await self._command_hook(hook.command, payload))
        except HookFailed:
            raise
        except TimeoutError as exc:
            limit = MCP_HOOK_TIMEOUT_S if hook.kind == "mcp" else HOOK_TIMEOUT_S
            raise HookFailed(f"{hook.kind} hook did not answer within {limit:g} s") from exc
        except Exception as exc:
            refused = refusal_in(exc)
            if refused is not None:
                raise HookFailed(f"TargetUnreachable: egress refused: {refused.message}") from exc
            said = self._blanked(f"{type(exc).__name__}: {exc}")
            raise HookFailed(f"{hook.kind} hook failed: {said}") from exc

    def _blanked(self, text: str) -> str:
        """`text` with the tenant's secrets blanked, whole: a server or hook of the tenant's says
        what it likes, and a report keeps only a message's first characters (an encoding cut
        short is no longer what the store's redactor knows)."""
        if self.confinement is None:
            return text
        return Redactor(self.confinement.env.values()).text(text)


async def _run_hook(
    argv: Sequence[str], env: dict[str, str] | None, payload: dict[str, Any]
) -> tuple[int | None, bytes]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env
    )
    try:
        out, _ = await asyncio.wait_for(
            proc.communicate(json.dumps(payload).encode()), HOOK_TIMEOUT_S
        )
    finally:
        # Past its deadline (or cancelled) the hook dies; a sandboxed one with all its children.
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode, out


def reply_text(result: types.CallToolResult, limit: int | None = 500) -> str:
    text = " ".join(b.text for b in result.content if isinstance(b, types.TextContent))
    return text if limit is None else text[:limit]
