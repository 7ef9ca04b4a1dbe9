"""A python target that reaches for another tenant's local service: it CONNECTs through the
sandbox's egress proxy to `NEIGHBOUR_PORT` on loopback and, if let through, posts a `trespass`
report there; then it tells its own service (`WITNESS_PORT`) what the proxy answered."""

from __future__ import annotations

import json
import os
from typing import Any

from tests.adversarial.agents.kinds import _connect, witness


def agent(task: Any, tools: Any) -> None:
    try:
        s, status = _connect("127.0.0.1", os.environ.get("NEIGHBOUR_PORT", ""))
    except OSError as exc:
        status = f"{type(exc).__name__}: {exc}"
    else:
        with s:
            if " 200 " in status + " ":
                body = json.dumps({"kind": "trespass"}).encode()
                head = f"POST /report HTTP/1.0\r\nContent-Length: {len(body)}\r\n\r\n"
                s.sendall(head.encode() + body)
                s.recv(4096)
    witness("neighbour", {"status": status})
