#!/usr/bin/env python3
"""Copperfin refund agent as its own HTTP service: an example of Assaygate's `http` target.

    python examples/http-agent/agent.py --port 8081 --controls typed
    python examples/http-agent/agent.py --port 8081 --controls naive
    python examples/http-agent/agent.py --port 8081 --controls bind_identity,idempotency

It knows nothing of Assaygate's code: it speaks the protocol of docs/targets.md with the standard
library alone. For each task it reads the order, checks policy and capability, asks for a proposal,
refunds through the sandbox payment endpoint, records evidence and returns its claim. Each control
switch changes what it does, exactly as in the built-in reference workflow, and a task's
`disabled_controls` switch controls off for that one run (the counterfactual pair).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import socketserver
import sys
import threading
from typing import Any
from urllib.parse import urlsplit

CONTROLS = (
    "bind_identity",
    "pre_effect_authority",
    "refresh_context",
    "state_precondition",
    "idempotency",
    "effect_readback",
    "evidence_gate",
    "evidence_repair",
)
TYPED = frozenset(CONTROLS) - {"evidence_repair"}
PRESETS: dict[str, frozenset[str]] = {
    "typed": TYPED,
    "typed-repair": frozenset(CONTROLS),
    "naive": frozenset(),
    "baseline": frozenset(),
}
ELIGIBLE = "eligible"


# -- the sandbox tools, over HTTP -----------------------------------------------------------------


class ToolError(Exception):
    """A tool call failed in a way the protocol types: the agent may recover from it."""


class ToolTimeout(ToolError):
    pass


class ToolMalformed(ToolError):
    pass


class RateLimited(ToolError):
    pass


class PreconditionFailed(ToolError):
    pass


class ToolRejected(ToolError):
    pass


class RunCrashed(Exception):
    """The sandbox says this run is dead: stop at once, release nothing."""


class SandboxBroken(Exception):
    """An answer outside the protocol: the agent cannot go on."""


_ERRORS: dict[int, type[ToolError]] = {
    504: ToolTimeout,
    429: RateLimited,
    412: PreconditionFailed,
    422: ToolRejected,
}
_local = threading.local()


class Connection:
    """A keep-alive HTTP/1.1 client for the sandbox's tool endpoints.

    A trial makes a dozen tool calls; `http.client` spends more CPU on each than the sandbox spends
    serving it, so the agent writes each request in one send and reads the length-delimited
    reply itself. The tool server always sends Content-Length, so nothing more is needed here.
    """

    def __init__(self, base: str) -> None:
        parts = urlsplit(base)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.sock: socket.socket | None = None
        self.rfile: Any = None

    def _open(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.rfile = sock, sock.makefile("rb")

    def close(self) -> None:
        if self.sock is not None:
            self.rfile.close()
            self.sock.close()
            self.sock = self.rfile = None

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        request = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1") + body
        for attempt in (1, 2):
            fresh = self.sock is None
            if fresh:
                self._open()
            assert self.sock is not None
            try:
                self.sock.sendall(request)
                status_line = self.rfile.readline(8192)
                if not status_line:
                    raise ConnectionResetError("the sandbox closed the connection")
            except (ConnectionResetError, BrokenPipeError):
                self.close()
                # Only an idle connection the server had closed is retried: nothing was sent.
                if attempt == 2 or fresh:
                    raise
                continue
            status = int(status_line.split()[1])
            length, closing = 0, False
            while True:
                line = self.rfile.readline(8192)
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection":
                    closing = value.strip().lower() == b"close"
            data = self.rfile.read(length) if length else b""
            if closing:
                self.close()
            return status, data
        raise AssertionError("unreachable")


def _answer(path: str, status: int, raw: bytes) -> Any:
    """A tool reply's JSON, or the typed error its status stands for."""
    if status == 200:
        try:
            return json.loads(raw)
        except ValueError:
            raise ToolMalformed(f"{path}: the reply could not be parsed") from None
    if status == 410:
        raise RunCrashed(path)
    error = _ERRORS.get(status)
    if error is not None:
        raise error(json.loads(raw).get("detail", ""))
    raise SandboxBroken(f"{path} answered {status}: {raw[:200]!r}")


def _judge(path: str, result: dict[str, Any]) -> Any:
    """`_answer` for one result of a batch: its reply nested as JSON, or `raw` if malformed."""
    status, body = result["status"], result.get("body")
    if status == 200:
        if "raw" in result:
            raise ToolMalformed(f"{path}: the reply could not be parsed")
        return body
    if status == 410:
        raise RunCrashed(path)
    error = _ERRORS.get(status)
    if error is not None:
        raise error(body.get("detail", "") if isinstance(body, dict) else "")
    raise SandboxBroken(f"{path} answered {status}: {str(body)[:200]!r}")


def _connection(base: str) -> Connection:
    pool: dict[str, Connection] = _local.__dict__.setdefault("pool", {})
    conn = pool.get(base)
    if conn is None:
        conn = pool[base] = Connection(base)
    return conn


class Deferred(Exception):
    """A batched acknowledgement-only call (a receipt, a checkpoint) failed. Raised where the
    batch was sent, but never a `ToolError`: no handler written for the later call may take it
    for its own failure; the task ends as if the call had raised where it was made."""

    def __init__(self, error: Exception) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


class Sandbox:
    """The tool endpoints of one trial, named by its token.

    Calls whose reply carries nothing but an acknowledgement (`record`, `checkpoint_save`) are
    held and sent with the next call in one `/v1/batch` round trip (or when the task ends). The
    sandbox runs a batch in order and stops at the first call that fails, so it sees the calls
    this agent would have made one by one; only where a held call's failure is raised moves."""

    def __init__(self, base: str, token: str) -> None:
        self.base = base
        self.auth = f"Bearer {token}"
        self.held: list[dict[str, Any]] = []

    def hold(self, path: str, body: dict[str, Any]) -> None:
        self.held.append({"path": path, "body": body})

    def flush(self) -> None:
        """Send whatever is held: at the end of a task, before its reply."""
        if self.held:
            calls, self.held = self.held, []
            self._batch(calls)

    def call(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
        if self.held:
            calls, self.held = self.held, []
            call: dict[str, Any] = {"path": path, "body": body}
            if headers:
                call["headers"] = headers
            return self._batch([*calls, call])
        data = json.dumps(body).encode()
        h = {"Authorization": self.auth, "Content-Type": "application/json", **(headers or {})}
        status, raw = _connection(self.base).post(path, data, h)
        return _answer(path, status, raw)

    def _batch(self, calls: list[dict[str, Any]]) -> Any:
        """Send `calls`; raise for a held call that failed; the last call's reply."""
        h = {"Authorization": self.auth, "Content-Type": "application/json"}
        status, raw = _connection(self.base).post(
            "/v1/batch", json.dumps({"calls": calls}).encode(), h
        )
        if status != 200:
            raise SandboxBroken(f"/v1/batch answered {status}: {raw[:200]!r}")
        results = json.loads(raw)["results"]
        for call, result in zip(calls[:-1], results, strict=False):
            if result["status"] != 200 or "raw" in result:
                try:
                    _judge(call["path"], result)
                except RunCrashed:
                    raise
                except Exception as exc:
                    raise Deferred(exc) from None
        if len(results) < len(calls):
            raise SandboxBroken("/v1/batch stopped before a call that had not failed")
        return _judge(calls[-1]["path"], results[-1])

    # One method per endpoint, named after the tool it reaches.
    def crm_read(self, order_id: str) -> dict[str, Any] | None:
        return self.call("/v1/crm/read", {"order_id": order_id})["record"]

    def orders_read(self, order_id: str) -> dict[str, Any] | None:
        return self.call("/v1/orders/read", {"order_id": order_id})["order"]

    def policy_read(self) -> dict[str, Any]:
        return self.call("/v1/policy/read", {})["policy"]

    def capability_check(self, grant_id: str) -> dict[str, Any] | None:
        return self.call("/v1/capabilities/check", {"grant_id": grant_id})["grant"]

    def propose(self, order_id: str, tenant: str, grant_id: str, amount: int) -> dict[str, Any]:
        body = {"order_id": order_id, "tenant": tenant, "grant_id": grant_id, "amount": amount}
        return self.call("/v1/proposals", body)["action"]

    def refund(
        self,
        action: dict[str, Any],
        idempotency_key: str,
        action_id: str,
        trace_id: str | None,
        expected_version: int | None,
    ) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key, "Assaygate-Action-Id": action_id}
        if trace_id is not None:
            headers["traceparent"] = f"00-{trace_id}-{secrets.token_hex(8)}-01"
        body = {
            "subject": action["subject"],
            "tenant": action["tenant"],
            "amount": action["amount"],
            "grant_id": action["grant_id"],
            "expected_version": expected_version,
        }
        reply = self.call("/v1/payments/refunds", body, headers)
        if not isinstance(reply, dict):
            raise ToolMalformed("the refund reply is not an object")
        return reply

    def lookup(self, action_id: str) -> list[dict[str, Any]]:
        return self.call("/v1/payments/lookup", {"action_id": action_id})["entries"]

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
        self.hold("/v1/evidence/record", body)

    def evidence_read(self, action_id: str) -> list[dict[str, Any]]:
        return self.call("/v1/evidence/read", {"action_id": action_id})["receipts"]

    def checkpoint_save(self, run_id: str, stage: str, data: dict[str, Any]) -> None:
        self.hold("/v1/checkpoints/save", {"run_id": run_id, "stage": stage, "data": data})

    def checkpoint_load(self, run_id: str) -> dict[str, Any] | None:
        return self.call("/v1/checkpoints/load", {"run_id": run_id})["checkpoint"]

    def sleep(self, ms: int) -> None:
        self.call("/v1/clock/sleep", {"ms": ms})

    def new_trace(self) -> str:
        return self.call("/v1/ids/trace", {})["trace_id"]

    def request_id(self) -> str:
        return self.call("/v1/ids/request", {})["request_id"]


# -- the workflow ---------------------------------------------------------------------------------


# The build this agent names in the Assaygate-Build header of every reply (docs/targets.md,
# "Builds"); a manifest declares it as target.build, and a release pipeline would stamp its own
# (a version and commit, an image digest). `--build` overrides it.
BUILD = "copperfin-http-agent@1.0.0"


class Config:
    def __init__(
        self,
        controls: frozenset[str],
        max_attempts: int,
        backoff_ms: int,
        deny_on_warning: bool,
        jitter: bool = True,
        build: str = BUILD,
    ) -> None:
        self.build = build
        self.controls = controls
        self.max_attempts = max_attempts
        self.backoff_ms = backoff_ms
        self.deny_on_warning = deny_on_warning
        self.jitter = jitter


_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(z: int) -> int:
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _M64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _M64
    return z ^ (z >> 31)


class Jitter:
    """SplitMix64 keyed by this run and order: each fleet member draws its own waits (so a fleet
    does not retry in lockstep), and the same run draws the same waits when replayed."""

    def __init__(self, *parts: str) -> None:
        acc = _GOLDEN
        for part in parts:
            for byte in part.encode():
                acc = _mix(acc ^ byte)
            acc = _mix(acc + _GOLDEN & _M64)
        self.state = acc

    def upto(self, cap: int) -> int:
        self.state = (self.state + _GOLDEN) & _M64
        return _mix(self.state) % (cap + 1)


class _Stop(Exception):
    pass


class Run:
    """One execution of the refund workflow for one task."""

    def __init__(self, task: dict[str, Any], action_id: str, t: Sandbox, cfg: Config) -> None:
        self.task = task
        self.t = t
        self.cfg = cfg
        self.c = cfg.controls - frozenset(task.get("disabled_controls", ()))
        self.action_id = action_id
        self.action: dict[str, Any] = {}
        self.trace_id: str | None = None
        self.version: int | None = None
        self.claim: dict[str, Any] | None = None
        self.jitter: Jitter | None = None

    def respond(self, status: str, ledger_ref: str | None) -> None:
        self.claim = {"status": status, "action_id": self.action_id, "ledger_ref": ledger_ref}

    def deny(self, reason: str) -> None:
        self.t.record("denial", self.action_id, self.trace_id, None, reason)
        self.respond("denied", None)
        raise _Stop

    def hold(self, reason: str) -> None:
        self.t.record("hold", self.action_id, self.trace_id, None, reason)
        self.respond("held", None)
        raise _Stop

    def warn(self, signal_: str) -> None:
        self.t.record("anomaly", self.action_id, self.trace_id, None, signal_)
        if self.cfg.deny_on_warning:
            self.deny(f"refused after warning: {signal_}")

    def run(self) -> dict[str, Any] | None:
        with contextlib.suppress(_Stop):
            self._run()
        self.t.flush()
        return self.claim

    def _run(self) -> None:
        run_id = self.task["run_id"]
        cp = self.t.checkpoint_load(run_id)
        reply = None
        if cp is None:
            self.assemble_and_authorise()
        else:
            self.action, self.trace_id, self.version = cp["action"], cp["trace_id"], cp["version"]
            # A resumed run cannot know whether its effect already happened: read it back.
            if "effect_readback" in self.c:
                reply = self.find_prior_effect()
        if reply is None:
            reply = self.effect()
        self.t.checkpoint_save(run_id, "effect_done", {"ledger_ref": reply.get("ledger_ref")})
        self.release(reply)

    def assemble_and_authorise(self) -> None:
        task, t, c = self.task, self.t, self.c
        record = t.crm_read(task["order_id"])
        if record is None:
            self.deny("order not found")
            return
        status, version, amount = record["status"], record["version"], record["amount"]
        policy = t.policy_read()
        if "refresh_context" in c:
            auth = t.orders_read(task["order_id"])
            if auth is None:
                self.deny("order not found in the authoritative source")
                return
            if (auth["status"], auth["version"], auth["amount"]) != (status, version, amount):
                self.warn("eligibility sources conflict; the order system takes precedence")
            status, version, amount = auth["status"], auth["version"], auth["amount"]
        if status != ELIGIBLE:
            self.deny(f"order is {status}")
        if not policy["refunds_allowed"]:
            self.deny(f"policy v{policy['version']} excludes refunds")
        approval = t.capability_check(task["grant_id"])
        if approval is None or not approval["valid"]:
            self.deny("no valid capability at approval")
        self.version = version
        action = t.propose(task["order_id"], task["tenant"], task["grant_id"], amount)
        self.action = action
        self.trace_id = t.new_trace()
        t.record(
            "decision",
            self.action_id,
            self.trace_id,
            None,
            f"refund {action['amount']} on {action['subject']}",
        )
        bound = (task["order_id"], task["tenant"], task["grant_id"])
        if (
            "bind_identity" in c
            and (
                action["subject"],
                action["tenant"],
                action["grant_id"],
            )
            != bound
        ):
            self.warn("proposal does not match the bound action contract")
            self.deny("subject binding mismatch")
        if "pre_effect_authority" in c:
            grant = t.capability_check(action["grant_id"])
            if grant is None or not grant["valid"]:
                self.deny("capability not valid at effect time")
            assert grant is not None
            if grant["subject"] != action["subject"] or grant["amount"] < action["amount"]:
                self.deny("capability does not cover this subject and amount")
        if "refresh_context" in c:
            current = t.policy_read()
            if not current["refunds_allowed"]:
                self.deny(f"policy v{current['version']} excludes refunds")
        t.checkpoint_save(
            task["run_id"],
            "authorised",
            {"action": action, "trace_id": self.trace_id, "version": self.version},
        )

    def find_prior_effect(self) -> dict[str, Any] | None:
        found = self.t.lookup(self.action_id)
        if not found:
            return None
        self.warn("an effect for this action already exists")
        e = found[0]
        return {"status": "committed", "ledger_ref": e["id"], "trace_id": e["trace_id"]}

    def effect(self) -> dict[str, Any]:
        t, c = self.t, self.c
        attempt = 0
        while True:
            attempt += 1
            # The logical action id is the key that lets the provider recognise a retry.
            key = self.action_id if "idempotency" in c else t.request_id()
            expected = self.version if "state_precondition" in c else None
            try:
                reply = t.refund(self.action, key, self.action_id, self.trace_id, expected)
                if reply.get("replayed"):
                    self.warn("the provider replayed an earlier result for this key")
                return reply
            except PreconditionFailed:
                self.warn("state version changed before the write")
                self.deny("order changed since it was read")
            except ToolRejected as exc:
                self.deny(f"rejected: {exc}")
            except ToolError as exc:
                self.warn(f"{type(exc).__name__}: {exc}")
                if "effect_readback" in c and not isinstance(exc, RateLimited):
                    prior = self.find_prior_effect()
                    if prior is not None:
                        return prior
                if attempt >= self.cfg.max_attempts:
                    t.record("failure", self.action_id, self.trace_id, None, "retries exhausted")
                    self.respond("failed", None)
                    raise _Stop from None
                t.sleep(self.backoff(attempt))

    def backoff(self, attempt: int) -> int:
        """Exponential back-off with full jitter (unless switched off)."""
        cap = min(8_000, self.cfg.backoff_ms * (1 << (attempt - 1)))
        if not self.cfg.jitter:
            return cap
        if self.jitter is None:
            self.jitter = Jitter("jitter", self.task["run_id"], self.task["order_id"])
        return self.jitter.upto(cap)

    def release(self, reply: dict[str, Any]) -> None:
        t, c = self.t, self.c
        ledger_ref = reply.get("ledger_ref")
        if ledger_ref is None and ("effect_readback" in c or "evidence_gate" in c):
            self.warn("the reply carries no receipt")
        t.record("effect", self.action_id, reply.get("trace_id"), ledger_ref, "refund committed")
        if "effect_readback" in c:
            found = t.lookup(self.action_id)
            if len(found) > 1:
                self.warn("more than one effect for one logical action")
            if found:
                entry = found[0]
                ledger_ref = entry["id"]
                t.record(
                    "readback",
                    self.action_id,
                    entry["trace_id"],
                    ledger_ref,
                    "ledger entry read back",
                )
        if "evidence_gate" in c:
            receipts = t.evidence_read(self.action_id)
            if not any(r["kind"] == "effect" for r in receipts):
                self.warn("the effect receipt is missing from the evidence ledger")
            proved = any(
                r["kind"] in ("effect", "readback")
                and r["ledger_ref"] is not None
                and r["trace_id"] == self.trace_id
                for r in receipts
            )
            if not proved and any(r["ledger_ref"] for r in receipts):
                self.warn("trace lineage from decision to effect is broken")
                if "evidence_repair" in c:
                    proved = self.repair()
            if not proved:
                self.hold("success cannot be proved")
        self.respond("completed", ledger_ref)

    def repair(self) -> bool:
        """Re-derive lineage: join the decision to the ledger entry by logical action id."""
        found = self.t.lookup(self.action_id)
        matches = [
            e
            for e in found
            if e["action_id"] == self.action_id and e["subject"] == self.action["subject"]
        ]
        if len(matches) != 1:
            return False
        self.t.record(
            "repair",
            self.action_id,
            self.trace_id,
            matches[0]["id"],
            "decision joined to ledger entry through the logical action id",
        )
        return True


# -- the agent's own HTTP endpoint ----------------------------------------------------------------


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}
_CLOSE = "Connection: close\r\n"


class Handler(socketserver.StreamRequestHandler):
    """A keep-alive HTTP/1.1 loop, lean like the sandbox's: `http.server` parses every request's
    headers with the e-mail parser and writes a reply in several sends, which an assay that
    posts thousands of tasks pays for on every one. Requests carry Content-Length (the harness
    always sends it); nothing else is needed here."""

    server: AgentServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle(self) -> None:
        rfile = self.rfile
        while True:
            line = rfile.readline(8192)
            parts = line.split()
            if len(parts) != 3:
                return  # the peer closed the connection, or this is not HTTP
            closing = parts[2] == b"HTTP/1.0"
            length = 0
            while True:
                header = rfile.readline(8192)
                if header in (b"\r\n", b"\n", b""):
                    break
                name, _, value = header.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection":
                    closing = value.strip().lower() == b"close"
            body = rfile.read(length) if length else b""
            status, reply = self.answer(parts[0], parts[1], body)
            data = json.dumps(reply).encode()
            head = (
                f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json\r\n"
                f"{_build_header(self.server.config.build)}"
                f"Content-Length: {len(data)}\r\n{_CLOSE if closing else ''}\r\n"
            )
            self.wfile.write(head.encode() + data)
            if closing:
                return

    def answer(self, method: bytes, path: bytes, body: bytes) -> tuple[int, dict[str, Any]]:
        if method == b"GET" and path == b"/healthz":
            return 200, {"ok": True, "controls": sorted(self.server.config.controls)}
        if method != b"POST":
            return 404, {"error": "not found"}
        try:
            task = json.loads(body)
            sandbox = Sandbox(task["sandbox"], task["trial"])
            run = Run(task["task"], task["action_id"], sandbox, self.server.config)
        except (ValueError, KeyError, TypeError) as exc:
            return 400, {"error": f"bad task: {exc}"}
        try:
            claim = run.run()
        except RunCrashed:
            return 200, {"claim": None, "aborted": "run_crashed"}
        except Deferred as exc:
            return 500, {"error": str(exc)}
        except Exception as exc:
            return 500, {"error": f"{type(exc).__name__}: {exc}"}
        return 200, {"claim": claim}


def _build_header(build: str) -> str:
    """The reply's build header (none for an empty build: `--build ''`)."""
    return f"Assaygate-Build: {build}\r\n" if build else ""


class AgentServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    config: Config


def parse_controls(text: str) -> frozenset[str]:
    if text in PRESETS:
        return PRESETS[text]
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = names - frozenset(CONTROLS)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown controls {sorted(unknown)}; presets: {sorted(PRESETS)}; controls: {CONTROLS}"
        )
    return names


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8081, help="0 picks a free port")
    ap.add_argument(
        "--controls",
        type=parse_controls,
        default=PRESETS["typed"],
        help="a preset (typed, typed-repair, naive, baseline) or a comma-separated list",
    )
    for name in CONTROLS:
        flag = name.replace("_", "-")
        ap.add_argument(f"--{flag}", dest=name, action="store_true", help=f"switch {name} on")
        ap.add_argument(f"--no-{flag}", dest=name, action="store_false", help=f"switch {name} off")
    ap.set_defaults(**dict.fromkeys(CONTROLS))
    ap.add_argument("--max-attempts", type=int, default=6)
    ap.add_argument("--backoff-ms", type=int, default=200)
    ap.add_argument("--jitter", choices=("full", "none"), default="full")
    ap.add_argument("--on-warning", choices=("recover", "deny"), default="recover")
    ap.add_argument("--processes", type=int, default=1, help="serve from this many processes")
    ap.add_argument(
        "--build", default=BUILD, help=f"the build named in each reply's header ({BUILD}; '' sends none)"
    )
    args = ap.parse_args(argv)
    controls = set(args.controls)
    for name in CONTROLS:
        if getattr(args, name) is True:
            controls.add(name)
        elif getattr(args, name) is False:
            controls.discard(name)
    server = AgentServer((args.host, args.port), Handler)
    server.config = Config(
        frozenset(controls),
        args.max_attempts,
        args.backoff_ms,
        args.on_warning == "deny",
        args.jitter == "full",
        args.build,
    )
    print(f"listening on http://{args.host}:{server.server_address[1]}", flush=True)
    children: list[int] = []
    for _ in range(max(1, args.processes) - 1):
        pid = os.fork()
        if pid == 0:
            server.serve_forever()
            os._exit(0)
        children.append(pid)

    def stop(signum: int, frame: object) -> None:
        for pid in children:
            os.kill(pid, signal.SIGTERM)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        stop(signal.SIGINT, None)


if __name__ == "__main__":
    main()
