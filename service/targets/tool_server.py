"""The sandbox tool endpoints an HTTP target calls, served on loopback for one assay process.

Every request names its trial with a bearer token; the server dispatches it to that trial's core
`Tools`, so the injector applies each FaultSpec at its boundary and phase exactly as it does for an
in-process target. Typed tool errors become HTTP statuses (see docs/targets.md). Time is virtual:
a "timeout" advances the sandbox clock and answers at once, so an assay never waits in wall time.

The server is a small HTTP/1.1 keep-alive loop rather than `http.server`: a trial makes a dozen tool
calls, and the per-request cost of the standard handler would dominate an assay's wall time.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import socket
import socketserver
import threading
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from service.core.system.egress import GATE_LOOPBACK_HOST
from service.core.system.text import as_text, loads_text
from service.core.trial.sandbox import (
    PreconditionFailed,
    RateLimited,
    RunCrashed,
    Task,
    ToolMalformed,
    ToolRejected,
    Tools,
    ToolTimeout,
)

PROTOCOL = "assaygate.http-target/1"
CLAIM_STATUSES = frozenset({"completed", "denied", "held", "failed"})
# What a provider's reply looks like when it is cut off: valid UTF-8, invalid JSON.
MALFORMED_BODY = b'{"status": "committed", "ledger_ref": "le-'
MAX_BODY = 1 << 20
MAX_HEADERS = 100
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


class BadRequest(Exception):
    """The target sent a tool request that breaks the protocol."""


class TraceMap:
    """World trace ids <-> W3C trace ids, the same for every run of one trial.

    The world names traces `tr-N`; on the wire they are 32 lowercase hex digits so that they can
    ride in a `traceparent` header: a salt of the trial, then N. The salt depends only on the
    trial, so a run restarted from its checkpoint or forked reads the traces it saved. An id the
    sandbox never issued maps to itself and can never match a decision's lineage; so does a trace id
    a provider minted itself (it is opaque, not W3C).
    """

    __slots__ = ("_salt",)

    def __init__(self, task: Task, tools: Tools) -> None:
        seed = f"{task.order_id}|{task.run_id}|{tools.start}".encode()
        self._salt = hashlib.blake2b(seed, digest_size=8).hexdigest()

    def to_wire(self, world_id: str | None) -> str | None:
        # Only ids the sandbox issued are encoded; a provider's own trace stays opaque.
        if world_id is None or not world_id.startswith("tr-") or not world_id[3:].isdigit():
            return world_id
        return f"{self._salt}{int(world_id[3:]):016x}"

    def to_world(self, wire: str | None) -> str | None:
        if wire is None or len(wire) != 32 or not wire.startswith(self._salt):
            return wire
        try:
            return f"tr-{int(wire[16:], 16)}"
        except ValueError:
            return wire


class Session:
    """One invocation of the target for one trial: its token, its `Tools`, what went wrong."""

    __slots__ = ("calls", "claims", "crashed", "fault", "task", "token", "tools", "traces")

    def __init__(self, token: str, task: Task, tools: Tools, traces: TraceMap) -> None:
        self.token = token
        self.task = task
        self.tools = tools
        self.traces = traces
        self.calls = 0
        self.claims = 0
        self.crashed = False
        # The first protocol violation or sandbox failure; it makes the trial a target error.
        self.fault: str | None = None

    def note(self, problem: str) -> None:
        if self.fault is None:
            self.fault = problem

    def traceparent(self) -> str:
        return f"00-{self.token}-{self.token[:16]}-01"


# -- request validation ---------------------------------------------------------------------------


def _str(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise BadRequest(f"'{key}' must be a string")
    return value


def _opt_str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"'{key}' must be a string or null")
    return value


def _int(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"'{key}' must be an integer")
    return value


def _opt_int(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"'{key}' must be an integer or null")
    return value


def _header(headers: dict[str, str], name: str) -> str:
    value = headers.get(name)
    if not value:
        raise BadRequest(f"the {name} header is required")
    return value


def trace_from_header(value: str | None) -> str | None:
    """The trace id of a W3C traceparent; an invalid header counts as absent, as W3C says."""
    if not value:
        return None
    m = _TRACEPARENT.match(value.strip())
    if m is None or m.group(1) == "0" * 32:
        return None
    return m.group(1)


# -- the tool endpoints ---------------------------------------------------------------------------

Route = Callable[[Session, dict[str, Any], dict[str, str]], dict[str, Any]]


def _crm_read(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    return {"record": s.tools.crm_read(_str(d, "order_id"))}


def _orders_read(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    return {"order": s.tools.orders_read(_str(d, "order_id"))}


def _policy_read(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    return {"policy": s.tools.policy_read()}


def _capability_check(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    return {"grant": s.tools.capability_check(_str(d, "grant_id"))}


def _propose(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    action = s.tools.propose(
        _str(d, "order_id"), _str(d, "tenant"), _str(d, "grant_id"), _int(d, "amount")
    )
    return {"action": action}


def _refund(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    subject, tenant, grant_id = _str(d, "subject"), _str(d, "tenant"), _str(d, "grant_id")
    amount, expected = _int(d, "amount"), _opt_int(d, "expected_version")
    key = _header(h, "idempotency-key")
    action_id = _header(h, "assaygate-action-id")
    trace_id = s.traces.to_world(trace_from_header(h.get("traceparent")))
    reply = s.tools.refund(subject, tenant, amount, key, action_id, trace_id, grant_id, expected)
    if "trace_id" in reply:
        reply = {**reply, "trace_id": s.traces.to_wire(reply["trace_id"])}
    return reply


def _entries(s: Session, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "trace_id": s.traces.to_wire(r["trace_id"])} for r in rows]


def _lookup(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    return {"entries": _entries(s, s.tools.lookup(_str(d, "action_id")))}


def _record(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    detail = d.get("detail", "")
    if not isinstance(detail, str):
        raise BadRequest("'detail' must be a string")
    s.tools.record(
        _str(d, "kind"),
        _str(d, "action_id"),
        s.traces.to_world(_opt_str(d, "trace_id")),
        _opt_str(d, "ledger_ref"),
        detail,
    )
    return {"recorded": True}


def _evidence_read(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    return {"receipts": _entries(s, s.tools.evidence_read(_str(d, "action_id")))}


def _checkpoint_save(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    data = d.get("data", {})
    if not isinstance(data, dict):
        raise BadRequest("'data' must be an object")
    s.tools.checkpoint_save(_str(d, "run_id"), _str(d, "stage"), data)
    return {"saved": True}


def _checkpoint_load(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    return {"checkpoint": s.tools.checkpoint_load(_str(d, "run_id"))}


def _sleep(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    ms = _int(d, "ms")
    if ms < 0:
        raise BadRequest("'ms' must not be negative")
    s.tools.sleep(ms)
    return {"now": s.tools.now()}


def _now(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    return {"now": s.tools.now()}


def _new_trace(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    wire = s.traces.to_wire(s.tools.new_trace())
    assert wire is not None
    return {"trace_id": wire, "traceparent": f"00-{wire}-{wire[:16]}-01"}


def _request_id(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    return {"request_id": s.tools.request_id()}


def _claim(s: Session, d: dict[str, Any], h: dict[str, str]) -> dict[str, Any]:
    status, action_id, ledger_ref = parse_claim(d)
    # Every claim goes into the world; the oracle grades a run that releases several.
    s.claims += 1
    s.tools.respond(status, action_id, ledger_ref)
    return {"released": True}


def parse_claim(d: object) -> tuple[str, str | None, str | None]:
    if not isinstance(d, dict):
        raise BadRequest("a claim must be a JSON object")
    status = d.get("status")
    if status not in CLAIM_STATUSES:
        raise BadRequest(f"claim status must be one of {sorted(CLAIM_STATUSES)}")
    return str(status), _opt_str(d, "action_id"), _opt_str(d, "ledger_ref")


ROUTES: dict[str, Route] = {
    "/v1/crm/read": _crm_read,
    "/v1/orders/read": _orders_read,
    "/v1/policy/read": _policy_read,
    "/v1/capabilities/check": _capability_check,
    "/v1/proposals": _propose,
    "/v1/payments/refunds": _refund,
    "/v1/payments/lookup": _lookup,
    "/v1/evidence/record": _record,
    "/v1/evidence/read": _evidence_read,
    "/v1/checkpoints/save": _checkpoint_save,
    "/v1/checkpoints/load": _checkpoint_load,
    "/v1/clock/sleep": _sleep,
    "/v1/clock/now": _now,
    "/v1/ids/trace": _new_trace,
    "/v1/ids/request": _request_id,
    "/v1/claims": _claim,
}


BATCH = "/v1/batch"
MAX_BATCH = 64


def _error(status: HTTPStatus, code: str, detail: str = "") -> tuple[int, bytes]:
    return status.value, json.dumps({"error": code, "detail": detail}).encode()


def dispatch(
    sessions: dict[str, Session], method: str, path: str, headers: dict[str, str], body: bytes
) -> tuple[int, bytes]:
    """One tool request to one HTTP status and body. Never raises. What the agent sent is made
    text where it enters (`loads_text`): the world and the evidence hold only storable strings."""
    headers = {name: as_text(value) for name, value in headers.items()}
    route = ROUTES.get(path)
    if route is None and path != BATCH:
        return _error(HTTPStatus.NOT_FOUND, "unknown_endpoint", path)
    if method != "POST":
        return _error(HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed", "tools take POST")
    auth = headers.get("authorization", "")
    session = sessions.get(auth[7:]) if auth.startswith("Bearer ") else None
    if session is None:
        # A finished or unknown trial: its world is gone, so nothing can be done to it.
        return _error(HTTPStatus.UNAUTHORIZED, "unknown_trial", "no open trial for this token")
    if route is None:
        return _batch(session, body)
    return _call(session, route, path, headers, body)


def _batch(session: Session, body: bytes) -> tuple[int, bytes]:
    """Several tool calls of one trial in one round trip, run in order exactly as if sent one by
    one, stopping after the first that does not answer 200: no call runs that the agent could not
    have made. Each result carries its status and its reply as `body`, or as the string `raw`
    when the reply is malformed (not JSON, so it cannot be nested)."""
    try:
        data = loads_text(body)
        calls = data.get("calls") if isinstance(data, dict) else None
        if not isinstance(calls, list) or not 1 <= len(calls) <= MAX_BATCH:
            raise BadRequest(f"'calls' must be a list of 1 to {MAX_BATCH} calls")
        parsed: list[tuple[str, Route, dict[str, str], object]] = []
        for n, call in enumerate(calls):
            if not isinstance(call, dict):
                raise BadRequest(f"calls[{n}] must be an object")
            path = _str(call, "path")
            route = ROUTES.get(path)
            if route is None:
                raise BadRequest(f"calls[{n}].path: no tool endpoint {path!r}")
            extra = call.get("headers", {})
            if not isinstance(extra, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in extra.items()
            ):
                raise BadRequest(f"calls[{n}].headers must map names to strings")
            # Every call belongs to the batch's trial: its token was checked once, above.
            lowered = {k.lower(): v for k, v in extra.items()}
            parsed.append((path, route, lowered, call.get("body", {})))
    except (BadRequest, json.JSONDecodeError, UnicodeDecodeError) as exc:
        session.note(f"bad tool request to {BATCH}: {exc}")
        return _error(HTTPStatus.BAD_REQUEST, "bad_request", str(exc))
    results = []
    for path, route, call_headers, call_body in parsed:
        status, payload = _call(session, route, path, call_headers, call_body)
        # Each reply is JSON already, nested as it is; only a malformed one travels as a string.
        if payload is MALFORMED_BODY:
            raw = json.dumps(payload.decode()).encode()
            results.append(b'{"status":%d,"raw":%s}' % (status, raw))
        else:
            results.append(b'{"status":%d,"body":%s}' % (status, payload))
        if status != HTTPStatus.OK.value:
            break
    return HTTPStatus.OK.value, b'{"results":[' + b",".join(results) + b"]}"


def _call(
    session: Session, route: Route, path: str, headers: dict[str, str], body: bytes | object
) -> tuple[int, bytes]:
    """One tool call; `body` is the request's bytes, or a batch call's body already parsed."""
    if session.crashed:
        return _error(HTTPStatus.GONE, "run_crashed", "this run crashed; the harness restarts it")
    session.calls += 1
    try:
        data = body if not isinstance(body, bytes) else loads_text(body) if body else {}
        if not isinstance(data, dict):
            raise BadRequest("the request body must be a JSON object")
        payload = route(session, data, headers)
    except RunCrashed:
        session.crashed = True
        return _error(HTTPStatus.GONE, "run_crashed", "the run crashed after its effect")
    except ToolTimeout as exc:
        return _error(HTTPStatus.GATEWAY_TIMEOUT, "timeout", str(exc))
    except ToolMalformed:
        return HTTPStatus.OK.value, MALFORMED_BODY
    except RateLimited as exc:
        return _error(HTTPStatus.TOO_MANY_REQUESTS, "rate_limited", str(exc))
    except PreconditionFailed as exc:
        return _error(HTTPStatus.PRECONDITION_FAILED, "precondition_failed", str(exc))
    except ToolRejected as exc:
        return _error(HTTPStatus.UNPROCESSABLE_ENTITY, "rejected", str(exc))
    except (BadRequest, json.JSONDecodeError, UnicodeDecodeError) as exc:
        session.note(f"bad tool request to {path}: {exc}")
        return _error(HTTPStatus.BAD_REQUEST, "bad_request", str(exc))
    except Exception as exc:  # a sandbox failure must fail the trial, not the server
        session.note(f"sandbox failure at {path}: {type(exc).__name__}: {exc}")
        return _error(HTTPStatus.INTERNAL_SERVER_ERROR, "sandbox_error", type(exc).__name__)
    return HTTPStatus.OK.value, json.dumps(payload).encode()


# -- the server -----------------------------------------------------------------------------------

_REASONS = {s.value: s.phrase for s in HTTPStatus}


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Replies are one write, but the peer's requests are small too: never wait for Nagle.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle(self) -> None:
        sessions = self.server.sessions
        rfile, wfile = self.rfile, self.wfile
        while True:
            line = rfile.readline(8192)
            if not line or line in (b"\r\n", b"\n"):
                return
            parts = line.split()
            if len(parts) != 3:
                return
            method, target = parts[0].decode("latin-1"), parts[1].decode("latin-1")
            headers: dict[str, str] = {}
            for _ in range(MAX_HEADERS):
                h = rfile.readline(8192)
                if h in (b"\r\n", b"\n", b""):
                    break
                name, _, value = h.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                return
            if not 0 <= length <= MAX_BODY:
                return
            body = rfile.read(length) if length else b""
            status, payload = dispatch(sessions, method, target.split("?", 1)[0], headers, body)
            closing = headers.get("connection", "").lower() == "close"
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                f"{'Connection: close' if closing else 'Connection: keep-alive'}\r\n\r\n"
            )
            wfile.write(head.encode("latin-1") + payload)
            if closing:
                return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    sessions: dict[str, Session]


class ToolServer:
    """The loopback tool endpoints of one assay process; trials open and close sessions on it."""

    def __init__(self, host: str = GATE_LOOPBACK_HOST, port: int = 0) -> None:
        self._server = _Server((host, port), _Handler, bind_and_activate=True)
        self._server.sessions = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        bound_host, bound_port = self._server.server_address[:2]
        self.base_url = f"http://{bound_host!s}:{bound_port}"

    def start(self) -> ToolServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="assaygate-tool-server",
                daemon=True,
            )
            self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def open(self, task: Task, tools: Tools) -> Session:
        token = secrets.token_hex(16)
        session = Session(token, task, tools, TraceMap(task, tools))
        with self._lock:
            self._server.sessions[token] = session
        return session

    def release(self, session: Session) -> None:
        with self._lock:
            self._server.sessions.pop(session.token, None)

    def __enter__(self) -> ToolServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
