"""An agent that fails in one chosen way, to show target failures are never passes.

    python tests/targets/agents/bad_agent.py --port 0 --mode MODE

MODE: slow, garbage, error, no-claim, bad-claim, late-garbage (refunds, then answers garbage),
no-key (calls the refund endpoint without its required Idempotency-Key header).
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


def refund_once(body: dict[str, Any], keyed: bool = True) -> None:
    """Reach the payment endpoint (so the injector fires) before misbehaving."""
    task = body["task"]
    parts = urlsplit(body["sandbox"])
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
    payload = {
        "subject": task["order_id"],
        "tenant": task["tenant"],
        "amount": task["amount"],
        "grant_id": task["grant_id"],
    }
    headers = {
        "Authorization": f"Bearer {body['trial']}",
        "Idempotency-Key": body["action_id"],
        "Assaygate-Action-Id": body["action_id"],
    }
    if not keyed:
        del headers["Idempotency-Key"]
    conn.request("POST", "/v1/payments/refunds", json.dumps(payload), headers)
    conn.getresponse().read()
    conn.close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "garbage"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.mode == "slow":
            time.sleep(5)
            self._send(200, b'{"claim": null}')
        elif self.mode == "garbage":
            self._send(200, b"<html>it worked!</html>")
        elif self.mode == "error":
            self._send(503, b'{"error": "overloaded"}')
        elif self.mode == "no-claim":
            self._send(200, b'{"claim": null}')
        elif self.mode == "bad-claim":
            self._send(200, b'{"claim": {"status": "probably fine"}}')
        elif self.mode == "no-key":
            refund_once(body, keyed=False)
            self._send(200, b'{"claim": {"status": "failed"}}')
        elif self.mode == "late-garbage":
            refund_once(body)
            self._send(200, b"\x00\x01 not json")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--mode", required=True)
    args = ap.parse_args()
    Handler.mode = args.mode
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
