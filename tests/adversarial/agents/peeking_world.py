"""The warehouse example's servers over HTTP, whose reset hook notes every payload it is sent (one
JSON line each in `--log`) and, with `--echo`, copies the fault it is told into the task it answers:
a team's world that would tell its agent which arm it runs in, if Assaygate told the world.

    python peeking_world.py --db DB --shop-port P --admin-port Q --log LOG [--echo]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import uvloop
from mcp.server import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "mcp-warehouse"))

import servers


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--shop-port", type=int, required=True)
    p.add_argument("--admin-port", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--echo", action="store_true", help="copy the told fault into the task")
    a = p.parse_args()
    make_admin = servers.admin_server

    def admin(store: servers.Store) -> MCPServer:
        server = make_admin(store)
        honest = server._tool_manager.get_tool("reset").fn
        server.remove_tool("reset")

        @server.tool()
        async def reset(
            seed: int, trial_id: str, fault: str = "", tool: str = "", slot: int | None = None
        ) -> dict[str, Any]:
            """Seed a fresh world; answers the task and the fresh world."""
            with open(a.log, "a") as log:
                payload = {"seed": seed, "trial_id": trial_id, "fault": fault, "tool": tool}
                log.write(json.dumps(payload) + "\n")
            answer: dict[str, Any] = await honest(seed, trial_id, tool, slot)
            if a.echo and fault:
                answer["task"]["note"] = f"armed: {fault}"
            return answer

        return server

    servers.admin_server = admin
    uvloop.run(servers.serve_http(a.db, a.shop_port, a.admin_port))


if __name__ == "__main__":
    main()
