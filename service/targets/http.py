"""The `http` target: a black-box agent in its own process, driven over the documented protocol.

For each trial the adapter opens a session on the loopback tool server, posts the task to the
agent, and waits. The agent calls the sandbox tool endpoints with the trial's token (each call goes
through that trial's `Tools`, so through the injector), and releases its claim either by posting it
to `/v1/claims` or in its reply. Anything that keeps the trial from being a clean run of the agent
raises a `TargetFailed`, which the harness records as a target error, never as a pass.
See docs/targets.md for the protocol.
"""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any
from urllib.parse import urlsplit

from service.core.errors import ManifestInvalid
from service.core.system.endpoint import BUILD_HEADER, reported_build
from service.core.system.text import as_text, loads_text
from service.core.trial.sandbox import RunCrashed, Task, Tools
from service.net import egress
from service.net.deadline import Deadline, exchange
from service.net.egress import EgressPolicy, EgressRefused
from service.targets.errors import (
    TargetProtocolError,
    TargetServerError,
    TargetTimeout,
    TargetUnreachable,
)
from service.targets.tool_server import PROTOCOL, BadRequest, Session, ToolServer, parse_claim

DEFAULT_TIMEOUT_S = 10.0
_DROPPED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class HttpTarget:
    """A `Target` that posts each trial's task to an agent URL. Close it to stop its tool server."""

    def __init__(
        self,
        url: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        server: ToolServer | None = None,
        egress: EgressPolicy | None = None,
        endpoint: str | None = None,
    ) -> None:
        """`endpoint`: the manifest's name for the agent's URL (`target`): each reply's
        `Assaygate-Build` header is noted for it on the trial's tools (None: not noted, as for
        the python host, which is code the gate runs)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ManifestInvalid(f"not an http(s) URL: {url!r}", field="target.url")
        self.url = url
        self.timeout_s = timeout_s
        self.endpoint = endpoint
        # The worker's egress policy: each connection goes to an address it checked. None: the
        # caller connects where it is told (tests, benchmarks).
        self.egress = egress
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._server = server
        self._own_server = server is None
        self._lock = threading.Lock()
        # One keep-alive connection per thread: a forked run posts its task from a server thread.
        self._local = threading.local()

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def server(self) -> ToolServer:
        server = self._server
        if server is None:
            with self._lock:
                if self._server is None:
                    self._server = ToolServer().start()
                server = self._server
        return server

    def close(self) -> None:
        self._drop_connection()
        with self._lock:
            if self._server is not None and self._own_server:
                self._server.close()
                self._server = None

    def __enter__(self) -> HttpTarget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one trial --------------------------------------------------------------------------------
    def __call__(self, task: Task, tools: Tools) -> None:
        server = self.server
        session = server.open(task, tools)
        try:
            status, body, build = self._post_task(session, server.base_url)
        finally:
            server.release(session)
        if self.endpoint is not None:
            # Whatever it answered, the agent answered: what it said it is counts for the trial.
            if tools.builds is None:
                tools.builds = []
            tools.builds.append((self.endpoint, reported_build(build)))
        if session.crashed:
            # The sandbox killed the run at its checkpoint; the harness restarts it, as in-process.
            raise RunCrashed("the agent's run crashed after its effect")
        if session.fault is not None:
            raise TargetProtocolError(session.fault)
        if status != 200:
            raise TargetServerError(f"the agent answered the task with {status}: {_snippet(body)}")
        claim = _reply_claim(body)
        if claim is None:
            # No claim in the reply: whatever was posted to /v1/claims stands, and a run that
            # released none is the oracle's to grade (a claim violation), not a target error.
            return
        try:
            status_, action_id, ledger_ref = parse_claim(claim)
        except BadRequest as exc:
            raise TargetProtocolError(f"malformed claim: {exc}") from None
        # Recorded beside any posted claim: two claims for one task are graded, never picked from.
        tools.respond(status_, action_id, ledger_ref)

    def task_body(self, session: Session, sandbox_url: str) -> dict[str, Any]:
        task = session.task
        return {
            "protocol": PROTOCOL,
            "trial": session.token,
            "sandbox": sandbox_url,
            "action_id": task.action_id,
            "task": task.view(),
        }

    def _post_task(self, session: Session, sandbox_url: str) -> tuple[int, bytes, str | None]:
        body = json.dumps(self.task_body(session, sandbox_url)).encode()
        headers = {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {session.token}",
            "traceparent": session.traceparent(),
            "Assaygate-Action-Id": session.task.action_id,
        }
        for attempt in (1, 2):
            conn, reused = self._connection()
            try:
                # `timeout_s` bounds the whole call (connect, send, the whole reply), not each
                # read: an agent trickling its reply holds a shared worker no longer.
                with Deadline(self.timeout_s) as deadline:
                    resp, data = exchange(conn, deadline, "POST", self._path, body, headers)
                if resp.will_close:
                    self._drop_connection()
                return resp.status, data, resp.getheader(BUILD_HEADER)
            except TimeoutError:
                self._drop_connection()
                raise TargetTimeout(
                    f"the agent did not answer within {self.timeout_s:g} s"
                ) from None
            except _DROPPED as exc:
                self._drop_connection()
                # An idle keep-alive connection the agent had closed: the task never arrived.
                if attempt == 1 and reused and session.calls == 0:
                    continue
                raise TargetUnreachable(f"the agent dropped the connection: {exc}") from None
            except EgressRefused as exc:
                self._drop_connection()
                raise TargetUnreachable(f"egress refused: {exc.message}") from None
            except ConnectionRefusedError:
                self._drop_connection()
                raise TargetUnreachable(f"connection refused by {self.url}") from None
            except http.client.HTTPException as exc:
                self._drop_connection()
                raise TargetProtocolError(
                    f"not an HTTP reply: {type(exc).__name__}: {exc}"
                ) from None
            except OSError as exc:
                self._drop_connection()
                raise TargetUnreachable(f"cannot reach {self.url}: {exc}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, True
        if self.egress is not None:
            cls = egress.HTTPSConnection if self._https else egress.HTTPConnection
            conn = cls(self.egress, self._host, self._port, self.timeout_s)
        elif self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout_s)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)
        self._local.conn = conn
        return conn, False

    def _drop_connection(self) -> None:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def _snippet(body: bytes) -> str:
    return as_text(body[:200].decode("utf-8", "replace"))


def _reply_claim(body: bytes) -> object:
    try:
        reply = loads_text(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise TargetProtocolError(f"the agent's reply is not JSON: {_snippet(body)!r}") from None
    if not isinstance(reply, dict):
        raise TargetProtocolError("the agent's reply must be a JSON object")
    return reply.get("claim")
