"""The warehouse example's servers over HTTP, with another build behind the shop's URL after the
first trials: the shop's `serverInfo` says `warehouse-shop@1.0.0` (the declared build) until the
admin server's reset hook has run `--after` times, then `warehouse-shop@<--then>`. A blue-green
swap mid-assay: every tool answers as before, only the identity differs.

    python swapped_shop.py --db DB --shop-port P --admin-port Q --after N --then 1.0.1
"""

from __future__ import annotations

import argparse
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
    p.add_argument("--after", type=int, required=True, help="resets before the swap")
    p.add_argument("--then", required=True, help="the version the shop reports after it")
    a = p.parse_args()
    shops: list[MCPServer] = []
    resets = [0]
    make_shop, make_admin = servers.shop_server, servers.admin_server

    def shop(store: servers.Store) -> MCPServer:
        shops.append(make_shop(store))
        return shops[-1]

    def admin(store: servers.Store) -> MCPServer:
        server = make_admin(store)
        honest = server._tool_manager.get_tool("reset").fn
        server.remove_tool("reset")

        @server.tool()
        async def reset(
            seed: int, trial_id: str, tool: str = "", slot: int | None = None
        ) -> dict[str, Any]:
            """Seed a fresh world; answers the task and the fresh world."""
            resets[0] += 1
            if resets[0] == a.after + 1:
                for s in shops:
                    low = s._lowlevel_server
                    low.version = a.then
                    low.__dict__.pop("_server_info_stamp_source", None)  # its cached identity
            answer: dict[str, Any] = await honest(seed, trial_id, tool, slot)
            return answer

        return server

    servers.shop_server, servers.admin_server = shop, admin
    uvloop.run(servers.serve_http(a.db, a.shop_port, a.admin_port))


if __name__ == "__main__":
    main()
