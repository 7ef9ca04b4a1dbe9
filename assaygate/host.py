"""The child process that serves a `python` target's callable over the HTTP target protocol.

It lives in the public package and imports only it and the standard library, so the callable's
own packages may have any name but `assaygate` (a team package named `service` or `worker` is the
team's, locally and in the sandbox).

    python -m assaygate.host module:callable            # serve the callable
    python -m assaygate.host --check module:callable    # only validate it, then exit

The assay process never imports user code and never shares its memory with it: it starts this host,
which imports the callable, binds a loopback port and reports one JSON line on its original stdout
(`{"host": HOST_PROTOCOL, "url": ...}`, or `{"host": ..., "error": ...}` when the entrypoint cannot
be loaded). From then on the host is an `assaygate.http-target/1` agent like any other: for each
task it builds a `Task` and a `RemoteTools`, whose methods have the core `Tools` signatures but
reach the sandbox only through its tool endpoints, and calls the callable. No attribute, global or
`gc` walk in this process can reach the world, the injector or the armed fault: none exists here.

The host answers a task with `{"claim": null}` (claims go through `/v1/claims`), with
`{"claim": null, "aborted": "run_crashed"}` when the sandbox said the run crashed, and with `500`
and the exception's type and message when the callable raised. The user's own prints go to stderr,
so they can never be mistaken for the ready line. The host exits when its parent closes its stdin
(the parent died) and on SIGTERM (the adapter closed).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import socket
import socketserver
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlsplit

from assaygate._connection import connection, read_head
from assaygate.replies import shaped
from assaygate.target import (
    PreconditionFailed,
    RateLimited,
    ReplyMisread,
    RunCrashed,
    Task,
    ToolError,
    ToolMalformed,
    ToolRejected,
    ToolTimeout,
)

# The adapter (service/targets/python.py) reads these; it does not import this module, so that
# `python -m assaygate.host` finds it unimported when the package's init has run.
HOST_PROTOCOL = "assaygate-python-host/1"
FIELD = "target.entrypoint"
MAX_BODY = 1 << 20
_ERRORS: dict[int, type[ToolError]] = {
    504: ToolTimeout,
    429: RateLimited,
    412: PreconditionFailed,
    422: ToolRejected,
}
# A header value this client writes verbatim: printable ASCII, no surrounding blanks.
_HEADER_SAFE = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$")
_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Error",
}

Callee = Callable[[Task, Any], None]


class EntrypointInvalid(Exception):
    """The entrypoint cannot be imported, has no such attribute, or is not callable."""


class SandboxRefused(Exception):
    """The sandbox answered a tool call outside the typed tool errors (400, 401, 404, 500...).

    The sandbox has already recorded a protocol violation or sandbox failure against the trial
    where that applies, so catching this does not make the trial clean.
    """


def resolve(entrypoint: str, deprecated: list[str] | None = None) -> Callee:
    """Import `module:callable`; any problem is an `EntrypointInvalid` in the manifest's words.
    Each deprecated `assaygate` path the import used is said on stderr and, given a list, added
    to it (the report line carries them to the assay, whose stderr a worker's is not)."""
    module_name, sep, attr_path = entrypoint.partition(":")
    if not sep or not module_name or not attr_path:
        raise EntrypointInvalid(f"{entrypoint!r} is not 'module:callable'")
    try:
        with warnings.catch_warnings(record=True) as caught:
            # An author must see that an import path is going away, though Python hides a
            # DeprecationWarning raised outside __main__; the assay's stderr is their terminal.
            warnings.simplefilter("always", DeprecationWarning)
            obj: object = importlib.import_module(module_name)
        for w in caught:
            if issubclass(w.category, DeprecationWarning) and "assaygate" in str(w.message):
                line = f"{w.filename}:{w.lineno}: DeprecationWarning: {w.message}"
                sys.stderr.write(line + "\n")
                if deprecated is not None:
                    deprecated.append(line)
    except ImportError as exc:
        raise EntrypointInvalid(f"cannot import {module_name!r}: {exc}") from None
    except Exception as exc:  # user code failing at import is still the manifest's entrypoint
        raise EntrypointInvalid(
            f"importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise EntrypointInvalid(f"{module_name!r} has no attribute {attr_path!r}") from None
    if not callable(obj):
        raise EntrypointInvalid(f"{entrypoint!r} is not callable")
    return cast(Callee, obj)


# -- the sandbox's tool endpoints, as the core `Tools` interface -----------------------------------


def _header_value(name: str, value: object) -> str:
    if not isinstance(value, str) or not _HEADER_SAFE.match(value):
        raise ValueError(f"{name} must be printable ASCII without surrounding blanks: {value!r}")
    return value


class RemoteTools:
    """The core `Tools` interface of one task, served by the sandbox's tool endpoints.

    Every public method has the signature of the core method it names and raises the same typed
    tool errors; `RunCrashed` (a `BaseException`) when the sandbox says the run crashed. It holds
    the sandbox address and the trial token, nothing else: the world lives in another process.
    """

    __slots__ = ("_head", "_host", "_mistakes", "_port")

    def __init__(self, sandbox: str, token: str) -> None:
        # Every reply read for a key it never has (assaygate.replies): the task fails with the
        # first, even when the callable caught it.
        self._mistakes: list[str] = []
        parts = urlsplit(sandbox)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise ValueError(f"not a sandbox URL: {sandbox!r}")
        self._host = parts.hostname
        self._port = parts.port
        _header_value("the trial token", token)
        self._head = (
            f"Host: {parts.hostname}:{parts.port}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\n"
        )

    def _call(self, path: str, body: dict[str, Any], headers: str = "") -> Any:
        data = json.dumps(body).encode()
        request = (
            f"POST {path} HTTP/1.1\r\n{self._head}{headers}Content-Length: {len(data)}\r\n\r\n"
        ).encode("latin-1") + data
        status, raw = connection(self._host, self._port).post(request)
        if status == 200:
            try:
                return json.loads(raw)
            except ValueError:
                raise ToolMalformed(f"{path}: the reply could not be parsed") from None
        if status == 410:
            raise RunCrashed("the run crashed")
        detail = _detail(raw)
        error = _ERRORS.get(status)
        if error is not None:
            raise error(detail)
        raise SandboxRefused(f"{path} answered {status}: {detail}")

    def _shaped(self, method: str, value: Any) -> Any:
        return shaped(method, value, self._mistakes)

    # -- clock --------------------------------------------------------------------------------
    def now(self) -> int:
        return cast(int, self._call("/v1/clock/now", {})["now"])

    def sleep(self, ms: int) -> None:
        self._call("/v1/clock/sleep", {"ms": ms})

    def new_trace(self) -> str:
        return cast(str, self._call("/v1/ids/trace", {})["trace_id"])

    def request_id(self) -> str:
        return cast(str, self._call("/v1/ids/request", {})["request_id"])

    # -- context sources ----------------------------------------------------------------------
    def crm_read(self, order_id: str) -> dict[str, Any] | None:
        reply = self._call("/v1/crm/read", {"order_id": order_id})
        return cast("dict[str, Any] | None", self._shaped("crm_read", reply["record"]))

    def orders_read(self, order_id: str) -> dict[str, Any] | None:
        reply = self._call("/v1/orders/read", {"order_id": order_id})
        return cast("dict[str, Any] | None", self._shaped("orders_read", reply["order"]))

    def policy_read(self) -> dict[str, Any]:
        return cast(
            "dict[str, Any]",
            self._shaped("policy_read", self._call("/v1/policy/read", {})["policy"]),
        )

    def capability_check(self, grant_id: str) -> dict[str, Any] | None:
        reply = self._call("/v1/capabilities/check", {"grant_id": grant_id})
        return cast("dict[str, Any] | None", self._shaped("capability_check", reply["grant"]))

    def propose(self, order_id: str, tenant: str, grant_id: str, amount: int) -> dict[str, Any]:
        body = {"order_id": order_id, "tenant": tenant, "grant_id": grant_id, "amount": amount}
        return cast(
            "dict[str, Any]", self._shaped("propose", self._call("/v1/proposals", body)["action"])
        )

    # -- payments -----------------------------------------------------------------------------
    def refund(
        self,
        subject: str,
        tenant: str,
        amount: int,
        idempotency_key: str,
        action_id: str,
        trace_id: str | None,
        grant_id: str,
        expected_version: int | None = None,
    ) -> dict[str, Any]:
        headers = (
            f"Idempotency-Key: {_header_value('idempotency_key', idempotency_key)}\r\n"
            f"Assaygate-Action-Id: {_header_value('action_id', action_id)}\r\n"
        )
        # The sandbox issues trace ids as 32 hex digits; anything else has no lineage, as over HTTP.
        if isinstance(trace_id, str) and _TRACE_ID.match(trace_id):
            headers += f"traceparent: 00-{trace_id}-{trace_id[:16]}-01\r\n"
        body = {
            "subject": subject,
            "tenant": tenant,
            "amount": amount,
            "grant_id": grant_id,
            "expected_version": expected_version,
        }
        reply = self._call("/v1/payments/refunds", body, headers)
        if not isinstance(reply, dict):
            raise ToolMalformed("/v1/payments/refunds: the reply is not an object")
        return cast("dict[str, Any]", self._shaped("refund", reply))

    def lookup(self, action_id: str) -> list[dict[str, Any]]:
        reply = self._call("/v1/payments/lookup", {"action_id": action_id})
        return cast("list[dict[str, Any]]", self._shaped("lookup", reply["entries"]))

    # -- evidence, checkpoints, claims ---------------------------------------------------------
    def record(
        self,
        kind: str,
        action_id: str,
        trace_id: str | None,
        ledger_ref: str | None,
        detail: str = "",
    ) -> None:
        body = {
            "kind": kind,
            "action_id": action_id,
            "trace_id": trace_id,
            "ledger_ref": ledger_ref,
            "detail": detail,
        }
        self._call("/v1/evidence/record", body)

    def evidence_read(self, action_id: str) -> list[dict[str, Any]]:
        reply = self._call("/v1/evidence/read", {"action_id": action_id})
        return cast("list[dict[str, Any]]", self._shaped("evidence_read", reply["receipts"]))

    def checkpoint_save(self, run_id: str, stage: str, data: dict[str, Any]) -> None:
        self._call("/v1/checkpoints/save", {"run_id": run_id, "stage": stage, "data": data})

    def checkpoint_load(self, run_id: str) -> dict[str, Any] | None:
        reply = self._call("/v1/checkpoints/load", {"run_id": run_id})
        return cast("dict[str, Any] | None", reply["checkpoint"])

    def respond(self, status: str, action_id: str | None, ledger_ref: str | None) -> None:
        self._call(
            "/v1/claims", {"status": status, "action_id": action_id, "ledger_ref": ledger_ref}
        )


def _detail(raw: bytes) -> str:
    try:
        reply = json.loads(raw)
    except ValueError:
        return raw[:200].decode("utf-8", "replace")
    if isinstance(reply, dict):
        return str(reply.get("detail") or reply.get("error") or "")
    return ""


# -- serving tasks --------------------------------------------------------------------------------


def task_of(data: object) -> Task:
    """The core `Task` of a task request's `task` object."""
    if not isinstance(data, dict):
        raise TypeError("'task' must be an object")
    disabled = data["disabled_controls"]
    if not isinstance(disabled, list) or not all(isinstance(c, str) for c in disabled):
        raise TypeError("'disabled_controls' must be a list of strings")
    task = Task(
        str(data["run_id"]),
        str(data["order_id"]),
        str(data["tenant"]),
        str(data["customer"]),
        int(data["amount"]),
        str(data["grant_id"]),
        str(data["actor"]),
        frozenset(disabled),
    )
    task.purpose = str(data.get("purpose", task.purpose))
    return task


def serve_task(fn: Callee, body: bytes) -> tuple[int, dict[str, Any]]:
    """Run the callable for one task request; the reply the adapter reads."""
    try:
        request = json.loads(body)
        task = task_of(request["task"])
        tools = RemoteTools(request["sandbox"], request["trial"])
    except (ValueError, KeyError, TypeError) as exc:
        return 400, {"error": "bad_task", "detail": f"{type(exc).__name__}: {exc}"}
    raised: BaseException | None = None
    try:
        fn(task, tools)
    except RunCrashed:
        # The sandbox already knows; the adapter raises the crash in the assay process.
        return 200, {"claim": None, "aborted": "run_crashed"}
    except BaseException as exc:  # SystemExit too: the callable's failure, with its cause
        raised = exc
    # A reply read for a key it never has is the cause, whatever it led to: even caught, the
    # callable went on as if it had read nothing.
    if tools._mistakes:
        misread = tools._mistakes[0]
        return 500, {"error": "target_raised", "type": ReplyMisread.__name__, "message": misread}
    if raised is not None:
        return 500, {
            "error": "target_raised",
            "type": type(raised).__name__,
            "message": str(raised),
        }
    return 200, {"claim": None}


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle(self) -> None:
        rfile, wfile, fn = self.rfile, self.wfile, self.server.fn
        while True:
            line = rfile.readline(8192)
            parts = line.split()
            if len(parts) != 3:
                return
            method, path = parts[0], parts[1]
            try:
                length, closing = read_head(rfile)
            except ValueError:
                return
            if not 0 <= length <= MAX_BODY:
                return
            body = rfile.read(length) if length else b""
            if method == b"POST":
                status, reply = serve_task(fn, body)
            elif method == b"GET" and path == b"/healthz":
                status, reply = 200, {"ok": True, "host": HOST_PROTOCOL}
            else:
                status, reply = 405, {"error": "method_not_allowed"}
            payload = json.dumps(reply).encode()
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                f"{'Connection: close' if closing else 'Connection: keep-alive'}\r\n\r\n"
            )
            wfile.write(head.encode("latin-1") + payload)
            if closing:
                return


class _Server(socketserver.ThreadingTCPServer):
    # Under `fork_run` the sandbox re-enters the target while the first task is still open.
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    fn: Callee


def _exit_when_orphaned() -> None:
    """The parent holds our stdin open; end-of-file means it died without closing us."""
    try:
        while sys.stdin.buffer.read(65536):
            pass
    finally:
        os._exit(0)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    # The report line goes to the original stdout; everything else the user's code prints goes
    # to stderr, so it can neither fake the report nor fill a pipe nobody reads.
    report = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def say(**fields: object) -> None:
        report.write(json.dumps({"host": HOST_PROTOCOL, **fields}) + "\n")
        report.flush()

    if len(args) != 1:
        say(error="usage: python -m assaygate.host [--check] module:callable")
        return 2
    deprecated: list[str] = []
    try:
        fn = resolve(args[0], deprecated)
    except EntrypointInvalid as exc:
        say(error=str(exc), field=FIELD)
        return 2
    if check:
        say(ok=True, deprecated=deprecated)
        return 0
    # In the sandbox the gate names the port its inbound relay forwards to
    # (service.sandbox.bwrap.LISTEN_ENV); elsewhere any free port.
    server = _Server(("127.0.0.1", int(os.environ.get("ASSAYGATE_LISTEN_PORT") or 0)), _Handler)
    server.fn = fn
    host, port = server.server_address[:2]
    say(url=f"http://{host!s}:{port}/", pid=os.getpid(), deprecated=deprecated)
    report.close()
    threading.Thread(target=_exit_when_orphaned, name="orphan-watch", daemon=True).start()
    server.serve_forever(poll_interval=0.5)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Threads the user's module started at import must not keep a checking host alive.
    os._exit(code)
