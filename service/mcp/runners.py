"""Agent runners: how one run of the team's agent is started against the proxy.

`command`: one process per run; the task JSON on stdin, the proxy URL in `ASSAYGATE_MCP_URL` (an
agent that wants stdio launches `assaygate mcp-proxy`, which reads the same variable), the claim
JSON on stdout (one object, or one object per line: each is a claim), a per-run deadline.
`http`: POST `{"task", "mcp_url"}` to the agent; the reply is the claim (or `{"claims": [...]}`).
`python`: `module:callable(task, mcp_url) -> claim`, served from a child process over the `http`
protocol (`python -m service.mcp.host`), so the agent never shares a process with the proxy.
`langgraph` / `openai-agents`: a graph or an `Agent` as `module:attribute`, served the same way
(`service.mcp.frameworks`, docs/frameworks.md).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from service.core.errors import ManifestInvalid
from service.core.manifest import Runner
from service.net.egress import EgressPolicy, EgressRefused, EgressTransport

URL_ENV = "ASSAYGATE_MCP_URL"


@dataclass
class RunResult:
    claims: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    timed_out: bool = False
    crashed: bool = False


class AgentRunner(Protocol):
    def run(
        self, task: dict[str, Any], url: str, deadline_s: float, crashed: threading.Event
    ) -> RunResult: ...

    def close(self) -> None: ...


def parse_claims(text: str) -> tuple[list[dict[str, Any]], str | None]:
    """Claims printed by an agent: one JSON object, or one per line. Anything else is an error."""
    text = text.strip()
    if not text:
        return [], None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    else:
        if isinstance(value, dict):
            return [value], None
        if isinstance(value, list) and all(isinstance(c, dict) for c in value):
            return list(value), None
        return [], "the agent printed JSON that is not a claim object"
    claims: list[dict[str, Any]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            item = json.loads(line)
        except ValueError:
            return claims, "the agent printed a line that is not JSON"
        if isinstance(item, dict):
            claims.append(item)
    return claims, None


def child_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    env[URL_ENV] = url
    return env


class CommandRunner:
    def __init__(self, command: tuple[str, ...]) -> None:
        self.command = list(command)

    def run(
        self, task: dict[str, Any], url: str, deadline_s: float, crashed: threading.Event
    ) -> RunResult:
        try:
            proc = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=child_env(url),
            )
        except OSError as exc:
            return RunResult(error=f"TargetUnreachable: {exc}")
        out: list[bytes] = []

        def talk() -> None:
            try:
                data, _ = proc.communicate(json.dumps(task).encode())
                out.append(data)
            except (OSError, ValueError):
                out.append(b"")

        th = threading.Thread(target=talk, daemon=True)
        th.start()
        end = time.monotonic() + deadline_s
        result = RunResult()
        while th.is_alive():
            th.join(0.005)
            if crashed.is_set():
                proc.kill()
                th.join()
                return RunResult(crashed=True)
            if time.monotonic() > end:
                proc.kill()
                th.join()
                return RunResult(error="TargetTimeout: the run passed its deadline", timed_out=True)
        claims, problem = parse_claims((out[0] if out else b"").decode("utf-8", "replace"))
        result.claims = claims
        if problem is not None:
            result.error = f"TargetFailed: {problem}"
        elif proc.returncode != 0:
            result.error = f"TargetFailed: exit code {proc.returncode}"
        return result

    def close(self) -> None:
        return None


NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


class HttpRunner:
    def __init__(self, url: str, egress: EgressPolicy | None = None) -> None:
        self.url = url
        # Keep-alive to the agent, without Nagle's delay on the request's second segment; every
        # request (redirects are not followed) to an address the egress policy checked.
        transport: httpx.BaseTransport = httpx.HTTPTransport(socket_options=NODELAY)
        if egress is not None:
            transport = EgressTransport(egress, transport)
        self._client = httpx.Client(
            transport=transport, follow_redirects=False, trust_env=egress is None
        )

    def run(
        self, task: dict[str, Any], url: str, deadline_s: float, crashed: threading.Event
    ) -> RunResult:
        try:
            r = self._client.post(self.url, json={"task": task, "mcp_url": url}, timeout=deadline_s)
        except httpx.TimeoutException:
            return RunResult(error="TargetTimeout: the run passed its deadline", timed_out=True)
        except EgressRefused as exc:
            return RunResult(error=f"TargetUnreachable: egress refused: {exc.message}")
        except (httpx.HTTPError, OSError) as exc:
            return RunResult(error=f"TargetUnreachable: {exc}")
        if crashed.is_set():
            return RunResult(crashed=True)
        if r.status_code >= 300:
            return RunResult(error=f"TargetFailed: HTTP {r.status_code}")
        claims, problem = parse_claims(r.text)
        if len(claims) == 1 and isinstance(claims[0].get("claims"), list):
            claims = [c for c in claims[0]["claims"] if isinstance(c, dict)]
        return RunResult(claims=claims, error=f"TargetFailed: {problem}" if problem else None)

    def close(self) -> None:
        self._client.close()


class PythonRunner(HttpRunner):
    """A callable in the team's code, served by a child process over the http runner protocol."""

    def __init__(self, entrypoint: str, framework: str | None = None) -> None:
        extra = [] if framework is None else ["--framework", framework]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service.mcp.host", *extra, entrypoint],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")},
                "PYTHONPATH": os.pathsep.join(dict.fromkeys(p or os.getcwd() for p in sys.path)),
            },
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        try:
            report = json.loads(line)
        except ValueError:
            report = {}
        if not report.get("url"):
            self.proc.kill()
            raise ManifestInvalid(
                str(report.get("error") or "the python runner did not start"),
                field="target.runner.entrypoint",
            )
        super().__init__(str(report["url"]))

    def close(self) -> None:
        super().close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def make_runner(spec: Runner, egress: EgressPolicy | None = None) -> AgentRunner:
    if spec.kind == "command":
        assert spec.command is not None
        return CommandRunner(spec.command)
    if spec.kind == "http":
        assert spec.url is not None
        return HttpRunner(spec.url, egress)
    assert spec.entrypoint is not None
    if spec.kind in ("langgraph", "openai-agents"):
        return PythonRunner(spec.entrypoint, framework=spec.kind)
    return PythonRunner(spec.entrypoint)
