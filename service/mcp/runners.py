"""Agent runners: how one run of the team's agent is started against the proxy.

`command` with `protocol: "lines"`: one warm process per slot (`LinesRunner`): a line
`{"task", "mcp_url"}` in per run, one claim line out; a process that dies or passes a run's deadline
is that run's target error and the next run gets a fresh one.
`command`: one process per run; the task JSON on stdin, the proxy URL in `ASSAYGATE_MCP_URL` (an
agent that wants stdio launches `assaygate mcp-proxy`, which reads the same variable), the claim
JSON on stdout (one object, or one object per line: each is a claim), a per-run deadline.
`http`: POST `{"task", "mcp_url"}` to the agent; the reply is the claim (or `{"claims": [...]}`).
`python`: `module:callable(task, mcp_url) -> claim`, served from a child process over the `http`
protocol (`python -m assaygate.mcp_host`), so the agent never shares a process with the proxy.
`langgraph` / `openai-agents`: a graph or an `Agent` as `module:attribute`, served the same way
(`assaygate.frameworks`, docs/frameworks.md). The host is the public package's, importing nothing
of `service`, so a team package of that name (or `worker`) is the team's own.

With a `Confinement` (a worker running a tenant's code) every process above runs in the sandbox
(`service.sandbox.bwrap`): a command per run, the python host for the runner's life; the proxy's
port is relayed in at the same address, so `ASSAYGATE_MCP_URL` is unchanged, and the host is
reached through an inbound relay. Without one (the local CLI) they run as the user's processes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from service.core.errors import ManifestInvalid
from service.core.system.endpoint import BUILD_HEADER, reported_build
from service.core.system.redaction import Redactor
from service.core.system.text import as_text, loads_text
from service.net.deadline import BoundedBackend, total
from service.net.egress import EgressPolicy, EgressRefused, EgressTransport
from service.sandbox import Confinement, local
from service.sandbox.bwrap import Sandbox

URL_ENV = "ASSAYGATE_MCP_URL"
# Which slot (isolated copy of the team's world) a run is in; set only when the world offers slots.
SLOT_ENV = "ASSAYGATE_SLOT"


@dataclass
class RunResult:
    claims: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    timed_out: bool = False
    crashed: bool = False
    # An http runner's agent answered (any status), and the build its `Assaygate-Build` header
    # named (None: none).
    replied: bool = False
    build: str | None = None


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
        value = loads_text(text)
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
            item = loads_text(line)
        except ValueError:
            return claims, "the agent printed a line that is not JSON"
        if isinstance(item, dict):
            claims.append(item)
    return claims, None


def slot_env(slot: int | None) -> dict[str, str]:
    return {} if slot is None else {SLOT_ENV: str(slot)}


def child_env(url: str, slot: int | None = None) -> dict[str, str]:
    """An unconfined run's environment (the local CLI, the user's own machine): the user's, but
    the gate's own settings, with `python` the interpreter running the gate (its virtualenv
    first on PATH, as in the sandbox), so a manifest's `["python", ...]` finds the same packages."""
    env = local.environ()
    here = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join([here, *(p for p in env.get("PATH", "").split(os.pathsep) if p)])
    env[URL_ENV] = url
    env.update(slot_env(slot))
    return env


def address_of(url: str) -> tuple[str, int]:
    """The host and port a sandbox must be able to reach for `url` (relayed at the same port)."""
    parts = urlsplit(url)
    if not parts.hostname or parts.port is None:
        raise ValueError(f"not a URL with a port: {url!r}")
    return parts.hostname, parts.port


class CommandRunner:
    def __init__(
        self,
        command: tuple[str, ...],
        confinement: Confinement | None = None,
        slot: int | None = None,
    ) -> None:
        self.command = list(command)
        self.confinement = confinement
        self.slot = slot

    def run(
        self, task: dict[str, Any], url: str, deadline_s: float, crashed: threading.Event
    ) -> RunResult:
        if self.confinement is None:
            try:
                proc = subprocess.Popen(
                    self.command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=child_env(url, self.slot),
                )
            except OSError as exc:
                return RunResult(error=f"TargetUnreachable: {exc}")
            return self._talk(proc, task, deadline_s, crashed)
        # One sandbox per run: whatever a run leaves behind dies with it.
        sandbox = Sandbox(
            self.confinement,
            self.command,
            env={URL_ENV: url, **slot_env(self.slot)},
            reach=[address_of(url)],
        )
        try:
            proc = sandbox.popen(
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            result = self._talk(proc, task, deadline_s, crashed)
            # A tree over its cgroup's memory lost a process to the kernel: the run failed, and
            # says why (whatever the rest of the tree then did).
            exceeded = sandbox.memory_exceeded()
            if exceeded is not None and not result.crashed:
                result.error, result.claims = f"TargetFailed: {exceeded}", []
            return result
        finally:
            sandbox.close()

    def _talk(
        self,
        proc: subprocess.Popen[bytes],
        task: dict[str, Any],
        deadline_s: float,
        crashed: threading.Event,
    ) -> RunResult:
        out: list[bytes] = []
        err: list[bytes] = []

        def talk() -> None:
            try:
                data, said = proc.communicate(json.dumps(task).encode())
                out.append(data)
                err.append(said or b"")
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
            why = last_line(err[0] if err else b"", self.confinement)
            result.error = f"TargetFailed: {_exit_text(proc.returncode)}" + (
                f": {why}" if why else ""
            )
        return result

    def close(self) -> None:
        return None


def redacted(text: str, confinement: Confinement | None) -> str:
    """`text` with every value of the confinement's environment (its secrets) blanked: what an
    agent says about its failure reaches reports and the signed dossier, and a secret never
    does."""
    if confinement is None:
        return text
    return Redactor(confinement.env.values()).text(text)


def last_line(stderr: bytes, confinement: Confinement | None) -> str:
    """The last line an agent wrote to stderr (its exception, as a rule), redacted, cut short."""
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    return redacted(lines[-1] if lines else "", confinement)[-240:]


def _exit_text(code: int) -> str:
    # The sandbox's inner launcher reports a signal as 128 + its number, as a shell does.
    if code < 0 or code > 128:
        return f"killed by signal {-code if code < 0 else code - 128}"
    return f"exit code {code}"


NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


class HttpRunner:
    # A black box's own: nothing of the tenant's to redact (a python host's runner has one).
    confinement: Confinement | None = None

    def __init__(self, url: str, egress: EgressPolicy | None = None) -> None:
        self.url = url
        # Keep-alive to the agent, without Nagle's delay on the request's second segment; every
        # request (redirects are not followed) to an address the egress policy checked.
        plain = httpx.HTTPTransport(socket_options=NODELAY)
        # Each connection's reads and writes count against the run's total deadline (`run`).
        plain._pool._network_backend = BoundedBackend(plain._pool._network_backend)
        transport: httpx.BaseTransport = plain
        if egress is not None:
            transport = EgressTransport(egress, transport)
        self._client = httpx.Client(
            transport=transport, follow_redirects=False, trust_env=egress is None
        )

    def run(
        self, task: dict[str, Any], url: str, deadline_s: float, crashed: threading.Event
    ) -> RunResult:
        try:
            # The deadline is the whole run's, not each read's: a runner trickling its reply
            # holds the worker no longer than a silent one.
            with total(deadline_s):
                r = self._client.post(
                    self.url, json={"task": task, "mcp_url": url}, timeout=deadline_s
                )
        except httpx.TimeoutException:
            return RunResult(error="TargetTimeout: the run passed its deadline", timed_out=True)
        except EgressRefused as exc:
            return RunResult(error=f"TargetUnreachable: egress refused: {exc.message}")
        except (httpx.HTTPError, OSError) as exc:
            return RunResult(error=f"TargetUnreachable: {exc}")
        build = reported_build(r.headers.get(BUILD_HEADER))
        if crashed.is_set():
            return RunResult(crashed=True, replied=True, build=build)
        if r.status_code >= 300:
            said = agent_said(r.text, self.confinement)
            failed = f"TargetFailed: HTTP {r.status_code}{said}"
            return RunResult(error=failed, replied=True, build=build)
        claims, problem = parse_claims(r.text)
        if len(claims) == 1 and isinstance(claims[0].get("claims"), list):
            claims = [c for c in claims[0]["claims"] if isinstance(c, dict)]
        error = f"TargetFailed: {problem}" if problem else None
        return RunResult(claims=claims, error=error, replied=True, build=build)

    def close(self) -> None:
        self._client.close()


def agent_said(body: str, confinement: Confinement | None) -> str:
    """What a failing agent said about it: the `error` of a JSON reply (the python and
    framework hosts answer `{"error": "Type: message"}`), else the start of its text;
    redacted."""
    try:
        value = loads_text(body)
    except ValueError:
        value = None
    text = str(value["error"]) if isinstance(value, dict) and "error" in value else as_text(body)
    text = redacted(" ".join(text.split()), confinement)[:240]
    return f": {text}" if text else ""


# The host lives in the public package: it imports none of `service` (a team package of that name
# is the team's own in the child, locally and in the sandbox).
HOST_MODULE = "assaygate.mcp_host"


class PythonRunner(HttpRunner):
    """A callable in the team's code, served by a child process over the http runner protocol.

    Confined, a run past its deadline ends the host's whole sandbox (nothing the run started goes
    on) and a fresh host serves the next run."""

    def __init__(
        self,
        entrypoint: str,
        framework: str | None = None,
        confinement: Confinement | None = None,
        reach: Sequence[tuple[str, int]] = (),
    ) -> None:
        extra = [] if framework is None else ["--framework", framework]
        self.argv = [sys.executable, "-m", HOST_MODULE, *extra, entrypoint]
        self.confinement = confinement
        self.reach = list(reach)
        self._restart_lock = threading.Lock()
        self._broken: str | None = None
        self.proc, self.sandbox, url = self._start()
        super().__init__(url)

    def _start(self) -> tuple[subprocess.Popen[bytes], Sandbox | None, str]:
        sandbox = None
        if self.confinement is None:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env={
                    **local.environ(),
                    "PYTHONPATH": os.pathsep.join(
                        dict.fromkeys(p or os.getcwd() for p in sys.path)
                    ),
                },
            )
        else:
            # The host is the gate's code serving the tenant's: its source is bound read-only.
            sandbox = Sandbox(
                self.confinement,
                self.argv,
                env={"PYTHONPATH": self.confinement.python_path()},
                reach=self.reach,
                serve=True,
                gate_code=True,
            )
            proc = sandbox.popen(
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        try:
            report = loads_text(line)
        except ValueError:
            report = {}
        if not report.get("url"):
            proc.kill()
            if sandbox is not None:
                sandbox.close()
            raise ManifestInvalid(
                str(report.get("error") or "the python runner did not start"),
                field="target.runner.entrypoint",
            )
        # Confined, the host's own address is inside the sandbox: the gate posts to the relay.
        return proc, sandbox, str(report["url"] if sandbox is None else sandbox.url)

    def run(
        self, task: dict[str, Any], url: str, deadline_s: float, crashed: threading.Event
    ) -> RunResult:
        if self._broken is not None:
            return RunResult(error=f"TargetUnreachable: {self._broken}")
        sandbox = self.sandbox
        result = super().run(task, url, deadline_s, crashed)
        exceeded = sandbox.memory_exceeded() if sandbox is not None else None
        if exceeded is not None and not result.crashed:
            # The kernel killed part of the host's tree: this run failed, and the next gets a
            # fresh sandbox (and cgroup).
            result = RunResult(error=f"TargetFailed: {exceeded}")
        if (result.timed_out or exceeded is not None) and sandbox is not None:
            self._restart(sandbox)
        return result

    def _restart(self, timed_out: Sandbox) -> None:
        with self._restart_lock:
            if self.sandbox is not timed_out:
                return  # a concurrent run's timeout already replaced it
            timed_out.close()
            try:
                self.proc, self.sandbox, self.url = self._start()
            except ManifestInvalid as exc:
                self._broken = f"the python runner did not restart: {exc}"
                return
            self._client.close()
            self._client = httpx.Client(transport=httpx.HTTPTransport(socket_options=NODELAY))

    def close(self) -> None:
        super().close()
        if self.sandbox is not None:
            self.sandbox.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
