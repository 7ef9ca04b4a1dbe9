"""An HTTP agent (standard library only) that tries one way to earn a green, chosen by `--mode`.

    python tests/adversarial/agents/liar_http.py --port 0 --mode MODE

MODE:
  ghost         calls no tool; replies `completed` citing `L-999`
  double-claim  refunds once, keyed and proved, then posts its claim AND replies with it
  dup-then-500  retries a failed refund with a fresh key (a duplicate), then answers 500
  hang          never answers in time (sleeps 30 s)
  surrogate     says half a UTF-16 surrogate pair and NUL (JSON escapes on the wire) in its
                evidence, its posted claim and its reply's claim and reason
  hoard         posts HOARD_CLAIMS claims whose reference is almost 1 MiB (what a request may
                carry), then replies with one more: megabytes for the gate to store per trial
"""

from __future__ import annotations

import argparse
import http.client
import json
import secrets
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


class Sandbox:
    """One trial's tool endpoints."""

    def __init__(self, body: dict[str, Any]) -> None:
        parts = urlsplit(body["sandbox"])
        self.conn = http.client.HTTPConnection(
            parts.hostname or "127.0.0.1", parts.port, timeout=30
        )
        self.token = body["trial"]
        self.task = body["task"]
        self.action_id = body["action_id"]

    def call(self, path: str, data: dict[str, Any], **headers: str) -> tuple[int, Any]:
        h = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        h.update({k.replace("_", "-"): v for k, v in headers.items()})
        self.conn.request("POST", path, json.dumps(data), h)
        resp = self.conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, None

    def decide(self) -> str:
        _, reply = self.call("/v1/ids/trace", {})
        trace: str = reply["trace_id"]
        self.record("decision", trace, None)
        return trace

    def refund(self, key: str, trace: str) -> int:
        t = self.task
        body = {
            "subject": t["order_id"],
            "tenant": t["tenant"],
            "amount": t["amount"],
            "grant_id": t["grant_id"],
            "expected_version": None,
        }
        status, _ = self.call(
            "/v1/payments/refunds",
            body,
            Idempotency_Key=key,
            Assaygate_Action_Id=self.action_id,
            traceparent=f"00-{trace}-{secrets.token_hex(8)}-01",
        )
        return status

    def lookup(self) -> list[dict[str, Any]]:
        _, reply = self.call("/v1/payments/lookup", {"action_id": self.action_id})
        return list(reply["entries"])

    def record(self, kind: str, trace: str | None, ref: str | None) -> None:
        body = {
            "kind": kind,
            "action_id": self.action_id,
            "trace_id": trace,
            "ledger_ref": ref,
            "detail": kind,
        }
        self.call("/v1/evidence/record", body)

    def sleep(self, ms: int) -> None:
        self.call("/v1/clock/sleep", {"ms": ms})


def claim(status: str, action_id: str, ref: str | None) -> dict[str, Any]:
    return {"status": status, "action_id": action_id, "ledger_ref": ref}


def ghost(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return 200, {"claim": claim("completed", body["action_id"], "L-999")}


def double_claim(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    sb = Sandbox(body)
    trace = sb.decide()
    for _ in range(6):
        if sb.refund(sb.action_id, trace) == 200 or sb.lookup():
            break
        sb.sleep(1_000)
    [entry] = sb.lookup()
    sb.record("effect", entry["trace_id"], entry["id"])
    sb.record("readback", entry["trace_id"], entry["id"])
    mine = claim("completed", sb.action_id, entry["id"])
    sb.call("/v1/claims", mine)
    return 200, {"claim": mine}


def dup_then_500(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    sb = Sandbox(body)
    trace = sb.decide()
    for _ in range(3):
        if sb.refund(secrets.token_hex(8), trace) == 200:  # a fresh key per attempt
            break
        sb.sleep(1_000)
    return 500, {"error": "internal error"}


HOARD_CLAIMS = 4
HOARD_CHARS = 1000 * 1000


def hoard(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    sb = Sandbox(body)
    for i in range(HOARD_CLAIMS):
        sb.call("/v1/claims", claim("completed", sb.action_id, f"L-{i}-" + "x" * HOARD_CHARS))
    return 200, {"claim": claim("completed", sb.action_id, "L-last-" + "y" * HOARD_CHARS)}


def hang(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    time.sleep(30)
    return 200, {"claim": None}


POISON = "\ud800\x00"


def surrogate(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    sb = Sandbox(body)
    trace = sb.decide()
    sb.record("anomaly", trace, f"L-{POISON}")
    poisoned = claim("completed", sb.action_id + POISON, f"L-{POISON}")
    sb.call("/v1/claims", {**poisoned, "reason": POISON})
    return 200, {"claim": {**poisoned, "reason": f"done {POISON}"}}


MODES = {
    "ghost": ghost,
    "double-claim": double_claim,
    "dup-then-500": dup_then_500,
    "hang": hang,
    "surrogate": surrogate,
    "hoard": hoard,
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "ghost"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status, reply = MODES[self.mode](body)
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--mode", choices=sorted(MODES), required=True)
    args = ap.parse_args()
    Handler.mode = args.mode
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
