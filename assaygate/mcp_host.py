"""`python -m assaygate.mcp_host [--framework KIND] module:callable`: serve an MCP runner's python
agent over the http runner protocol (with `--framework`, a LangGraph graph or an OpenAI Agents SDK
agent: `assaygate.frameworks`).

Prints one JSON line (`{"url": ...}` or `{"error": ...}`) and serves until stdin closes, so the
child never outlives the assay process. Each POST `{"task", "mcp_url"}` calls
`callable(task, mcp_url)` and answers its claim as JSON.

It lives in the public package and imports only the standard library at start (a framework kind
imports its framework when the agent is loaded), so the agent's own packages may have any name
but `assaygate`: a team package named `service` or `worker` is the team's, locally and in the
sandbox (`service.mcp.runners.PythonRunner` starts it).
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def main() -> None:
    # `--framework KIND module:attribute`: a LangGraph graph or an OpenAI Agents SDK agent.
    framework = sys.argv[2] if sys.argv[1] == "--framework" else None
    entrypoint = sys.argv[-1]
    module_name, _, attr = entrypoint.partition(":")
    try:
        if framework is not None:
            from assaygate.frameworks import runner_for

            fn: Any = runner_for(framework, entrypoint)
        else:
            fn = importlib.import_module(module_name)
            for part in attr.split("."):
                fn = getattr(fn, part)
    except Exception as exc:
        print(json.dumps({"error": f"cannot load {entrypoint!r}: {exc}"}), flush=True)
        return

    class Handler(BaseHTTPRequestHandler):
        # Keep-alive (every reply has a length) and no Nagle delay: one connection serves the
        # assay's runs, each reply leaves in one go.
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            try:
                claim = fn(body["task"], body["mcp_url"])
                data, code = json.dumps(claim).encode(), 200
            except Exception as exc:
                data, code = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode(), 500
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    # In the sandbox the gate names the port its inbound relay forwards to
    # (service.sandbox.bwrap.LISTEN_ENV); elsewhere any free port.
    server = ThreadingHTTPServer(
        ("127.0.0.1", int(os.environ.get("ASSAYGATE_LISTEN_PORT") or 0)), Handler
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"url": f"http://127.0.0.1:{server.server_address[1]}/"}), flush=True)
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
